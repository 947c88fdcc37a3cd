"""Wall time of the workflow itself.

1. ``snakemake spag_epoch3`` on the embedded default (config.yaml), from nothing,
   in a scratch copy of the workflow (goal: 10 minutes or less on 2 cores).
2. ``snakemake -n spag_epoch3`` with 256 self-play shards per epoch (goal: 10 s or less).

Usage: python perf/bench_workflow.py [--skip-run] [--output perf/results/workflow.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from workflow_utils import job_counts, make_workdir, snakemake  # noqa: E402


def timed(workdir: Path, *args: str, config: dict | None = None, timeout: int = 3600):
    """Wall seconds, CPU seconds (all child processes) and the result of one snakemake run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = snakemake(workdir, *args, config=config, timeout=timeout)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{res.stderr[-4000:]}")
    return elapsed, cpu, res


def step_of(benchmark: Path) -> str:
    """A benchmark file's step: its path under ``results/benchmarks`` without the epoch,
    the shard and the evaluated model (``epoch2/selfplay/shard_001.tsv`` -> ``selfplay``,
    ``eval/play_base/shard_000.tsv`` -> ``eval/play``)."""
    import re

    parts = [
        p for p in benchmark.with_suffix("").parts if not re.fullmatch(r"epoch\d+|shard_\d+", p)
    ]
    return "/".join(re.sub(r"_(base|imitation|epoch\d+)$", "", p) for p in parts)


def per_rule_seconds(workdir: Path) -> dict[str, float]:
    """Sum of the benchmark files' wall seconds per step (:func:`step_of`)."""
    totals: dict[str, float] = {}
    root = workdir / "results" / "benchmarks"
    for tsv in sorted(root.rglob("*.tsv")):
        rows = tsv.read_text().splitlines()
        if len(rows) < 2:
            continue
        key = step_of(tsv.relative_to(root))
        totals[key] = totals.get(key, 0.0) + float(rows[1].split("\t")[0])
    return totals


def seconds_table(workdir: Path) -> list[str]:
    """Markdown lines: seconds per step of a finished run, largest first."""
    lines = [
        "Seconds per step, summed over its jobs (Snakemake benchmark files):",
        "",
        "| step | seconds |",
        "|---|---:|",
    ]
    for key, value in sorted(per_rule_seconds(workdir).items(), key=lambda kv: -kv[1]):
        lines.append(f"| {key} | {value:.1f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-run", action="store_true", help="only the 256-shard dry run")
    ap.add_argument("--output", default=str(REPO / "perf" / "results" / "workflow.md"))
    args = ap.parse_args()
    lines = [
        "# Workflow wall time",
        "",
        f"Date: {datetime.date.today()}; machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; command: `python perf/bench_workflow.py`.",
        f"Load average at the start: {os.getloadavg()[0]:.1f} (wall times need a quiet machine).",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="spag-bench-") as tmp:
        wd = make_workdir(Path(tmp) / "dry")
        secs, cpu, res = timed(
            wd,
            "-n",
            "spag_epoch3",
            config={"selfplay": {"num_shards": 256}, "words": {"num_train": 256}},
        )
        n_jobs = sum(job_counts(res.stdout + res.stderr).values())
        lines += [
            "## Dry run with 256 shards per epoch",
            "",
            f"`snakemake -n spag_epoch3` with `selfplay.num_shards: 256` and 256 train words ({n_jobs} jobs): "
            f"**{secs:.1f} s** wall, {cpu:.1f} s CPU (goal: 10 s or less).",
            "",
        ]
        print(lines[-2])
        if not args.skip_run:
            wd = make_workdir(Path(tmp) / "run")
            secs, cpu, _ = timed(wd, "spag_epoch3")
            lines += [
                "## `snakemake spag_epoch3` on the embedded default",
                "",
                f"From nothing (tiny model built, 3 epochs, 3 shards each; `cores: 2`): "
                f"**{secs / 60:.1f} min** wall, {cpu / 60:.1f} min CPU over all jobs "
                "(goal: 10 min or less).",
                "",
                *seconds_table(wd),
                "",
            ]
            print(f"spag_epoch3: {secs:.0f} s")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
