"""Rendered launcher prefixes of the training rule (single node, multi-node)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from spag.launch import (
    RDZV_PORT,
    multinode_resources,
    rendezvous_port_expr,
    srun_torchrun_prefix,
    torchrun_prefix,
)


def _flag(words: list[str], name: str) -> str:
    """Value that follows ``name`` in a rendered command."""
    return words[words.index(name) + 1]


@pytest.mark.parametrize("gpus", [0, 1])
def test_single_process_has_no_launcher(gpus):
    assert torchrun_prefix(gpus, 1) == ""


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_one_node_starts_one_process_per_gpu(gpus):
    words = shlex.split(torchrun_prefix(gpus, 1))
    assert words[0] == "torchrun"
    assert "--standalone" in words
    assert "--no-python" in words  # the rule's command is `spag train`, not a script
    assert _flag(words, "--nproc_per_node") == str(gpus)
    assert "srun" not in words


@pytest.mark.parametrize(("gpus", "nodes"), [(8, 2), (4, 16), (1, 3), (0, 2)])
def test_several_nodes_use_srun_and_a_rendezvous(gpus, nodes):
    prefix = torchrun_prefix(gpus, nodes)
    assert prefix == srun_torchrun_prefix(gpus, nodes)
    words = shlex.split(prefix)
    # one srun task per node, each a torchrun with one process per GPU
    assert words[0] == "srun"
    assert _flag(words, "--nodes") == str(nodes)
    assert _flag(words, "--ntasks") == str(nodes)
    assert _flag(words, "--ntasks-per-node") == "1"
    assert "--kill-on-bad-exit=1" in words
    t = words.index("torchrun")
    torchrun = words[t:]
    assert _flag(torchrun, "--nnodes") == str(nodes)
    assert _flag(torchrun, "--nproc_per_node") == str(max(gpus, 1))
    assert _flag(torchrun, "--rdzv_backend") == "c10d"
    assert _flag(torchrun, "--rdzv_id") == "${SLURM_JOB_ID:-0}"
    assert "--standalone" not in torchrun
    # the rendezvous host is the first node: the batch host, named in the job's shell
    host, _, port = _flag(torchrun, "--rdzv_endpoint").partition(":")
    assert host == "$(hostname)"
    assert port == rendezvous_port_expr(RDZV_PORT)


def test_rendezvous_port_is_offset_by_job_id():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not on PATH")
    expr = rendezvous_port_expr(29500)
    out = subprocess.run(
        [bash, "-c", f"echo {expr}"],
        env={"SLURM_JOB_ID": "123456"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(29500 + 123456 % 1000)
    out = subprocess.run(
        [bash, "-c", f"echo {expr}"], env={}, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "29500"


def test_rendered_prefix_survives_the_job_shell():
    """The prefix is pasted into a rule's shell line: it must parse as shell words."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not on PATH")
    prefix = torchrun_prefix(8, 4)
    # `bash -n` parses without running: unbalanced quotes or $( ) would fail here
    subprocess.run([bash, "-n", "-c", f"{prefix} spag train --help"], check=True)


@pytest.mark.parametrize(("gpus", "nodes"), [(0, 0), (-1, 1), (1, -2), (True, 1), (1.5, 2)])
def test_invalid_shapes_are_rejected(gpus, nodes):
    with pytest.raises(ValueError, match="invalid launch shape"):
        torchrun_prefix(gpus, nodes)


def test_multinode_resources():
    assert multinode_resources(8, 1) == {}
    res = multinode_resources(8, 2)
    # gres is per node; gpu=N would be N GPUs for the whole job
    assert res == {"nodes": 2, "tasks": 2, "mpi": "srun", "gres": "gpu:8"}
    assert "gpu" not in res
    assert "gres" not in multinode_resources(0, 3)


class _Resources(dict):
    """Job resources as the SLURM plugin reads them (attribute and .get access)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


def _sbatch_call(resources: dict, threads: int) -> list[str]:
    submit = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")
    job = SimpleNamespace(resources=_Resources(resources), threads=threads, name="train_spag")
    params = {
        "run_uuid": "run",
        "slurm_logfile": "slurm.log",
        "comment_str": "rule_train_spag",
        "account": "",
        "partition": "-p gpu",
        "workdir": "/work",
    }
    return shlex.split(submit.get_submit_command(job, params) + utils.set_gres_string(job))


def test_plugin_submits_a_multinode_training_job_as_intended():
    """The plugin turns multinode_resources into one task per node, G GPUs per node."""
    words = _sbatch_call({"runtime": 60, "mem_mb": 64000, **multinode_resources(8, 2)}, 16)
    assert "--nodes=2" in words
    assert "--ntasks=2" in words  # one srun task (one torchrun) per node
    assert "--gres=gpu:8" in words  # per node
    assert not any(w.startswith("--gpus") for w in words)  # --gpus would count the job
    assert "--cpus-per-task=16" in words


def test_plugin_submits_a_one_node_training_job_with_its_gpus():
    words = _sbatch_call({"runtime": 60, "mem_mb": 64000, "gpu": 4}, 8)
    assert "--gpus=4" in words
    assert "--cpus-per-task=8" in words
    assert not any(w.startswith(("--nodes", "--gres")) for w in words)
