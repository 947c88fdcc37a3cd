"""Launcher prefixes of the training rule, and the SLURM requests of every rule family."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from workflow_utils import deep_merge

from spag.config import load_schema
from spag.ops.cluster import (
    DEFAULT_GROWTH_CAP,
    RDZV_PORT,
    ceiling,
    check_slurm_extra,
    family_resources,
    growing,
    grown,
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
    # The GPUs leased first where no scheduler chose them (spag.ops.gpu_lease).
    assert words[:3] == ["spag", "gpu-lease", str(gpus)]
    assert words[3] == "torchrun"
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


@pytest.mark.parametrize(("gpus", "nodes", "cpus"), [(8, 2, 64), (4, 3, 6), (2, 2, 1)])
def test_every_node_step_asks_for_its_cpus_and_gpus(gpus, nodes, cpus):
    """The inner srun carries the node's CPUs and GPUs (the job-step plugin strips SLURM_*
    and srun does not inherit --cpus-per-task), and every rank its share of the CPUs."""
    words = shlex.split(torchrun_prefix(gpus, nodes, cpus))
    assert words[:2] == ["env", f"OMP_NUM_THREADS={max(cpus // gpus, 1)}"]
    srun = words[2 : words.index("torchrun")]
    assert srun[0] == "srun"
    assert _flag(srun, "--cpus-per-task") == str(cpus)
    assert f"--gres=gpu:{gpus}" in srun


def test_cpu_nodes_ask_for_no_gpus():
    words = shlex.split(torchrun_prefix(0, 2, 16))
    assert words[:2] == ["env", "OMP_NUM_THREADS=16"]
    assert not [w for w in words if "gpu" in w]


@pytest.mark.parametrize(("gpus", "cpus", "threads"), [(8, 64, 8), (2, 3, 1), (4, 2, 1)])
def test_one_node_ranks_share_the_cpus(gpus, cpus, threads):
    # torchrun alone would give every rank OMP_NUM_THREADS=1
    words = shlex.split(torchrun_prefix(gpus, 1, cpus))
    assert words[:2] == ["env", f"OMP_NUM_THREADS={threads}"]
    assert words[2:6] == ["spag", "gpu-lease", str(gpus), "torchrun"]
    assert torchrun_prefix(1, 1, cpus) == ""


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
    prefix = torchrun_prefix(8, 4, 64)
    # `bash -n` parses without running: unbalanced quotes or $( ) would fail here
    subprocess.run([bash, "-n", "-c", f"{prefix} spag train --help"], check=True)


@pytest.mark.parametrize(("gpus", "nodes"), [(0, 0), (-1, 1), (1, -2), (True, 1), (1.5, 2)])
def test_invalid_shapes_are_rejected(gpus, nodes):
    with pytest.raises(ValueError, match="invalid launch shape"):
        torchrun_prefix(gpus, nodes)


def test_multinode_resources():
    assert multinode_resources(8, 1) == {}
    res = multinode_resources(8, 2)
    # gres is per node; gpu=N would be N GPUs for the whole job; tasks_per_gpu=0 keeps
    # the plugin from turning `tasks` into --ntasks-per-gpu
    assert res == {"nodes": 2, "tasks": 2, "tasks_per_gpu": 0, "mpi": "srun", "gres": "gpu:8"}
    assert "gpu" not in res
    assert "gres" not in multinode_resources(0, 3)


# ---------------------------------------------------------------- retries
@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (None, [100, 200, 200]),  # default ceiling: 2 x the first attempt
        (250, [100, 200, 250]),
        (1000, [100, 200, 300]),  # a ceiling out of reach: plain growth
        (100, [100, 100, 100]),  # no growth at all
    ],
)
def test_growth_is_capped(cap, expected):
    assert [grown(100, attempt, cap) for attempt in (1, 2, 3)] == expected
    # the callable Snakemake evaluates at each attempt gives the same
    resource = growing(100, cap)
    assert [resource(None, attempt) for attempt in (1, 2, 3)] == expected


def test_default_ceiling():
    assert DEFAULT_GROWTH_CAP == 2
    assert ceiling(900000, None) == 1800000
    assert ceiling(900000, 1000000) == 1000000


def test_a_ceiling_below_the_first_attempt_is_refused():
    with pytest.raises(ValueError, match=r"resources\.train\.max_mem_mb: ceiling 500 is below"):
        family_resources(_family(mem_mb=1000, max_mem_mb=500), "resources.train")
    with pytest.raises(ValueError, match=r"resources\.cpu\.max_runtime"):
        family_resources(_family(runtime=60, max_runtime=30), "resources.cpu")


def test_paper_config_retries_stay_within_its_ceilings():
    config = _config(REPO / "configs" / "paper-llama2-7b.yaml")
    for kind, r in config["resources"].items():
        res = family_resources(r, f"resources.{kind}")
        assert r["max_mem_mb"] is not None and r["max_runtime"] is not None, kind
        for attempt in (1, 2, 3):
            assert res["mem_mb"](None, attempt) <= r["max_mem_mb"], kind
            assert res["runtime"](None, attempt) <= r["max_runtime"], kind
    train = family_resources(config["resources"]["train"], "resources.train")
    # the second training attempt used to ask 1.8 TB and 96 h
    assert train["mem_mb"](None, 2) == 1000000
    assert train["runtime"](None, 2) == 2880


# ---------------------------------------------------------------- sbatch through the plugin
REPO = Path(__file__).resolve().parents[1]
SLURM_README = REPO / "profiles" / "slurm" / "README.md"


def _config(*overlays: Path | dict) -> dict:
    """config.yaml with overlays on top, validated (defaults filled) as the workflow does."""
    from spag.config import validate_config

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for overlay in overlays:
        layer = overlay if isinstance(overlay, dict) else yaml.safe_load(overlay.read_text())
        config = deep_merge(config, layer)
    return validate_config(config, source="test")


def _family(**values) -> dict:
    """One `resources.<family>` entry with the schema's defaults filled in."""
    props = load_schema()["$defs"]["resources"]["properties"]
    return {key: prop["default"] for key, prop in props.items()} | values


