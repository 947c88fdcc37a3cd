"""The tiny pipeline through a real SLURM cluster (snakemake-executor-plugin-slurm).

These tests need `sbatch` and `squeue` on PATH and a cluster with a default partition
(CI starts a local one-node cluster with scripts/start-slurm.sh, fake GPUs included).
They check that jobs really went through sbatch, that GPU rules asked for GPUs and saw
CUDA_VISIBLE_DEVICES, that a failing shard lets the other shards finish and is rebuilt
alone by the next run, and that a shard job cancelled with scancel is recovered the
same way. Every Snakemake run is wrapped in `timeout -k`, so a hung status check
cannot hang CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
CLUSTER_PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
# Written by the task prolog of scripts/start-slurm.sh: one line per job step.
TASK_ENV_LOG = Path(os.environ.get("SPAG_SLURM_TASK_ENV_LOG", "/var/log/slurm/task-env.log"))
# Seconds one Snakemake run may take before `timeout` ends it.
RUN_TIMEOUT = int(os.environ.get("SPAG_SLURM_RUN_TIMEOUT", "420"))

# The tiny pipeline, smaller still: 1 epoch, 2 shards, few words, short replies, a
# couple of optimiser steps. Self-play asks for one (fake) GPU per shard.
OVERLAY = {
    "epochs": 1,
    "words": {"num_train": 8, "num_test": 4},
    "selfplay": {"num_shards": 2, "max_new_tokens": 8, "batch_size": 8},
    "imitation": {"num_train_epochs": 1, "max_steps": 2},
    "spag": {"max_steps": 2},
    "evaluation": {"max_new_tokens": 8},
    "resources": {
        "selfplay": {"gpus": 1, "cpus": 1, "mem_mb": 2500, "runtime": 10},
        "train": {"gpus": 0, "nodes": 1, "cpus": 1, "mem_mb": 3000, "runtime": 10},
        "score": {"gpus": 0, "cpus": 1, "mem_mb": 2500, "runtime": 10},
        "evaluate": {"gpus": 0, "cpus": 1, "mem_mb": 2500, "runtime": 10},
        "cpu": {"cpus": 1, "mem_mb": 1500, "runtime": 10},
    },
}
SHARD = "results/epoch1/selfplay/shard_{:03d}.parquet"
EPISODES = "results/epoch1/episodes.parquet"


# ---------------------------------------------------------------- helpers
def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)


def default_partition() -> str:
    """The cluster's default partition (marked `*` by sinfo)."""
    out = _run(["sinfo", "-h", "-o", "%P"]).stdout.split()
    for name in out:
        if name.endswith("*"):
            return name[:-1]
    if not out:
        pytest.skip("sinfo lists no partition")
    return out[0]


def write_test_profile(dest: Path) -> Path:
    """The shipped cluster profile, adapted to the test cluster and fast polling."""
    profile = yaml.safe_load(CLUSTER_PROFILE.read_text())
    profile["default-resources"]["slurm_partition"] = default_partition()
    profile["default-resources"].pop("slurm_account", None)
    profile.update(
        {
            # without slurmdbd, sacct never reports a job finished: squeue does,
            # while MinJobAge keeps finished jobs listed
            "slurm-status-command": "squeue",
            "slurm-no-account": True,
            "slurm-init-seconds-before-status-checks": 1,
            "seconds-between-status-checks": 1,
            # a shard that fails on purpose fails at every attempt
            "retries": 0,
            "latency-wait": 10,
            "jobs": 20,
        }
    )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def make_workdir(root: Path) -> Path:
    """A working copy of the workflow: config.yaml and data/ resolve from the workdir."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "config.yaml", root / "config.yaml")
    (root / "data").symlink_to(REPO / "data", target_is_directory=True)
    (root / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY, sort_keys=False))
    return root


def snakemake_cmd(workdir: Path, profile: Path, *targets: str, extra: tuple = ()) -> list[str]:
    snakemake = Path(sys.executable).with_name("snakemake")
    # targets first: --configfile takes every word that follows it
    return [
        "timeout",
        "-k",
        "15",
        str(RUN_TIMEOUT),
        str(snakemake),
        *targets,
        "--profile",
        str(profile),
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        *extra,
        "--configfile",
        str(workdir / "overlay.yaml"),
    ]


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(FAIL_ENV, None)
    env.update(extra)
    return env


FAIL_ENV = "SPAG_FAIL_SHARDS"


@dataclass
class Job:
    rule: str
    output: str
    slurm_id: str | None = None


@dataclass
class Run:
    rc: int
    log: str
    jobs: dict[str, Job] = field(default_factory=dict)  # Snakemake job id -> job

    @property
    def submitted(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.slurm_id]

    def keys(self, submitted_only: bool = True) -> set[tuple[str, str]]:
        jobs = self.submitted if submitted_only else self.jobs.values()
        return {(j.rule, j.output) for j in jobs}

    def rule_jobs(self, rule: str) -> list[Job]:
        return [j for j in self.submitted if j.rule == rule]


_BLOCK = re.compile(r"^(local)?rule (\w+):\n((?:    .*\n)+)", re.M)
_SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")


def parse_log(text: str) -> dict[str, Job]:
    """Jobs a Snakemake log announced, with the SLURM job id each was submitted as."""
    jobs: dict[str, Job] = {}
    for m in _BLOCK.finditer(text):
        body = m.group(3)
        jobid = re.search(r"^    jobid: (\d+)$", body, re.M)
        output = re.search(r"^    output: (.*)$", body, re.M)
        if jobid and m.group(1) is None:
            jobs[jobid.group(1)] = Job(m.group(2), output.group(1) if output else "")
    for jobid, slurm_id in _SUBMITTED.findall(text):
        if jobid in jobs:
            jobs[jobid].slurm_id = slurm_id
    return jobs


def run_snakemake(workdir: Path, profile: Path, name: str, *targets: str, env=None) -> Run:
    log = workdir / f"{name}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(
            snakemake_cmd(workdir, profile, *targets),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env or job_env(),
            timeout=RUN_TIMEOUT + 60,
        )
    text = log.read_text()
    assert proc.returncode not in (124, 137), f"snakemake timed out, see {log}"
    return Run(proc.returncode, text, parse_log(text))


def dry_run(workdir: Path, profile: Path, *targets: str) -> Run:
    cmd = snakemake_cmd(workdir, profile, *targets, extra=("-n",))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Run(0, proc.stdout, parse_log(proc.stdout))


def scontrol_job(slurm_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (finished jobs stay listed for MinJobAge)."""
    out = _run(["scontrol", "-o", "show", "job", slurm_id])
    assert out.returncode == 0, f"scontrol does not know job {slurm_id}: {out.stderr}"
    fields = {}
    for word in out.stdout.split():
        key, _, value = word.partition("=")
        fields.setdefault(key, value)
    return fields


