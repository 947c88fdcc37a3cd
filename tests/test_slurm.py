"""The tiny pipeline through a real SLURM cluster (snakemake-executor-plugin-slurm).

The tests marked `slurm` need `sbatch` and `squeue` on PATH and a cluster with a
default partition (CI starts a local one-node cluster with scripts/start-slurm.sh,
fake GPUs included); the checks of the shipped profile itself run everywhere.
The cluster tests check that jobs really went through sbatch, that a shard failing
on purpose and a shard job cancelled with scancel let the other shards finish, and
that the next run submits exactly those shards and what depends on them; with the
paper's layout, that `preflight` submits each family's job as its real jobs (GPUs
asked for and seen, training under torchrun with each rank's CPUs) and reports the
GPU families as failing on this GPU-less node, and that the run's GPU jobs stop at once.
Every Snakemake run is wrapped in `timeout -k`, so a hung status check cannot hang CI.
"""

from __future__ import annotations

import json
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
from workflow_utils import deep_merge, failing_shards_env

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
CLUSTER_PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
# Written by the task prolog of scripts/start-slurm.sh: one line per job step.
TASK_ENV_LOG = Path(os.environ.get("SPAG_SLURM_TASK_ENV_LOG", "/var/log/slurm/task-env.log"))
# Seconds one Snakemake run may take before `timeout` ends it.
RUN_TIMEOUT = int(os.environ.get("SPAG_SLURM_RUN_TIMEOUT", "600"))
# The paper layout's preflight may be the suite's first user of DeepSpeed's CPU ops: its
# train job then compiles them (about 4 min alone on 2 cores, twice that beside the other
# worker) before the score and reasoning jobs get the fake GPUs the train job held.
PREFLIGHT_TIMEOUT = 2 * RUN_TIMEOUT

