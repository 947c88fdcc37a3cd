"""Training on two SLURM nodes for real: scripts/start-slurm-two-node.sh's test cluster.

Two slurmd, each in its own network and UTS namespace (own address and host name), and
a slurmctld on the host: a cluster of its own beside the one-node cluster of the other
`slurm` tests (own SLURM_CONF, ports, state, pid and log files), started and stopped
here. The imitation stage's training, with `resources.train.nodes: 2`, runs through the
workflow and the SLURM profile: ZeRO-3 on CPU (gloo), one rank per node, ranks meeting
through the inner `srun` + `torchrun` c10d rendezvous on the first node. Mid-training
the second node's slurmd is killed: SLURM sets the node DOWN and ends the job
(NODE_FAIL), the node's slurmd comes back, and Snakemake's retry resumes from the last
complete checkpoint. The model then equals a one-node run's (both ranks under
`torchrun --standalone` on this host, same command) to float tolerance.

Skips, saying why, without root, network namespaces (`ip netns add`), the SLURM
daemons or torchrun. Each rank records what it saw (host, SLURM_NODEID, CPU
affinity, threads, RANK) through a `sitecustomize` put on the jobs' PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_slurm import CLUSTER_PROFILE, make_workdir, snakemake_cmd

from spag.training.extensions import extensions_dir

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
START = REPO / "scripts" / "start-slurm-two-node.sh"
STOP = REPO / "scripts" / "stop-slurm-two-node.sh"
# Paths and names fixed by start-slurm-two-node.sh.
SLURM_CONF = "/etc/slurm-two-node/slurm.conf"
PID_DIR = Path("/run/slurm-two-node")
LOG_DIR = Path("/var/log/slurm-two-node")
NODES = ("spag-n1", "spag-n2")
KILLED = "spag-n2"
# Seconds one Snakemake run may take.
RUN_TIMEOUT = int(os.environ.get("SPAG_SLURM_RUN_TIMEOUT", "600"))

MODEL = "results/imitation/model"
SCORED = "results/imitation/scored.parquet"
CHECKPOINTS = "checkpoints/imitation"
TRAIN_LOG = "results/logs/imitation/train.log"
MAX_STEPS = 24
SAVE_STEPS = 3
# Seconds added to each step of the first attempt (the retry runs at full speed): before
# the kill, so that the test sees the first checkpoint before training ends; after it,
# so that the job still trains when SLURM sets the node DOWN (here 25-35 s after the
# kill, with SlurmdTimeout=10 in start-slurm-two-node.sh).
SLOW_BEFORE_KILL = 0.5
SLOW_AFTER_KILL = 5


def overlay(cpus: int) -> dict:
    """The tiny pipeline's imitation stage, ZeRO-3 on CPU over two nodes of ``cpus``."""
    return {
        "epochs": 1,
        "base_model": {"tiny": {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64}},
        "words": {"num_train": 8, "num_test": 4},
        "imitation": {
            "deepspeed": "zero3",
            "num_train_epochs": 100,  # max_steps decides
            "max_steps": MAX_STEPS,
            "save_steps": SAVE_STEPS,
            "per_device_batch_size": 4,
            "gradient_accumulation_steps": 1,
            "max_length": 256,
        },
        "resources": {
            # memory and time without growth: a retry fits the nodes as the first did
            "train": {"gpus": 0, "nodes": 2, "cpus": cpus, "mem_mb": 1500, "max_mem_mb": 1500,
                      "runtime": 10, "max_runtime": 10},
            "score": {"gpus": 0, "cpus": 1, "mem_mb": 1500, "runtime": 10},
            "cpu": {"cpus": 1, "mem_mb": 1000, "runtime": 10},
        },
    }  # fmt: skip


# Put on the jobs' PYTHONPATH. Every `spag train` rank (RANK set) records what it saw, at
# start and at exit. While the file SPAG_TEST_SLOW_FILE exists, each training step takes
# the seconds it holds longer (the weights are untouched): the test's hand on the pace,
# so that the job still trains when SLURM notices the lost node.
PROBE = """\
import os, sys
if os.environ.get("SPAG_TEST_RANK_LOG") and "RANK" in os.environ and sys.argv[1:2] == ["train"]:
    import atexit, importlib.abc, importlib.util, json, socket, time

    def _record(event, **extra):
        e = os.environ
        keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                "OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID",
                "SLURM_PROCID", "SLURM_CPUS_PER_TASK")
        row = {"event": event, "host": socket.gethostname(), "pid": os.getpid(),
               "affinity": sorted(os.sched_getaffinity(0)), **{k: e.get(k) for k in keys},
               **extra}
        with open(e["SPAG_TEST_RANK_LOG"], "a") as fh:
            fh.write(json.dumps(row) + "\\n")

    _record("start")

    def _at_exit():
        torch = sys.modules.get("torch")
        _record("exit", torch_threads=torch.get_num_threads() if torch else None)

    atexit.register(_at_exit)

    class _SlowSteps(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "spag.training.trainer":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                step = module.SpagTrainer.training_step

                def training_step(self, *args, **kwargs):
                    try:
                        with open(os.environ["SPAG_TEST_SLOW_FILE"]) as fh:
                            time.sleep(float(fh.read() or 0))
                    except (KeyError, OSError, ValueError):
                        pass
                    return step(self, *args, **kwargs)

                module.SpagTrainer.training_step = training_step

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _SlowSteps())
"""