def task_env(slurm_ids: set[str]) -> dict[str, list[str]]:
    """CUDA_VISIBLE_DEVICES seen by each job step of these jobs (from the task prolog)."""
    seen: dict[str, list[str]] = {}
    if not TASK_ENV_LOG.exists():
        return seen
    for line in TASK_ENV_LOG.read_text().splitlines():
        fields = dict(w.partition("=")[::2] for w in line.split())
        if fields.get("job") in slurm_ids:
            seen.setdefault(fields["job"], []).append(fields.get("CUDA_VISIBLE_DEVICES", ""))
    return seen


GPU_RULES = {"selfplay"}


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """The test profile; skips (saying why) without a usable cluster or workflow."""
    if not SNAKEFILE.exists():
        pytest.skip("no Snakefile in the repository")
    ping = _run(["sinfo", "-h", "-o", "%T"])
    if ping.returncode != 0:
        pytest.skip(f"SLURM controller not answering: {ping.stderr.strip()}")
    return write_test_profile(tmp_path_factory.mktemp("profile") / "slurm")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return make_workdir(tmp_path_factory.mktemp("slurm-run") / "work")


@pytest.fixture(scope="module")
def plan(workdir, cluster) -> Run:
    """Every job spag_epoch1 needs, before anything ran."""
    return dry_run(workdir, cluster, "spag_epoch1")


@pytest.fixture(scope="module")
def failed_run(workdir, cluster, plan) -> Run:
    """spag_epoch1 with shard 1 failing on purpose; --keep-going lets the rest finish."""
    return run_snakemake(workdir, cluster, "run1", "spag_epoch1", env=job_env(**{FAIL_ENV: "1"}))


@pytest.fixture(scope="module")
def rerun(workdir, cluster, failed_run) -> tuple[Run, Run]:
    """The next run, without the fault: its plan (dry run) and the run itself."""
    before = dry_run(workdir, cluster, "spag_epoch1")
    return before, run_snakemake(workdir, cluster, "run2", "spag_epoch1")


