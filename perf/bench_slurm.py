"""Wall time of the tiny `spag_epoch1` through SLURM vs the local executor.

Runs the same tiny configuration (the SLURM tests' overlay: 1 epoch, 3 shards, few
words, a couple of optimiser steps) twice from scratch: once with the local executor
(`--cores 2`), once through `snakemake-executor-plugin-slurm` on the cluster that
`sbatch` reaches (CI: scripts/start-slurm.sh). For the SLURM run it splits each job's
life, from the SLURM records and the Snakemake log, into

- submission: Snakemake announcing the job -> sbatch accepted it,
- queue wait: submitted -> started (free CPUs, scheduler),
- job: started -> ended (inner Snakemake start-up + the rule's command),
- notice lag: ended -> Snakemake saw it finish (status polling and its back-off),

and compares the job time with the command time that the rules' `benchmark:` files
measure. Writes Markdown (default perf/results/slurm.md).

    python perf/bench_slurm.py [--output FILE] [--poll 1] [--init 1] [--repeat-poll 20,30]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import test_slurm as ts  # noqa: E402  (the tests' overlay, profile and log parser)

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$", re.M)


def _stamp(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%a %b %d %H:%M:%S %Y")


def log_times(text: str) -> tuple[dict[str, dt.datetime], dict[str, dt.datetime]]:
    """Snakemake job id -> when the job was announced, and when it was seen finished."""
    announced, finished = {}, {}
    now = None
    for line in text.splitlines():
        m = STAMP.match(line)
        if m:
            now = _stamp(m.group(1))
            continue
        m = re.match(r"^\s+jobid: (\d+)$", line)
        if m and now is not None:
            announced.setdefault(m.group(1), now)
        m = re.match(r"^Finished jobid: (\d+) ", line)
        if m and now is not None:
            finished[m.group(1)] = now
    return announced, finished


class SlurmRecorder(threading.Thread):
    """Polls squeue for submit/start/end times while a run goes (records may age out)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.records: dict[str, tuple[str, str, str, str]] = {}
        self.stop = threading.Event()

    def poll(self) -> None:
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-o", "%i|%V|%S|%e|%T"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for line in out.splitlines():
            jid, submit, start, end, state = line.split("|")
            self.records[jid] = (submit, start, end, state)

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(2)


def _iso(value: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def command_seconds(workdir: Path) -> float:
    """Sum of the rules' own `benchmark:` wall times (the commands, without overhead)."""
    total = 0.0
    for tsv in (workdir / "results" / "benchmarks").rglob("*.tsv"):
        with open(tsv) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        total += sum(float(r["s"]) for r in rows[-1:])
    return total


def run(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=ts.job_env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}), see {log}")
    return wall


def local_run(root: Path) -> dict:
    work = ts.make_workdir(root / "local")
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    cmd = [
        snakemake, "spag_epoch1", "--cores", "2", "--snakefile", str(ts.SNAKEFILE),
        "--directory", str(work), "--configfile", str(work / "overlay.yaml"),
    ]  # fmt: skip
    wall = run(cmd, work / "run.log")
    # local jobs are announced as `localrule`: count the finished ones, target rule aside
    text = (work / "run.log").read_text()
    jobs = re.findall(r"^Finished jobid: \d+ \(Rule: (?!spag_epoch)", text, re.M)
    return {"wall": wall, "jobs": len(jobs), "command": command_seconds(work)}


