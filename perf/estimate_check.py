"""The estimate against reality: calibrate a config on the SLURM cluster `sbatch` reaches,
estimate `spag_epoch3`, run it, and compare, rule by rule and for the target.

    python perf/estimate_check.py NAME [--configfile FILE...] [--jobs N] [--output-dir DIR]

In a fresh copy of the workflow: `snakemake --profile P calibrate`; the estimate E0 of
`spag_epoch3` (`spag estimate`'s own functions: spag.ops.timing); `snakemake spag_epoch1`;
the estimate E1 of the rest from the run's own jobs; `snakemake spag_epoch3`. The actual
time of a rule is the sum of its jobs' benchmark files; the wall times are the Snakemake
commands'. Writes DIR/NAME.json and DIR/NAME.md (default perf/results/estimate/). The
profile is the SLURM tests' (the shipped cluster profile, polling each second).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_slurm import write_test_profile  # noqa: E402  (the shipped profile, fast polling)
from workflow_utils import WORKFLOW_FILES  # noqa: E402

from spag.config import read_config_files, validate_config  # noqa: E402
from spag.ops.calibration import read_calibration  # noqa: E402
from spag.ops.timing import format_times, rule_times, snakemake_plan  # noqa: E402

TARGET = "spag_epoch3"


def run(cmd: list[str], cwd: Path, log: Path) -> float:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    start = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): see {log}")
    return time.monotonic() - start


def estimate(run_dir: Path, files: list[str], config: dict, jobs_at_once: int) -> dict:
    plan = snakemake_plan(TARGET, run_dir, files)
    times, shape = rule_times(plan, config, run_dir)
    pending = sorted(f"{j.rule}|{j.wildcards}" for j in plan if j.pending)
    wall = sum(
        -(-t.pending // jobs_at_once) * (t.per_job + t.overhead)
        for t in times
        if t.per_job and t.pending
    )
    return {
        "text": format_times(times, shape, jobs_at_once, f"{TARGET}, from measured figures:"),
        "rules": {
            t.rule: {"pending": t.pending, "per_job": t.per_job, "left": t.left, "source": t.source}
            for t in times
        },  # fmt: skip
        "pending": pending,
        "job_seconds": sum(t.left or 0.0 for t in times),
        "wall": wall,
        "no_figure": [t.rule for t in times if t.pending and t.per_job is None],
    }


def actual(run_dir: Path, files: list[str], keys: set[str]) -> dict[str, float]:
    """Each rule's measured job time over the jobs ``keys`` (rule|wildcards)."""
    out: dict[str, float] = {}
    for j in snakemake_plan(TARGET, run_dir, files):
        if f"{j.rule}|{j.wildcards}" in keys and j.seconds is not None:
            out[j.rule] = out.get(j.rule, 0.0) + j.seconds
    return out