# ---------------------------------------------------------------- tests
def test_jobs_went_through_sbatch(failed_run, plan, workdir):
    assert failed_run.rc != 0, "a shard failed on purpose: the run must report failure"
    assert failed_run.submitted, "no job was submitted through sbatch"
    # every job the run started was a SLURM job (only the target rule runs locally)
    assert all(j.slurm_id for j in failed_run.jobs.values()), failed_run.log
    ids = {j.slurm_id for j in failed_run.submitted}
    # the controller knows them: squeue lists finished jobs for MinJobAge
    out = _run(["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(sorted(ids))])
    listed = dict(line.split() for line in out.stdout.splitlines())
    assert set(listed) == ids, out.stdout + out.stderr
    shard1 = next(j for j in failed_run.rule_jobs("selfplay") if j.output.endswith("001.parquet"))
    assert listed[shard1.slurm_id] == "FAILED"
    assert scontrol_job(shard1.slurm_id)["ExitCode"] != "0:0"
    # the plugin's per-job sbatch logs are where the profile puts them
    assert list((workdir / "results" / "logs" / "slurm").glob("rule_selfplay/*/*.log"))


def test_gpu_rules_asked_for_gpus_and_saw_them(failed_run):
    jobs = failed_run.submitted
    gpu_jobs = [j for j in jobs if j.rule in GPU_RULES]
    cpu_jobs = [j for j in jobs if j.rule not in GPU_RULES]
    assert len(gpu_jobs) == OVERLAY["selfplay"]["num_shards"]
    assert cpu_jobs
    for job in jobs:
        tres = scontrol_job(job.slurm_id).get("TRES", "")
        if job.rule in GPU_RULES:
            assert "gres/gpu=1" in tres, (job, tres)
        else:
            assert "gres/gpu" not in tres, (job, tres)
    seen = task_env({j.slurm_id for j in jobs})
    if not seen:
        pytest.skip(f"no task prolog record at {TASK_ENV_LOG} (start-slurm.sh writes one)")
    for job in gpu_jobs:
        values = seen.get(job.slurm_id, [])
        assert values and all(v not in ("", "unset") for v in values), (job, values)
    for job in cpu_jobs:
        assert all(v in ("", "unset") for v in seen.get(job.slurm_id, [])), job


def test_failed_shard_lets_the_others_finish(failed_run, workdir):
    assert (workdir / SHARD.format(0)).exists()
    assert not (workdir / SHARD.format(1)).exists()
    assert not (workdir / EPISODES).exists()
    # with --keep-going, work independent of the shards went on too
    assert (workdir / "results" / "imitation" / "model").is_dir()


def test_rerun_submits_the_failed_shard_and_its_dependents(
    failed_run, plan, rerun, workdir, cluster
):
    before, run = rerun
    assert run.rc == 0, run.log[-3000:]
    # the plan before the rerun: what was not built (the failed shard and everything
    # downstream of it), nothing the first run built
    done = failed_run.keys() - {("selfplay", SHARD.format(1))}
    expected = plan.keys(submitted_only=False) - done
    assert before.keys(submitted_only=False) == expected
    # and the rerun submitted exactly that plan, through sbatch
    assert run.keys() | {(j.rule, j.output) for j in run.jobs.values() if not j.slurm_id} == (
        expected
    )
    assert [j.output for j in run.rule_jobs("selfplay")] == [SHARD.format(1)]
    assert {"merge_episodes", "train_spag"} <= {j.rule for j in run.submitted}
    assert (workdir / EPISODES).exists()
    assert (workdir / "results" / "epoch1" / "model").is_dir()
    # a further run has nothing left to do
    assert not dry_run(workdir, cluster, "spag_epoch1").jobs


def _wait_running(slurm_id: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        state = _run(["squeue", "-h", "-t", "all", "-o", "%T", "-j", slurm_id]).stdout.strip()
        if state == "RUNNING":
            return True
        if state and state not in ("PENDING", "CONFIGURING"):
            return False
        time.sleep(0.2)
    return False


def test_cancelled_shard_is_recovered_by_the_next_run(rerun, workdir, cluster):
    """scancel a running shard job: the other shard finishes, the next run redoes it."""
    _, run = rerun
    assert run.rc == 0
    for s in (0, 1):
        (workdir / SHARD.format(s)).unlink()
    log = workdir / "run3.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            snakemake_cmd(workdir, cluster, EPISODES),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=job_env(),
        )
    cancelled = None
    try:
        deadline = time.monotonic() + 180
        while cancelled is None and time.monotonic() < deadline and proc.poll() is None:
            target = next(
                (
                    j
                    for j in parse_log(log.read_text()).values()
                    if j.slurm_id and j.output == SHARD.format(1)
                ),
                None,
            )
            if target and _wait_running(target.slurm_id, deadline):
                assert _run(["scancel", target.slurm_id]).returncode == 0
                cancelled = target
            time.sleep(0.2)
        rc = proc.wait(timeout=RUN_TIMEOUT + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert cancelled is not None, f"shard 1's job was never seen running, see {log}"
    assert rc != 0, "a cancelled job must fail the run"
    assert _run(
        ["squeue", "-h", "-t", "all", "-o", "%T", "-j", cancelled.slurm_id]
    ).stdout.strip() == ("CANCELLED")
    assert (workdir / SHARD.format(0)).exists()
    assert not (workdir / SHARD.format(1)).exists()
    assert not (workdir / EPISODES).exists()

    again = run_snakemake(workdir, cluster, "run4", EPISODES)
    assert again.rc == 0, again.log[-3000:]
    assert sorted((j.rule, j.output.split(",")[0]) for j in again.submitted) == [
        ("merge_episodes", EPISODES),
        ("selfplay", SHARD.format(1)),
    ]
    assert (workdir / EPISODES).exists()