class _Resources(dict):
    """Job resources as the SLURM plugin reads them (attribute and .get access)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


def _job(resources: dict, threads: int, attempt: int = 1) -> SimpleNamespace:
    # Snakemake evaluates callable resources with the job's wildcards and attempt.
    evaluated = {k: v(None, attempt) if callable(v) else v for k, v in resources.items()}
    return SimpleNamespace(resources=_Resources(evaluated), threads=threads, name="rule")


def _sbatch(resources: dict, threads: int, attempt: int = 1) -> dict[str, str | None]:
    """The flags of the sbatch line the plugin's executor builds, as {flag: value}.

    As in the executor's run_job: validate slurm_extra, get_submit_command with the
    account and partition arguments, then the gres/gpus string.
    """
    submit = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")
    validation = pytest.importorskip("snakemake_executor_plugin_slurm.validation")
    job = _job(resources, threads, attempt)
    validation.validate_slurm_extra(job)
    params = {
        "run_uuid": "run",
        "slurm_logfile": "slurm.log",
        "comment_str": "rule_x",
        "account": "",
        "partition": "-p gpu",
        "workdir": "/work",
    }
    words = shlex.split(submit.get_submit_command(job, params) + utils.set_gres_string(job))
    assert words[0] == "sbatch"
    flags: dict[str, str | None] = {}
    rest = words[1:]
    i = 0
    while i < len(rest):
        assert rest[i].startswith("-"), f"stray word {rest[i]!r} in {words}"
        name, eq, value = rest[i].partition("=")
        if not eq:
            # `-t 60`, `--mem 64000`: the value is the next word; `--exclusive` has none
            has_value = i + 1 < len(rest) and not rest[i + 1].startswith("-")
            value = rest[i + 1] if has_value else None
            i += has_value
        assert name not in flags, f"{name} given twice: {words}"
        flags[name] = value
        i += 1
    return flags


# Flags of every submission, whatever the job.
_COMMON = {
    "--parsable": None,
    "--job-name": "run",
    "--output": "slurm.log",
    "--export": "ALL",
    "--comment": "rule_x",
    "-p": "gpu",
    "-D": "/work",
}


SHAPES = {
    # one-node training: 8 GPUs on one node, one process per GPU from torchrun
    "train_one_node": (
        _family(gpus=8, nodes=1, cpus=64, mem_mb=900000, max_mem_mb=1000000, runtime=2880),
        {"-t": "2880", "--mem": "900000", "--nodes": "1", "--gpus": "8", "--cpus-per-task": "64"},
    ),
    # multi-node training: one task (torchrun) per node, 8 GPUs per node
    "train_two_nodes": (
        _family(gpus=8, nodes=2, cpus=32, mem_mb=400000, runtime=1440),
        {
            "-t": "1440",
            "--mem": "400000",
            "--nodes": "2",
            "--ntasks": "2",
            "--gres": "gpu:8",
            "--cpus-per-task": "32",
        },
    ),
    # a self-play shard: one GPU
    "selfplay_shard": (
        _family(gpus=1, cpus=8, mem_mb=64000, runtime=360),
        {"-t": "360", "--mem": "64000", "--nodes": "1", "--gpus": "1", "--cpus-per-task": "8"},
    ),
    # a CPU step
    "cpu": (
        _family(cpus=2, mem_mb=16000, runtime=60),
        {"-t": "60", "--mem": "16000", "--ntasks": "1", "--cpus-per-task": "2"},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_plugin_submits_each_shape_exactly(shape):
    """Every flag of the sbatch line: the wanted ones, and nothing else."""
    family, flags = SHAPES[shape]
    res = family_resources(family, f"resources.{shape}")
    assert _sbatch(res, threads=family["cpus"]) == _COMMON | flags


def test_multinode_training_has_no_per_gpu_task_geometry():
    family, _ = SHAPES["train_two_nodes"]
    flags = _sbatch(family_resources(family), threads=32)
    # --ntasks-per-gpu=2 would start 2 tasks per GPU (16 per node) instead of 1 per node;
    # --gpus would count GPUs for the whole job, not per node
    assert "--ntasks-per-gpu" not in flags
    assert not {"--gpus", "--gpus-per-node", "--ntasks-per-node"} & set(flags)
    assert flags["--nodes"] == flags["--ntasks"] == "2"


def test_gpu_jobs_never_ask_for_gpus_twice():
    for family, _ in SHAPES.values():
        flags = _sbatch(family_resources(family), threads=family["cpus"])
        assert not ("--gpus" in flags and "--gres" in flags), flags


def test_one_node_gpu_step_stays_on_its_node():
    """The plugin's job step runs a one-node job as `srun -n1 --gpus=G --nodes=1`."""
    jobstep = pytest.importorskip("snakemake_executor_plugin_slurm_jobstep")
    for name in ("train_one_node", "selfplay_shard"):
        family, _ = SHAPES[name]
        job = _job(family_resources(family), family["cpus"])
        assert "mpi" not in job.resources
        assert jobstep.get_gpu_setting(job) == f"--gpus={family['gpus']}"
        assert jobstep.get_node_setting(job) == "--nodes=1"
    # multi-node: the command runs unwrapped (mpi), its own srun spreads over the nodes
    family, _ = SHAPES["train_two_nodes"]
    assert "mpi" in _job(family_resources(family), 32).resources


