"""A real pretrained model through the whole loop: wall time from nothing and the run's results.

Runs ``snakemake spag_epoch3 --configfile configs/smollm2-135m.yaml`` in a fresh copy of
the workflow (goal: 60 minutes or less on a 2-core CPU), then ``snakemake all`` for the
summary tables and plots, and copies those under ``--results`` with a Markdown record
(command, date, load, seconds per step, outcome and evaluation tables).

Usage: python perf/bench_real_model.py [--config configs/smollm2-135m.yaml]
           [--workdir DIR] [--results perf/results/smollm2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

ROLES = ("attacker", "defender")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "perf"))

from bench_workflow import seconds_table, timed  # noqa: E402
from workflow_utils import job_counts, make_workdir  # noqa: E402


def _tsv_as_markdown(path: Path, columns: list[str] | None = None) -> list[str]:
    rows = [line.split("\t") for line in path.read_text().splitlines() if line]
    header, body = rows[0], rows[1:]
    keep = [header.index(c) for c in columns if c in header] if columns else range(len(header))
    out = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    out += ["| " + " | ".join(r[i] for i in keep) + " |" for r in body]
    return out


def _rate(k: int, n: int) -> str:
    from spag.evaluation.games import wilson_interval

    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]" if n else "n/a"


def learning_table(results: Path) -> list[str]:
    """By model: its own self-play (the games of the next epoch: rule breaks, decisive
    games), its wins against M0 per role (95% Wilson intervals), its reasoning score."""
    import csv

    def rows(path: Path) -> list[dict]:
        with open(path, newline="") as f:
            return list(csv.DictReader(f, delimiter="\t"))

    games = {(r["model"], r["role"]): r for r in rows(results / "summary" / "eval_games.tsv")}
    reasoning = {
        r["model"]: r
        for r in rows(results / "summary" / "reasoning.tsv")
        if r["task"] != "geometric_mean"
    }
    epochs = {r["epoch"]: r for r in rows(results / "summary" / "epochs.tsv")}
    out = [
        "| model | its self-play: attacker broke rules | its self-play: decisive | "
        "vs M0, as attacker: wins | as attacker: broke rules | as defender: wins | "
        "reasoning (acc ± 1.96 s.e.) |",
        "|---|---|---|---|---|---|---|",
    ]
    models = [m for m in ("base", "imitation") if (m, "attacker") in games]
    models += sorted({m for m, _ in games if m.startswith("epoch")}, key=lambda m: int(m[5:]))
    for m in models:
        e = m[5:] if m.startswith("epoch") else None
        # M(k) plays itself in epoch k + 1; the base model never plays itself.
        k = {"base": None, "imitation": 0}.get(m, None if e is None else int(e))
        sp = epochs.get(str(k + 1)) if k is not None else None
        n = int(sp["selfplay_games"]) if sp else 0
        broke = _rate(int(sp["attacker_broke_rules"]), n) if sp else "-"
        decisive = _rate(int(sp["decisive_games"]), n) if sp else "-"
        wins = [_rate(int(games[m, r]["wins"]), int(games[m, r]["games"])) for r in ROLES]
        att = games[m, "attacker"]
        own_breaks = _rate(int(att["broke_rules"]), int(att["games"]))
        r = reasoning.get(m)
        score = f"{float(r['score']):.3f} ± {1.96 * float(r['stderr']):.3f}" if r else "-"
        label = {"base": "base", "imitation": "M0"}.get(m, f"M{e}")
        out.append(
            f"| {label} | {broke} | {decisive} | {wins[0]} | {own_breaks} | {wins[1]} | {score} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "smollm2-135m.yaml"))
    ap.add_argument("--workdir", default=None, help="run folder (default: a new temporary one)")
    ap.add_argument("--results", default=str(REPO / "perf" / "results" / "smollm2"))
    ap.add_argument(
        "--learning-only",
        action="store_true",
        help="only (re)write learning.md from the finished run in --workdir",
    )
    args = ap.parse_args()
    if args.learning_only:
        write_learning(Path(args.workdir), Path(args.results), Path(args.config).name)
        return
    overlay = yaml.safe_load(Path(args.config).read_text())
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spag-real-"))
    if workdir.exists() and any(workdir.glob("results/*")):
        sys.exit(f"{workdir}: holds an earlier run; the benchmark starts from nothing")
    wd = make_workdir(workdir, overlay)
    load = os.getloadavg()[0]
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    secs, cpu, res = timed(wd, "spag_epoch3", timeout=3 * 3600)
    jobs = sum(job_counts(res.stdout + res.stderr).values())
    print(f"spag_epoch3: {secs / 60:.1f} min ({jobs} jobs) in {wd}")
    secs_all, _, _ = timed(wd, "all", timeout=3600)

    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted((wd / "results" / "summary").glob("*.tsv")):
        shutil.copy(f, out / f.name)
    for f in sorted((wd / "results" / "plots").glob("*.png")):
        shutil.copy(f, out / f.name)
    for e in range(1, overlay.get("epochs", 3) + 1):
        shutil.copy(wd / f"results/epoch{e}/outcomes.tsv", out / f"outcomes_epoch{e}.tsv")
    name = Path(args.config).name
    lines = [
        f"# `{name}` from nothing",
        "",
        f"Started {started}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average at the start {load:.1f}.",
        f"Command: `python perf/bench_real_model.py --config configs/{name}`, which runs "
        f"`snakemake spag_epoch3 --configfile configs/{name}` in a fresh copy of the workflow.",
        "",
        f"**spag_epoch3: {secs / 60:.1f} min wall** ({jobs} jobs, {cpu / 60:.1f} min CPU over "
        f"all jobs; goal: 60 min or less); `snakemake all` afterwards (tables, plots): "
        f"{secs_all:.0f} s.",
        "",
        *seconds_table(wd),
    ]
    lines += ["", "## Evaluation games against M0 (95% Wilson intervals)", ""]
    cols = ["model", "role", "games", "win_rate", "win_rate_lo", "win_rate_hi"]
    cols += ["tie_rate", "broke_rules_rate", "broke_rules_rate_lo", "broke_rules_rate_hi"]
    lines += _tsv_as_markdown(out / "eval_games.tsv", cols)
    lines += ["", "## Self-play outcomes per epoch", ""]
    for e in range(1, overlay.get("epochs", 3) + 1):
        lines += [f"Epoch {e}:", ""] + _tsv_as_markdown(out / f"outcomes_epoch{e}.tsv") + [""]
    lines += ["## Reasoning", ""] + _tsv_as_markdown(out / "reasoning.tsv") + [""]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/README.md")
    write_learning(wd, out, name)


def write_learning(workdir: Path, out: Path, config_name: str) -> None:
    """learning.md: the learning-signal table of the finished run in ``workdir``."""
    lines = [
        f"# Learning signal of `{config_name}`",
        "",
        f"From the run's `results/summary/` tables ({workdir}); counts with 95% Wilson "
        "intervals. Evaluation games are greedy, against M0, on the held-out words.",
        "",
        *learning_table(workdir / "results"),
    ]
    (out / "learning.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/learning.md")


if __name__ == "__main__":
    main()