def slurm_run(root: Path, init: int, poll: int) -> dict:
    name = f"slurm-{init}-{poll}"
    work = ts.make_workdir(root / name)
    profile = ts.write_test_profile(root / f"profile-{name}" / "slurm")
    conf = yaml.safe_load((profile / "config.yaml").read_text())
    conf["slurm-init-seconds-before-status-checks"] = init
    conf["seconds-between-status-checks"] = poll
    (profile / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))

    recorder = SlurmRecorder()
    recorder.start()
    try:
        wall = run(ts.snakemake_cmd(work, profile, "spag_epoch1"), work / "run.log")
    finally:
        recorder.stop.set()
        recorder.join()
        recorder.poll()
    text = (work / "run.log").read_text()
    jobs = ts.parse_log(text)
    announced, finished = log_times(text)
    parts = {"submission": [], "queue wait": [], "job": [], "notice lag": []}
    for jobid, job in jobs.items():
        rec = recorder.records.get(job.slurm_id or "")
        if rec is None:
            continue
        submit, start, end = (_iso(v) for v in rec[:3])
        if None in (submit, start, end) or jobid not in finished:
            continue
        parts["submission"].append((submit - announced[jobid]).total_seconds())
        parts["queue wait"].append((start - submit).total_seconds())
        parts["job"].append((end - start).total_seconds())
        parts["notice lag"].append((finished[jobid] - end).total_seconds())
    return {
        "name": f"SLURM (init {init} s, poll {poll} s + back-off)",
        "wall": wall,
        "jobs": len(jobs),
        "submitted": sum(1 for j in jobs.values() if j.slurm_id),
        "command": command_seconds(work),
        "parts": parts,
    }


def report(local: dict, slurms: list[dict], out: Path, load: list[float]) -> str:
    lines = [
        "# Tiny `spag_epoch1`: SLURM vs local executor",
        "",
        f"Measured {dt.date.today().isoformat()} with `python perf/bench_slurm.py` on "
        f"{os.cpu_count()} cores, one-node SLURM from scripts/start-slurm.sh (2 fake GPUs), "
        "the SLURM tests' tiny overlay (1 epoch, 3 shards). Times in seconds. "
        f"1-minute load average before each run: {', '.join(f'{x:.1f}' for x in load)} "
        "(other work on the machine slows both executors alike).",
        "",
        "| executor | jobs | wall | sum of rule commands |",
        "|---|---:|---:|---:|",
        f"| local (`--cores 2`) | {local['jobs']} | {local['wall']:.0f} | {local['command']:.0f} |",
    ]
    for s in slurms:
        lines.append(f"| {s['name']} | {s['submitted']} | {s['wall']:.0f} | {s['command']:.0f} |")
    for s in slurms:
        lines += [
            "",
            f"## Where the time goes: {s['name']}",
            "",
            f"Wall time {s['wall']:.0f} s vs {local['wall']:.0f} s locally "
            f"(+{s['wall'] - local['wall']:.0f} s). Per SLURM job (1 s resolution):",
            "",
            "| part | sum over jobs | mean | max |",
            "|---|---:|---:|---:|",
        ]
        for part, values in s["parts"].items():
            if values:
                lines.append(
                    f"| {part} | {sum(values):.0f} | {statistics.mean(values):.1f} "
                    f"| {max(values):.0f} |"
                )
        job_sum = sum(s["parts"]["job"])
        lines += [
            "",
            f"In-job overhead (job time minus the rules' own command time): "
            f"{job_sum - s['command']:.0f} s over {len(s['parts']['job'])} jobs "
            f"({(job_sum - s['command']) / max(len(s['parts']['job']), 1):.1f} s a job: "
            "the job step's own Snakemake start-up and `srun`).",
        ]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", default=str(REPO / "perf" / "results" / "slurm.md"))
    p.add_argument("--init", type=int, default=1, help="first status check after (default 1 s)")
    p.add_argument("--poll", type=int, default=1, help="status check interval (default 1 s)")
    p.add_argument(
        "--also-profile-polling",
        action="store_true",
        help="also run with the shipped profile's polling (20 s, 30 s)",
    )
    args = p.parse_args()
    if shutil.which("sbatch") is None:
        print("no sbatch on PATH: start a cluster with scripts/start-slurm.sh", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    load = [os.getloadavg()[0]]
    local = local_run(root)
    load.append(os.getloadavg()[0])
    print(f"local: {local['wall']:.0f} s", flush=True)
    slurms = [slurm_run(root, args.init, args.poll)]
    print(f"slurm: {slurms[0]['wall']:.0f} s", flush=True)
    if args.also_profile_polling:
        load.append(os.getloadavg()[0])
        shipped = yaml.safe_load(ts.CLUSTER_PROFILE.read_text())
        slurms.append(
            slurm_run(
                root,
                shipped["slurm-init-seconds-before-status-checks"],
                shipped["seconds-between-status-checks"],
            )
        )
    print(report(local, slurms, Path(args.output), load))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