@pytest.mark.parametrize(("attempt", "mem", "time"), [(1, 900000, 1440), (2, 1000000, 2880)])
def test_retries_ask_for_more_up_to_the_ceilings(attempt, mem, time):
    family = _family(
        gpus=8, cpus=64, mem_mb=900000, max_mem_mb=1000000, runtime=1440, max_runtime=2880
    )
    flags = _sbatch(family_resources(family), threads=64, attempt=attempt)
    assert (flags["--mem"], flags["-t"]) == (str(mem), str(time))
    assert _sbatch(family_resources(family), threads=64, attempt=3) == _sbatch(
        family_resources(family), threads=64, attempt=2
    )


def test_constraint_qos_and_extra_flags_reach_sbatch():
    family = _family(
        gpus=1,
        cpus=8,
        mem_mb=64000,
        runtime=360,
        slurm_partition="a100",
        slurm_account="proj",
        constraint="a100|h100",
        qos="high",
        slurm_extra="--exclusive --mail-type=FAIL",
    )
    res = family_resources(family, "resources.selfplay")
    assert {k: res[k] for k in ("constraint", "qos", "slurm_extra")} == {
        "constraint": "a100|h100",
        "qos": "high",
        "slurm_extra": "--exclusive --mail-type=FAIL",
    }
    flags = _sbatch(res, threads=8)
    # partition and account arrive through the executor's own arguments (tested above)
    assert flags["-C"] == "a100|h100"
    assert flags["--qos"] == "high"
    assert flags["--exclusive"] is None
    assert flags["--mail-type"] == "FAIL"