# ---------------------------------------------------------------- helpers
def _cluster_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, SLURM_CONF=SLURM_CONF, HF_HUB_OFFLINE="1")
    env.pop("SPAG_TEST_FAIL_SHARDS", None)
    env.update(extra)
    return env


def _slurm(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_cluster_env())


def _state(slurm_id: str) -> str:
    return _slurm("squeue", "-h", "-t", "all", "-o", "%T", "-j", slurm_id).stdout.strip()


def _node_state(node: str) -> str:
    return _slurm("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, daemons)"
    sbin = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "ip",
                 "nsenter", "unshare", "taskset"):  # fmt: skip
        if shutil.which(tool, path=sbin) is None:
            return f"{tool} not installed"
    if not Path(sys.executable).with_name("torchrun").exists():
        return "torchrun not installed beside this Python"
    ip = shutil.which("ip", path=sbin)
    probe = f"spag-probe-{os.getpid()}"
    made = subprocess.run([ip, "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run([ip, "netns", "del", probe], capture_output=True, timeout=30)
    return None


def _start() -> subprocess.CompletedProcess:
    return subprocess.run(
        ["timeout", "-k", "10", "180", str(START), "--no-install"],
        capture_output=True, text=True, timeout=200,
    )  # fmt: skip


def _log_tails() -> str:
    out = []
    for p in sorted(LOG_DIR.glob("slurm*.log")):
        out.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(out)


def _profile(dest: Path) -> Path:
    """The shipped cluster profile on the two-node cluster, with fast polling and a retry."""
    profile = yaml.safe_load(CLUSTER_PROFILE.read_text())
    profile["default-resources"]["slurm_partition"] = "two"
    profile["default-resources"].pop("slurm_account", None)
    profile.pop("software-deployment-method", None)  # no conda: jobs run this spag
    profile.update(
        {
            "slurm-status-command": "squeue",
            "slurm-no-account": True,
            "slurm-init-seconds-before-status-checks": 1,
            "seconds-between-status-checks": 1,
            "retries": 1,  # the node failure's retry
            "latency-wait": 10,
            "jobs": 4,
        }
    )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def _complete_checkpoints(workdir: Path) -> list[int]:
    root = workdir / CHECKPOINTS
    return sorted(
        int(p.parent.name.split("-")[1])
        for p in root.glob("checkpoint-*/spag_checkpoint_complete")
        if p.parent.name.split("-")[1].isdigit()
    )


def _slurm_ids(log: str, rule: str) -> list[str]:
    """SLURM job ids of every submission of ``rule`` (a retry is a new submission)."""
    block = re.compile(rf"^rule {rule}:\n(?:    .*\n)*?    jobid: (\d+)$", re.M)
    jobids = {m.group(1) for m in block.finditer(log)}
    submitted = re.findall(r"^Job (\d+) has been submitted with SLURM jobid (\d+)", log, re.M)
    return [slurm_id for jobid, slurm_id in submitted if jobid in jobids]


def _train_command(log: str) -> list[str]:
    """The `spag train ...` words of the rule's command that the run printed."""
    m = re.search(r"exec .*?(spag train .*?) > \S+ 2>&1", log)
    assert m, "the run did not print the training command"
    return shlex.split(m.group(1))


def _set_flag(words: list[str], flag: str, value: str) -> list[str]:
    i = words.index(flag)
    return [*words[: i + 1], value, *words[i + 2 :]]


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    assert out, f"no safetensors in {folder}"
    return out


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def two_nodes():
    """The two-node cluster, started for this module and stopped after it."""
    why = _skip_reason()
    if why:
        pytest.skip(f"two-node SLURM cluster: {why}")
    started = _start()
    try:
        assert started.returncode == 0, started.stdout + started.stderr + _log_tails()
        cpus = int(_slurm("sinfo", "-h", "-n", NODES[0], "-o", "%c").stdout.strip())
        yield cpus
    finally:
        subprocess.run(["timeout", "-k", "10", "120", str(STOP)], capture_output=True, timeout=140)


@pytest.fixture(scope="module")
def killed_run(two_nodes, tmp_path_factory):
    """Imitation training on two nodes; the second node's slurmd killed mid-training."""
    cpus = two_nodes
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("two-node")
    workdir = make_workdir(root / "work")
    (workdir / "overlay.yaml").write_text(yaml.safe_dump(overlay(cpus), sort_keys=False))
    probe = root / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    ranks_log = root / "ranks.jsonl"
    slow = root / "slow-steps"
    slow.write_text(str(SLOW_BEFORE_KILL))
    pythonpath = os.pathsep.join(p for p in (str(probe), os.environ.get("PYTHONPATH")) if p)
    env = _cluster_env(
        PYTHONPATH=pythonpath,
        # Both nodes are this machine: one folder of compiled ops for them and the host
        # (a user's setting for a cluster of one CPU type), not one build per host name.
        TORCH_EXTENSIONS_DIR=str(extensions_dir()),
        SPAG_TEST_RANK_LOG=str(ranks_log),
        SPAG_TEST_SLOW_FILE=str(slow),
    )
    profile = _profile(root / "profile")
    # What training needs (tiny model, samples, scores), here with the local executor.
    snakemake = Path(sys.executable).with_name("snakemake")
    prep = subprocess.run(
        ["timeout", "-k", "15", str(RUN_TIMEOUT), str(snakemake), SCORED, "--cores", "2",
         "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "overlay.yaml")],
        capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT + 60,
    )  # fmt: skip
    assert prep.returncode == 0, (prep.stdout + prep.stderr)[-4000:]
    t_prep = time.monotonic() - t0

    log_path = workdir / "run.log"
    events: dict[str, object] = {}
    with open(log_path, "w") as fh:
        proc = subprocess.Popen(
            snakemake_cmd(workdir, profile, MODEL), stdout=fh, stderr=subprocess.STDOUT, env=env
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT
            # 1. the first complete checkpoint of the two-node job
            while time.monotonic() < deadline and proc.poll() is None:
                if _complete_checkpoints(workdir):
                    break
                time.sleep(0.2)
            events["checkpoints_at_kill"] = _complete_checkpoints(workdir)
            ids = _slurm_ids(log_path.read_text(), "train_imitation")
            assert proc.poll() is None and ids, "training ended before its first checkpoint"
            events["first_job"] = ids[0]
            # 2. the second node's slurmd dies (its job steps go on, as on a hung node)
            pid = int((PID_DIR / f"slurmd-{KILLED}.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            slow.write_text(str(SLOW_AFTER_KILL))
            # 3. SLURM notices: the node goes DOWN and the job ends
            while time.monotonic() < deadline and _state(ids[0]) in ("RUNNING", "COMPLETING"):
                time.sleep(0.5)
            events["first_job_state"] = _state(ids[0])
            events["node_state_after_kill"] = _node_state(KILLED)
            events["seconds_to_job_end"] = round(time.monotonic() - killed_at, 1)
            slow.unlink()  # the retry trains at full speed
            # 4. the node's slurmd comes back (the node returns to service by itself)
            restarted = _start()
            assert restarted.returncode == 0, restarted.stdout + restarted.stderr + _log_tails()
            rc = proc.wait(timeout=max(deadline - time.monotonic(), 1) + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    events["rc"] = rc
    events["seconds_slurm_run"] = round(time.monotonic() - t0 - t_prep, 1)
    events["seconds_prep"] = round(t_prep, 1)
    rows = []
    if ranks_log.exists():
        rows = [json.loads(line) for line in ranks_log.read_text().splitlines()]
    return workdir, log_path.read_text(), events, rows, env


@pytest.fixture(scope="module")
def one_node_model(killed_run):
    """The same `spag train` on this host: both ranks under `torchrun --standalone`."""
    workdir, log, _, _, env = killed_run
    words = _train_command(log)
    out = workdir.parent / "one-node"
    for flag, value in (("--output", out / "model"), ("--checkpoint-dir", out / "ckpt"),
                        ("--loss-log", out / "loss.tsv")):  # fmt: skip
        words = _set_flag(words, flag, str(value))
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(env, OMP_NUM_THREADS="1")
    for probe_setting in ("SPAG_TEST_RANK_LOG", "SPAG_TEST_SLOW_FILE"):
        env.pop(probe_setting)
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", "--no-python", *words],
        cwd=workdir, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    print(f"one-node reference run: {time.monotonic() - t0:.0f} s")
    return out / "model"


# ---------------------------------------------------------------- tests
def test_two_node_training_survives_a_node_failure(killed_run):
    workdir, log, events, _, _ = killed_run
    print(f"two-node run: {json.dumps(events)}")
    assert events["rc"] == 0, log[-4000:]
    ids = _slurm_ids(log, "train_imitation")
    assert len(ids) == 2, ids  # the first submission and its retry
    assert events["first_job_state"] == "NODE_FAIL", (
        f"the first job did not end with its node: {events} (if it COMPLETED, training "
        "ended before SLURM noticed the lost node: raise MAX_STEPS or SLOW_AFTER_KILL)"
    )
    assert "down" in str(events["node_state_after_kill"]), events
    assert _state(ids[1]) == "COMPLETED"
    shown = _slurm("scontrol", "-o", "show", "job", ids[1]).stdout
    job = dict(w.partition("=")[::2] for w in shown.split())
    assert job["NumNodes"] == "2" and job["NodeList"] == "spag-n[1-2]", job
    # the retry resumed from the last complete checkpoint before the kill (or a later one)
    text = (workdir / TRAIN_LOG).read_text()
    assert "2 rank(s)" in text  # the ranks of both nodes in one world
    m = re.search(r"resuming from \S*checkpoint-(\d+)", text)
    assert m, text[-3000:]
    assert int(m.group(1)) >= max(events["checkpoints_at_kill"]), (m.group(0), events)
    assert int(m.group(1)) < MAX_STEPS
    print(f"retry: {m.group(0)}")
    # every step logged once, the resumed ones after the kept ones
    with (workdir / "results/imitation/loss.tsv").open() as fh:
        steps = [int(line.split("\t")[0]) for line in list(fh)[1:]]
    assert steps == list(range(1, MAX_STEPS + 1)), steps
    assert (workdir / MODEL / "config.json").exists()


def test_two_node_ranks_each_on_their_node(killed_run, two_nodes):
    """Each rank ran on its own node, under the inner step, with that node's CPUs."""
    _, log, _, rows, _ = killed_run
    retry = _slurm_ids(log, "train_imitation")[-1]
    starts = [r for r in rows if r["event"] == "start" and r["SLURM_JOB_ID"] == retry]
    for r in starts:
        print(
            f"rank {r['RANK']}: host={r['host']} SLURM_NODEID={r['SLURM_NODEID']} "
            f"step={r['SLURM_STEP_ID']} affinity={r['affinity']} "
            f"OMP_NUM_THREADS={r['OMP_NUM_THREADS']} MASTER_ADDR={r['MASTER_ADDR']}"
        )
    by_rank = {r["RANK"]: r for r in starts}
    assert set(by_rank) == {"0", "1"} and len(starts) == 2, rows
    assert {r["host"] for r in starts} == set(NODES)
    assert {r["SLURM_NODEID"] for r in starts} == {"0", "1"}
    for r in starts:
        assert r["WORLD_SIZE"] == "2" and r["LOCAL_RANK"] == "0"
        assert r["SLURM_NODEID"] == str(NODES.index(r["host"]))
        assert r["SLURM_STEP_ID"] not in (None, "batch"), r  # the inner srun's step
        assert r["SLURM_CPUS_PER_TASK"] == str(two_nodes)  # the step's own --cpus-per-task
        assert r["OMP_NUM_THREADS"] == str(two_nodes)  # the node's CPUs, one rank per node
        assert len(r["affinity"]) == two_nodes, r
        assert r["MASTER_ADDR"] == NODES[0]  # the rendezvous on the first node
    if (os.cpu_count() or 1) >= 2:  # each node has its own half of the host's CPUs
        assert not set(starts[0]["affinity"]) & set(starts[1]["affinity"]), starts
    exits = [r for r in rows if r["event"] == "exit" and r["SLURM_JOB_ID"] == retry]
    assert len(exits) == 2 and all(r["torch_threads"] == two_nodes for r in exits), exits
    # the task prolog saw the inner step's two tasks, one on each node
    seen = [
        dict(w.partition("=")[::2] for w in line.split())
        for line in (LOG_DIR / "task-env.log").read_text().splitlines()
    ]
    step_tasks = [s for s in seen if s.get("job") == retry and s.get("step") not in ("", None)]
    assert {(s["host"], s["nodeid"]) for s in step_tasks} == {(NODES[0], "0"), (NODES[1], "1")}


def test_two_node_model_equals_the_one_node_model(killed_run, one_node_model):
    import torch

    workdir = killed_run[0]
    two = _tensors(workdir / MODEL)
    one = _tensors(one_node_model)
    assert two.keys() == one.keys()
    worst = max((two[k].float() - one[k].float()).abs().max().item() for k in two)
    print(f"two-node (killed, resumed) vs one-node model: max |diff| = {worst:.3g}")
    for k in two:
        assert torch.allclose(two[k], one[k], rtol=1e-5, atol=1e-6), k
    # and training moved the weights: the comparison is not between two copies of the base
    base = _tensors(workdir / "results" / "base_model")
    assert any(not torch.allclose(two[k], base[k]) for k in two if k in base)