# The tiny pipeline, smaller still: 1 epoch, 3 shards, few words, short replies, a
# couple of optimiser steps. Every family on the CPU: a job asking for the (fake) GPUs
# of this cluster stops at once without CUDA (the paper layout below shows that).
OVERLAY = {
    "epochs": 1,
    "words": {"num_train": 8, "num_test": 4},
    "selfplay": {"num_shards": 3, "max_new_tokens": 8, "batch_size": 8},
    "imitation": {"num_train_epochs": 1, "max_steps": 2},
    "spag": {"max_steps": 2},
    # Graded hints off: their six jobs are evaluate-family jobs like the games, whose
    # rules the tiny runs of test_report.py and test_workflow_e2e.py cover.
    "evaluation": {"max_new_tokens": 8, "hints": {"listener": None}},
    "resources": {
        "selfplay": {"gpus": 0, "cpus": 1, "mem_mb": 2500, "runtime": 10},
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
    # no conda on the test cluster: jobs run the spag beside this Python
    profile.pop("software-deployment-method", None)
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


def snakemake_cmd(
    workdir: Path, profile: Path, *targets: str, extra: tuple = (), timeout: int = RUN_TIMEOUT
) -> list[str]:
    # The real Snakemake and SLURM plugin, polling at the profile's interval (see there).
    snakemake = [sys.executable, str(Path(__file__).with_name("slurm_snakemake.py"))]
    # targets first: --configfile takes every word that follows it
    return [
        "timeout",
        "-k",
        "15",
        str(timeout),
        *snakemake,
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
    env.pop("SPAG_TEST_FAIL_SHARDS", None)
    env.update(extra)
    return env


@dataclass
class Job:
    rule: str
    output: str  # the first declared output
    slurm_id: str | None = None
    finished: bool = False
    local: bool = False  # a local rule: run in Snakemake's own process, never submitted


@dataclass
class Run:
    rc: int
    log: str
    jobs: dict[str, Job] = field(default_factory=dict)  # Snakemake job id -> job

    @property
    def submitted(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.slurm_id]

    def keys(self, which: str = "all") -> set[tuple[str, str]]:
        """(rule, output) of all announced, submitted, local or finished jobs."""
        jobs = {
            "all": list(self.jobs.values()),
            "submitted": self.submitted,
            "local": [j for j in self.jobs.values() if j.local],
            "finished": [j for j in self.jobs.values() if j.finished],
        }[which]
        return {(j.rule, j.output) for j in jobs}

    def shard_job(self, shard: int) -> Job:
        return next(j for j in self.submitted if j.output == SHARD.format(shard))


_BLOCK = re.compile(r"^(local)?rule (\w+):\n((?:    .*\n)+)", re.M)
_SUBMITTED = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+)", re.M)
_FINISHED = re.compile(r"^Finished jobid: (\d+) ", re.M)
# --show-failed-logs inlines a job's own logs between rulers: not the main run's jobs.
# The header is one line: a `.*` under DOTALL would reach the last inlined log and
# swallow the main run's lines between two failures (a job finished in between).
_INLINED = re.compile(r"^Logfile [^\n]*:\n(=+)\n.*?^\1\n", re.M | re.S)


def parse_log(text: str) -> dict[str, Job]:
    """Jobs a Snakemake log announced (target rules left out), with their SLURM job ids."""
    text = _INLINED.sub("", text)
    jobs: dict[str, Job] = {}
    for m in _BLOCK.finditer(text):
        body = m.group(3)
        jobid = re.search(r"^    jobid: (\d+)$", body, re.M)
        output = re.search(r"^    output: ([^,\n]*)", body, re.M)
        # target rules (no output) run in Snakemake's process and are not jobs here
        if jobid and output:
            jobs.setdefault(
                jobid.group(1), Job(m.group(2), output.group(1), local=bool(m.group(1)))
            )
    for jobid, slurm_id in _SUBMITTED.findall(text):
        if jobid in jobs:
            jobs[jobid].slurm_id = slurm_id
    for jobid in _FINISHED.findall(text):
        if jobid in jobs:
            jobs[jobid].finished = True
    return jobs


def run_snakemake(
    workdir: Path, profile: Path, name: str, *targets: str, env=None, timeout: int = RUN_TIMEOUT
) -> Run:
    log = workdir / f"{name}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(
            snakemake_cmd(workdir, profile, *targets, timeout=timeout),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env or job_env(),
            timeout=timeout + 60,
        )
    return _finish(proc.returncode, log)


def _finish(rc: int, log: Path) -> Run:
    # 124/137: `timeout` ended snakemake; -9: the KILL after `-k` reached `timeout` itself
    assert rc not in (124, 137, -9), f"snakemake ran past its time limit and was ended, see {log}"
    text = log.read_text()
    return Run(rc, text, parse_log(text))


def dry_run(workdir: Path, profile: Path, *targets: str) -> Run:
    cmd = snakemake_cmd(workdir, profile, *targets, extra=("-n",))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Run(0, proc.stdout, parse_log(proc.stdout))


def squeue_state(slurm_id: str) -> str:
    out = _run(["squeue", "-h", "-t", "all", "-o", "%T", "-j", slurm_id])
    return out.stdout.strip()


def wait_running(slurm_id: str, deadline: float) -> bool:
    """Wait until the job runs; False if it ended first or the deadline passed."""
    while time.monotonic() < deadline:
        state = squeue_state(slurm_id)
        if state == "RUNNING":
            return True
        if state and state not in ("PENDING", "CONFIGURING"):
            return False
        time.sleep(0.2)
    return False


def run_and_cancel(
    workdir: Path, profile: Path, name: str, target: str, shard: int, env: dict
) -> tuple[Run, Job | None]:
    """Run Snakemake; scancel the given shard's SLURM job once it runs."""
    log = workdir / f"{name}.log"
    cancelled = None
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            snakemake_cmd(workdir, profile, target), stdout=fh, stderr=subprocess.STDOUT, env=env
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT
            while cancelled is None and proc.poll() is None and time.monotonic() < deadline:
                jobs = parse_log(log.read_text()).values()
                job = next(
                    (j for j in jobs if j.slurm_id and j.output == SHARD.format(shard)), None
                )
                if job is not None:
                    if not wait_running(job.slurm_id, deadline):
                        break
                    assert _run(["scancel", job.slurm_id]).returncode == 0
                    cancelled = job
                time.sleep(0.2)
            rc = proc.wait(timeout=RUN_TIMEOUT + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return _finish(rc, log), cancelled


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


# ---------------------------------------------------------------- fixtures
FAILING, CANCELLED = 1, 2  # shard 0 runs normally


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
def faulty_run(workdir, cluster, plan) -> tuple[Run, Job | None]:
    """spag_epoch1 where shard 1 fails on purpose and shard 2's job is cancelled."""
    env = job_env(**failing_shards_env(FAILING))
    return run_and_cancel(workdir, cluster, "run1", "spag_epoch1", CANCELLED, env)


@pytest.fixture(scope="module")
def rerun(workdir, cluster, faulty_run) -> tuple[Run, Run]:
    """The next run, without faults: its plan (dry run) and the run itself."""
    before = dry_run(workdir, cluster, "spag_epoch1")
    return before, run_snakemake(workdir, cluster, "run2", "spag_epoch1")


# ---------------------------------------------------------------- tests
def test_every_profile_line_is_commented():
    for n, line in enumerate(CLUSTER_PROFILE.read_text().splitlines(), 1):
        if line.strip():
            assert "#" in line, f"{CLUSTER_PROFILE}:{n} has no comment: {line!r}"


def test_profile_settings():
    profile = yaml.safe_load(CLUSTER_PROFILE.read_text())
    assert profile["executor"] == "slurm"
    assert profile["jobs"] >= 1
    assert profile["retries"] >= 1  # with resources that grow with the attempt
    assert profile["keep-going"] is True
    assert profile["latency-wait"] >= 5
    triggers = set(profile["rerun-triggers"])
    assert "code" not in triggers  # a reformatted rule must not rerun GPU jobs
    # the documented command has its backend: every rule in its envs/*.yaml env
    assert profile["software-deployment-method"] == "conda"
    assert {"mtime", "input", "params"} <= triggers
    defaults = profile["default-resources"]
    assert defaults["slurm_partition"] and defaults["runtime"] > 0 and defaults["mem_mb"] > 0
    # cpus_per_task here would override every rule's threads
    assert not {"cpus_per_task", "threads", "gpu", "gpus"} & set(defaults)


def test_profile_keys_are_snakemake_options():
    """A misspelt key would be rejected only when a user runs the profile."""
    snakemake = Path(sys.executable).with_name("snakemake")
    if not snakemake.exists():
        pytest.skip("snakemake not installed beside this Python")
    help_text = subprocess.run(
        [str(snakemake), "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    profile = yaml.safe_load(CLUSTER_PROFILE.read_text())
    test_profile = {
        "slurm-status-command", "slurm-no-account", "slurm-init-seconds-before-status-checks",
    }  # fmt: skip
    for key in set(profile) | test_profile:
        assert f"--{key}" in help_text, key


def test_log_parser_keeps_jobs_finished_between_two_inlined_logs():
    """A job that finishes between two failures' inlined logs is still the main run's."""
    ruler = "=" * 20
    log = "\n".join(
        [
            "rule selfplay:",
            "    output: a.parquet",
            "    jobid: 5",
            "rule selfplay:",
            "    output: b.parquet",
            "    jobid: 11",
            "localrule merge_episodes:",
            "    output: e.parquet",
            "    jobid: 7",
            "Job 5 has been submitted with SLURM jobid 236 (log: x).",
            "Job 11 has been submitted with SLURM jobid 238 (log: y).",
            "Error in rule selfplay:",
            "Logfile b.log:",
            ruler,
            "rule selfplay:",
            "    output: b.parquet",
            "    jobid: 0",
            ruler,
            "Finished jobid: 5 (Rule: selfplay)",
            "Finished jobid: 7 (Rule: merge_episodes)",
            "Error in rule selfplay:",
            "Logfile c.log:",
            ruler,
            "Finished jobid: 0 (Rule: selfplay)",
            ruler,
            "",
        ]
    )
    jobs = parse_log(log)
    assert set(jobs) == {"5", "7", "11"}
    assert jobs["5"].finished and jobs["5"].slurm_id == "236"
    assert not jobs["11"].finished
    assert jobs["7"].local and jobs["7"].finished and not jobs["7"].slurm_id
    assert not jobs["5"].local


def test_overlay_is_a_valid_config():
    """The tests' overlay keeps to the config schema (or every run below fails)."""
    from spag.config import validate_config

    config = deep_merge(yaml.safe_load((REPO / "config.yaml").read_text()), OVERLAY)
    validate_config(config, source="overlay")
    assert config["selfplay"]["num_shards"] > max(FAILING, CANCELLED)


@pytest.mark.slurm
def test_jobs_went_through_sbatch(faulty_run, plan, workdir):
    run, _ = faulty_run
    assert run.rc != 0, "a shard failed and one was cancelled: the run must report failure"
    assert run.submitted, "no job was submitted through sbatch"
    # every job that loads a model was a SLURM job; the light steps (local rules) ran in
    # Snakemake's own process, none of them submitted
    remote = [j for j in run.jobs.values() if not j.local]
    assert all(j.slurm_id for j in remote), run.log[-3000:]
    assert {j.rule for j in remote} == {
        "base_model", "score_imitation", "train_imitation", "selfplay",
        "eval_play_baseline", "eval_reasoning",
    }  # fmt: skip
    assert {j.rule for j in run.jobs.values() if j.local} == {
        "target_words", "sft_data", "imitation_samples",
        "eval_merge_baseline", "eval_games_baseline",
    }  # fmt: skip
    assert not run.keys("local") & run.keys("submitted")
    ids = {j.slurm_id for j in run.submitted}
    # the controller knows them: squeue lists finished jobs for MinJobAge
    out = _run(["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(sorted(ids))])
    listed = dict(line.split() for line in out.stdout.splitlines())
    assert set(listed) == ids, out.stdout + out.stderr
    assert listed[run.shard_job(0).slurm_id] == "COMPLETED"
    assert listed[run.shard_job(FAILING).slurm_id] == "FAILED"
    assert scontrol_job(run.shard_job(FAILING).slurm_id)["ExitCode"] != "0:0"
    # every finished job completed in SLURM's eyes too
    for job in run.submitted:
        if job.finished:
            assert listed[job.slurm_id] == "COMPLETED", job
    # the plugin's per-job sbatch logs are where the profile puts them
    logs = workdir / "results" / "logs" / "slurm" / "rule_selfplay"
    assert {p.stem for p in logs.glob("*/*.log")} >= {run.shard_job(0).slurm_id}


@pytest.mark.slurm
def test_failed_and_cancelled_shards_let_the_others_finish(faulty_run, workdir):
    run, cancelled = faulty_run
    assert cancelled is not None, "shard 2's job was never seen running, see run1.log"
    assert cancelled.output == SHARD.format(CANCELLED)
    assert squeue_state(cancelled.slurm_id) == "CANCELLED"
    assert "CANCELLED" in run.log
    assert (workdir / SHARD.format(0)).exists()
    assert not (workdir / SHARD.format(FAILING)).exists()
    assert not (workdir / SHARD.format(CANCELLED)).exists()
    assert not (workdir / EPISODES).exists()
    # with --keep-going, work that does not need the shards went on
    assert (workdir / "results" / "imitation" / "model").is_dir()
    assert ("selfplay", SHARD.format(0)) in run.keys("finished")
    # what a user sees with `spag status` (the failed shard left its log; the
    # cancelled one had not written one yet, or had: then it reads as failed too)
    status = subprocess.run(
        [str(Path(sys.executable).with_name("spag")), "status",
         "--configfile", "config.yaml", "overlay.yaml"],
        cwd=workdir, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert re.search(rf"epoch 1: shards 1/3 done; failed {FAILING}\b", status.stdout), status.stdout


@pytest.mark.slurm
def test_rerun_submits_exactly_the_lost_shards_and_their_dependents(faulty_run, plan, rerun):
    run1, _ = faulty_run
    before, run2 = rerun
    assert run2.rc == 0, run2.log[-3000:]
    # what is left: the failed and the cancelled shard, and what depends on them
    expected = plan.keys() - run1.keys("finished")
    assert {o for r, o in expected if r == "selfplay"} == {
        SHARD.format(FAILING),
        SHARD.format(CANCELLED),
    }
    assert {"merge_episodes", "train_spag"} <= {r for r, _ in expected}
    assert not {"train_imitation", "base_model", "target_words"} & {r for r, _ in expected}
    # the dry run plans it, and the run does it: each model's job through sbatch, the
    # light steps in Snakemake's own process
    assert before.keys() == expected
    assert run2.keys("submitted") | run2.keys("local") == expected
    assert {r for r, _ in run2.keys("local")} == {
        "merge_episodes", "assign_rewards", "eval_merge", "eval_games", "epoch_summary",
    }  # fmt: skip
    assert run2.keys("finished") == expected


@pytest.mark.slurm
def test_nothing_left_after_the_rerun(rerun, workdir, cluster):
    _, run2 = rerun
    assert run2.rc == 0
    assert (workdir / EPISODES).exists()
    assert (workdir / "results" / "epoch1" / "model").is_dir()
    assert not dry_run(workdir, cluster, "spag_epoch1").jobs


@pytest.mark.slurm
def test_multinode_launcher_runs_in_an_allocation(cluster, tmp_path):
    """The srun + torchrun prefix, rendezvous on the first node, in a real SLURM job.

    One node here, so one torchrun: its two ranks meet through the c10d rendezvous. The
    inner step asks for the node's CPUs and GPUs itself (the rule's environment has no
    SLURM_* left), and each rank gets its share of the CPUs as OMP_NUM_THREADS.
    """
    from spag.ops.cluster import srun_torchrun_prefix

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not installed beside this Python")
    # each rank writes its own file: lines of ranks sharing stdout may interleave
    probe = (
        f"{sys.executable} -c "
        "\"import os; e = os.environ; open('rank' + e['RANK'], 'w').write(' '.join("
        "[e['WORLD_SIZE'], e.get('OMP_NUM_THREADS', '-'), e.get('SLURM_CPUS_PER_TASK', '-'),"
        " e.get('CUDA_VISIBLE_DEVICES', '-')]))\""
    )
    script = tmp_path / "launch.sh"
    script.write_text(
        "#!/bin/bash\n"
        f'export PATH="{torchrun.parent}:$PATH"\n'
        # as in a rule's environment: the job-step plugin strips SLURM_* but the job id
        "for v in $(env | grep -o '^SLURM_[A-Z_]*' | grep -vx SLURM_JOB_ID); do unset $v; done\n"
        f"{srun_torchrun_prefix(2, 1, cpus=2)} {probe}\n"
    )
    out = tmp_path / "launch.out"
    sub = _run(
        [
            "sbatch",
            "--parsable",
            "--nodes",
            "1",
            "--ntasks",
            "1",
            "--cpus-per-task",
            "2",
            "--gres=gpu:2",
            "--mem",
            "1000",
            "-t",
            "5",
            "-p",
            default_partition(),
            "-o",
            str(out),
            str(script),
        ],
        cwd=tmp_path,
    )
    assert sub.returncode == 0, sub.stderr
    slurm_id = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while squeue_state(slurm_id) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {slurm_id} did not finish"
        time.sleep(0.5)
    assert squeue_state(slurm_id) == "COMPLETED", out.read_text()
    ranks = {p.name: p.read_text().split() for p in tmp_path.glob("rank*")}
    assert set(ranks) == {"rank0", "rank1"}, out.read_text()
    for words in ranks.values():
        world, omp, cpus, gpus = words
        assert world == "2"
        assert omp == "1"  # 2 CPUs / 2 ranks
        assert cpus == "2"  # the step's own --cpus-per-task, not inherited
        assert gpus not in ("-", ""), words  # the step's --gres gave it the node's GPUs


# ---------------------------------------------------------------- first contact
# The paper's layout (configs/paper-llama2-7b.yaml: its 32 shards, job families and
# settings, ZeRO-3 offload included) with the tiny model and sizes shrunk to a 2-CPU,
# 2-(fake-)GPU node: what a user's first `snakemake --profile slurm preflight` and
# `snakemake --profile slurm spag_epoch1` meet on a node whose GPUs CUDA cannot use.
PAPER_SHRINK = {
    "epochs": 1,
    "offline": True,
    "base_model": {"name_or_path": "tiny"},
    "words": {"source": "wordfreq", "num_train": 64, "num_test": 4, "min_length": 3,
              "max_length": 12},
    "data": {"imitation": "data/demo_games.json", "sft": "data/demo_sft.json"},
    "selfplay": {"backend": "hf", "batch_size": 8, "max_new_tokens": 8, "max_length": 512,
                 "dtype": "float32", "tensor_parallel_size": None},
    # float32 throughout on this CPU node: training as the reference is scored
    "scoring": {"batch_size": 4, "dtype": "float32"},
    "imitation": {"max_steps": 2, "max_length": 256, "gradient_accumulation_steps": 1,
                  "bf16": False},
    "spag": {"max_steps": 2, "max_length": 256, "gradient_accumulation_steps": 1,
             "bf16": False},
    "evaluation": {"max_new_tokens": 8, "batch_size": 8,
                   "reasoning": {"tasks": ["spag_tiny_reasoning"],
                                 "include_path": "data/lm_eval_tasks", "limit": 4}},
    # The paper's families, each scaled to the node: training on two GPUs (the paper:
    # eight on one node), the others on one GPU or none.
    "resources": {
        "selfplay": {"gpus": 1, "cpus": 1, "mem_mb": 2500, "max_mem_mb": 5000,
                     "runtime": 20, "max_runtime": 40},
        "train": {"gpus": 2, "nodes": 1, "cpus": 2, "mem_mb": 4000, "max_mem_mb": 8000,
                  "runtime": 20, "max_runtime": 40},
        "score": {"gpus": 1, "cpus": 1, "mem_mb": 2500, "max_mem_mb": 5000,
                  "runtime": 20, "max_runtime": 40},
        "evaluate": {"gpus": 1, "cpus": 1, "mem_mb": 2500, "max_mem_mb": 5000,
                     "runtime": 20, "max_runtime": 40},
        "cpu": {"cpus": 1, "mem_mb": 1500, "max_mem_mb": 3000, "runtime": 20,
                "max_runtime": 40},
    },
}  # fmt: skip
# preflight job -> the config's resources family its job is submitted with
PREFLIGHT_UNITS = {
    "selfplay": "selfplay",
    "train": "train",
    "score": "score",
    "evaluate": "evaluate",
    "reasoning": "evaluate",
    "cpu": "cpu",
}


def _paper_workdir(root: Path) -> tuple[Path, dict]:
    paper = yaml.safe_load((REPO / "configs" / "paper-llama2-7b.yaml").read_text())
    config = deep_merge(paper, PAPER_SHRINK)
    wd = root / "work"
    make_workdir(wd)
    (wd / "overlay.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return wd, config


@pytest.fixture(scope="module")
def paper_preflight(tmp_path_factory, cluster) -> tuple[Run, dict, Path, float]:
    wd, config = _paper_workdir(tmp_path_factory.mktemp("slurm-preflight"))
    started = time.monotonic()
    run = run_snakemake(wd, cluster, "preflight", "preflight", timeout=PREFLIGHT_TIMEOUT)
    return run, config, wd, time.monotonic() - started


@pytest.mark.slurm
def test_preflight_on_the_paper_layout(paper_preflight):
    """One job per family, submitted like the family's real jobs; the GPU rows fail and
    say what to change, the CPU rows pass; training checks under its torchrun shape."""
    run, config, workdir, seconds = paper_preflight
    print(f"preflight of the paper layout through SLURM: {seconds:.0f} s")
    assert run.rc != 0, run.log[-3000:]
    assert "check(s) failed; each FAIL row says what to change" in run.log
    jobs = {j.rule.removeprefix("preflight_"): j for j in run.submitted}
    assert set(jobs) == set(PREFLIGHT_UNITS), run.log[-3000:]
    assert all(j.finished for j in jobs.values())  # a failed check is a row, not a failed job
    reports = {
        p.stem: json.loads(p.read_text()) for p in (workdir / "results/preflight").glob("*.json")
    }
    assert set(reports) == set(PREFLIGHT_UNITS)
    seen = task_env({j.slurm_id for j in jobs.values()})
    for unit, family in PREFLIGHT_UNITS.items():
        want = config["resources"][family]
        got = scontrol_job(jobs[unit].slurm_id)
        assert got["CPUs/Task"] == str(want["cpus"]), unit
        asked = got.get("TresPerJob", "") + got.get("TresPerNode", "")
        rows = {r["check"]: r for r in reports[unit]["rows"]}
        if want.get("gpus"):
            assert asked.endswith(f"gpu:{want['gpus']}") or asked.endswith(f"gpu={want['gpus']}"), (
                unit
            )
            assert rows["cuda"]["status"] == "FAIL", unit
            assert f"resources.{family}.gpus: 0" in rows["cuda"]["detail"]
            if seen:  # the job's step saw the GPUs SLURM gave it
                assert all(v not in ("", "unset") for v in seen[jobs[unit].slurm_id]), unit
        else:
            assert "gpu" not in asked, unit
            assert reports[unit]["ok"], reports[unit]
    train = reports["train"]["rows"]
    threads = [r for r in train if r["check"] == "threads"]
    # two ranks, each with the family's CPUs / ranks per node (torchrun alone would set 1)
    assert len(threads) == 2 and all(r["status"] == "ok" for r in threads), threads
    gloo = [r for r in train if r["check"] == "all-reduce gloo"]
    assert [r["status"] for r in gloo] == ["ok", "ok"], gloo
    ops = [r for r in train if r["check"] == "deepspeed ops"]
    assert ops and all(r["status"] == "ok" for r in ops), ops  # CPU Adam for zero3_offload
    assert (workdir / "results/preflight/table.tsv").exists()


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory, cluster) -> tuple[Run, Path]:
    wd, _ = _paper_workdir(tmp_path_factory.mktemp("slurm-paper"))
    return run_snakemake(wd, cluster, "paper", "spag_epoch1"), wd


@pytest.mark.slurm
def test_first_contact_gpu_jobs_stop_at_once(paper_run):
    """Each GPU job meets no working CUDA: it fails at its first line with the versions and
    the setting to change, never running on the CPU; CPU jobs before it finish."""
    run, workdir = paper_run
    assert run.rc != 0
    failed = set(re.findall(r"^Error in rule (\w+):", run.log, re.M))
    assert failed, run.log[-3000:]
    gpu_rules = {"score_imitation", "eval_play_baseline", "eval_reasoning", "selfplay",
                 "train_imitation"}  # fmt: skip
    assert failed <= gpu_rules, failed
    # the CPU jobs before them finished
    for done in ("results/words/train.txt", "results/data/sft.parquet",
                 "results/imitation/samples.parquet"):  # fmt: skip
        assert (workdir / done).exists(), done
    logs = list((workdir / "results" / "logs").rglob("*.log"))
    refused = [p for p in logs if "asks for GPUs" in p.read_text(errors="replace")]
    assert refused, [str(p) for p in logs]
    for path in refused:
        text = path.read_text()
        assert "driver supports CUDA" in text and "Traceback" not in text, path
    # nothing ran the 7B-shaped work on the CPU: no model, no shard
    assert not (workdir / "results" / "imitation" / "model").exists()
    assert not list((workdir / "results").glob("epoch1/selfplay/*.parquet"))