def _documented_extras() -> list[str]:
    """slurm_extra examples of the schema and of profiles/slurm/README.md."""
    props = load_schema()["$defs"]["resources"]["properties"]
    examples = re.findall(r'e\.g\. "([^"]+)"', props["slurm_extra"]["description"])
    readme = SLURM_README.read_text()
    examples += re.findall(r'slurm_extra: "([^"]+)"', readme)
    row = next(line for line in readme.splitlines() if line.startswith("| `slurm_extra`"))
    examples += re.findall(r"e\.g\. `([^`]+)`", row)
    return examples


def test_documented_slurm_extra_examples_pass_the_plugins_check():
    validation = pytest.importorskip("snakemake_executor_plugin_slurm.validation")
    examples = _documented_extras()
    assert len(examples) >= 3, examples
    for extra in examples:
        validation.validate_slurm_extra(_job({"slurm_extra": extra}, 1))
        check_slurm_extra(extra, "resources.train.slurm_extra")


def test_readme_cluster_overlay_is_valid_and_submits():
    """The overlay in profiles/slurm/README.md: a valid config the plugin accepts."""
    text = SLURM_README.read_text()
    block = re.search(r"```yaml\n(# cluster\.yaml.*?)```", text, re.S).group(1)
    config = _config(yaml.safe_load(block))
    for kind, r in config["resources"].items():
        res = family_resources(r, f"resources.{kind}")
        flags = _sbatch(res, threads=r["cpus"])
        assert not ("--gpus" in flags and "--gres" in flags)
    train = _sbatch(family_resources(config["resources"]["train"]), threads=64, attempt=3)
    assert train["-C"] == "a100" and train["--qos"] == "high"
    assert (train["--mem"], train["-t"]) == ("1000000", "2880")


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("--qos=high", "qos"),
        ("--constraint=a100", "constraint"),
        ("-C a100", "constraint"),
        ("--gres=gpu:8", "gpus"),
        ("--time=2880", "runtime"),
    ],
)
def test_flags_the_plugin_manages_are_refused_in_slurm_extra(extra, key):
    validation = pytest.importorskip("snakemake_executor_plugin_slurm.validation")
    from snakemake_interface_common.exceptions import WorkflowError

    with pytest.raises(WorkflowError):
        validation.validate_slurm_extra(_job({"slurm_extra": extra}, 1))
    # refused already when the rules are parsed, naming the key to use instead
    with pytest.raises(ValueError, match=rf"set it with resources\.train\.{key}\b"):
        family_resources(_family(slurm_extra=extra), "resources.train")