def partial(root: Path, files: list[str], name: str, out: Path) -> None:
    """A run stopped before its end: each estimate against the jobs finished so far, rule
    by rule (the estimate's figure a job x the jobs finished, against their time)."""
    run_dir = root / "run"
    plan = {f"{j.rule}|{j.wildcards}": j for j in snakemake_plan(TARGET, run_dir, files)}
    md = [f"# The estimate against reality, the jobs finished so far: {name}", ""]
    for label in ("e0", "e1"):
        path = root / f"{label}.json"
        if not path.is_file():
            continue
        est = json.loads(path.read_text())
        md += [f"## {label.upper()}", "", "| rule | finished of planned | estimated (s) | actual (s) | error |",
               "|---|---:|---:|---:|---:|"]  # fmt: skip
        done: dict[str, list[float]] = {}
        for key in est["pending"]:
            j = plan.get(key)
            if j is not None and not j.pending and j.seconds is not None:
                done.setdefault(j.rule, []).append(j.seconds)
        te = ta = 0.0
        for rule, secs in done.items():
            per_job = est["rules"][rule]["per_job"]
            a = sum(secs)
            if per_job is None:
                md.append(
                    f"| {rule} | {len(secs)} of {est['rules'][rule]['pending']} | - | {a:.0f} | - |"
                )
                continue
            e = per_job * len(secs)
            te, ta = te + e, ta + a
            md.append(f"| {rule} | {len(secs)} of {est['rules'][rule]['pending']} | {e:.0f} | "
                      f"{a:.0f} | {(e - a) / a:+.0%} |")  # fmt: skip
        if ta:
            md.append(
                f"| **finished jobs with a figure** | | {te:.0f} | {ta:.0f} | {(te - ta) / ta:+.0%} |"
            )
        md.append("")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-partial.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def compare(est: dict, act: dict[str, float], wall: float) -> list[str]:
    lines = ["| rule | jobs | estimated (s) | actual (s) | error | source |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for rule, r in est["rules"].items():
        if not r["pending"]:
            continue
        a = act.get(rule)
        e = r["left"]
        err = f"{(e - a) / a:+.0%}" if e is not None and a else "-"
        lines.append(f"| {rule} | {r['pending']} | {e:.0f} | {a:.0f} | {err} | {r['source']} |"
                     if e is not None and a is not None else
                     f"| {rule} | {r['pending']} | {'-' if e is None else f'{e:.0f}'} | "
                     f"{'-' if a is None else f'{a:.0f}'} | - | {r['source']} |")  # fmt: skip
    total_a = sum(act.values())
    covered = sum(act.get(rule, 0.0) for rule, r in est["rules"].items() if r["left"] is not None)
    lines.append(
        f"| **job time** (rules with a figure) | | {est['job_seconds']:.0f} | {covered:.0f} | "
        f"{(est['job_seconds'] - covered) / covered:+.0%} | |"
    )
    lines.append(f"| job time, every rule | | | {total_a:.0f} | | |")
    lines.append(
        f"| **wall** | | {est['wall']:.0f} | {wall:.0f} | {(est['wall'] - wall) / wall:+.0%} | "
        "estimate: job time of the rules one after another; actual: the Snakemake command |"
    )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name")
    p.add_argument("--configfile", nargs="*", default=[], help="overlays over config.yaml")
    p.add_argument("--jobs", type=int, default=2, help="jobs of a rule at once (the estimate)")
    p.add_argument("--output-dir", type=Path, default=REPO / "perf" / "results" / "estimate")
    p.add_argument("--keep", type=Path, default=None, help="run here (kept) instead of /tmp")
    p.add_argument(
        "--partial",
        action="store_true",
        help="the run in --keep was stopped: compare its estimates with the jobs finished",
    )
    args = p.parse_args()
    if args.partial:
        files = ["config.yaml", *(f"overlay{i}.yaml" for i in range(len(args.configfile)))]
        partial(args.keep, files, args.name, args.output_dir)
        return

    root = args.keep or Path(tempfile.mkdtemp(prefix="estimate-check-"))
    run_dir = root / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, run_dir / name)
    files = ["config.yaml"]
    for i, f in enumerate(args.configfile):
        shutil.copy2(f, run_dir / f"overlay{i}.yaml")
        files.append(f"overlay{i}.yaml")
    profile = write_test_profile(root / "profile")
    config, given = read_config_files([run_dir / f for f in files])
    config = validate_config(config, given=given)
    log = root / "snakemake.log"
    smk = [sys.executable, str(REPO / "tests" / "slurm_snakemake.py"), "--profile", str(profile)]

    started = dt.datetime.now().astimezone()
    load = os.getloadavg()[0]
    t_cal = run([*smk, "calibrate", "--configfile", *files], run_dir, log)
    e0 = estimate(run_dir, files, config, args.jobs)
    (root / "e0.json").write_text(json.dumps(e0, indent=2))  # kept if a later step fails
    t1 = run([*smk, "spag_epoch1", "--configfile", *files], run_dir, log)
    e1 = estimate(run_dir, files, config, args.jobs)
    (root / "e1.json").write_text(json.dumps(e1, indent=2))
    t23 = run([*smk, TARGET, "--configfile", *files], run_dir, log)
    act0 = actual(run_dir, files, set(e0["pending"]))
    act1 = actual(run_dir, files, set(e1["pending"]))
    cal = read_calibration(run_dir / "results" / "calibration")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "name": args.name,
        "command": " ".join(["python", "perf/estimate_check.py", *sys.argv[1:]]),
        "date": started.isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_1min_at_start": load,
        "configfiles": files,
        "jobs_at_once": args.jobs,
        "wall": {"calibrate": t_cal, "spag_epoch1": t1, "rest": t23},
        "calibration": {k: v["figures"] for k, v in cal.items()},
        "e0": e0, "e1": e1, "actual_e0": act0, "actual_e1": act1,
    }  # fmt: skip
    (args.output_dir / f"{args.name}.json").write_text(json.dumps(record, indent=2) + "\n")
    md = [
        f"# The estimate against reality: {args.name}",
        "",
        f"`{record['command']}`, {record['date']}, host {record['host']} ({record['cpus']} "
        f"CPUs, 1-minute load {load:.1f} at the start), the one-node SLURM cluster of "
        f"scripts/start-slurm.sh; config {' + '.join(files)}; the estimate at "
        f"{args.jobs} job(s) of a rule at once.",
        "",
        f"Calibration: {t_cal:.0f} s wall. spag_epoch1: {t1:.0f} s. Epochs 2-3 and the rest: "
        f"{t23:.0f} s.",
        "",
        "## E0: spag_epoch3 estimated after the calibration, before the run",
        "",
        *compare(e0, act0, t1 + t23),
        "",
        "## E1: the rest estimated after epoch 1, from the run's own jobs",
        "",
        *compare(e1, act1, t23),
        "",
        "## The estimates as printed",
        "",
        "```",
        e0["text"],
        "",
        e1["text"],
        "```",
    ]
    (args.output_dir / f"{args.name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
