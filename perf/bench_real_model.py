"""A real pretrained model through the whole loop: wall time from nothing and the run's results.

Runs ``snakemake spag_epoch3 --configfile configs/smollm2-135m.yaml`` in a fresh copy of
the workflow (goal: 60 minutes or less on a 2-core CPU), then ``snakemake all`` for the
summary tables and plots, and copies those under ``--results`` with a Markdown record
(command, date, load, seconds per step, outcome and evaluation tables).

With ``--control`` the control arm (``rewards.control: true``) then runs in a copy of
that folder: it shares M0 and epoch 1's self-play games and redoes everything after
them; ``spag compare-arms`` pairs the arms, and the control's tables and games go to
``--results``/control/.

Usage: python perf/bench_real_model.py [--config configs/smollm2-135m.yaml] [--seed S]
           [--workdir DIR] [--results perf/results/smollm2/seedS] [--control]
       python perf/bench_real_model.py --combine 42=DIR 43=DIR [--results DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
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


def timeline(workdir: Path) -> list[str]:
    """Markdown lines: every job's start and end (minutes from the first job's start;
    end: its benchmark file written, start: that minus the job's wall seconds), and
    the minutes a training job waited after its inputs were ready (both cores needed,
    one held by another job)."""
    results = workdir / "results"
    jobs = []
    for tsv in sorted((results / "benchmarks").rglob("*.tsv")):
        rows = tsv.read_text().splitlines()
        if len(rows) < 2:
            continue
        wall = float(rows[1].split("\t")[0])
        end = tsv.stat().st_mtime
        jobs.append((end - wall, end, str(tsv.relative_to(results / "benchmarks"))))
    t0 = min(start for start, _, _ in jobs)
    lines = [
        "Job timeline (minutes from the first job's start):",
        "",
        "| job | start | end | waited for a free core |",
        "|---|---:|---:|---:|",
    ]
    ends = {name: end for _, end, name in jobs}
    # A training job's inputs are ready when its scoring job ends.
    ready_after = {"imitation/train.tsv": "imitation/score.tsv"}
    ready_after.update({f"epoch{e}/train.tsv": f"epoch{e}/score_ref.tsv" for e in range(1, 99)})
    for start, end, name in sorted(jobs):
        before = ready_after.get(name)
        waited = f"{(start - ends[before]) / 60:.1f}" if before in ends else ""
        lines.append(
            f"| {name[:-4]} | {(start - t0) / 60:.1f} | {(end - t0) / 60:.1f} | {waited} |"
        )
    return lines


def _tsv_as_markdown(path: Path, columns: list[str] | None = None) -> list[str]:
    rows = [line.split("\t") for line in path.read_text().splitlines() if line]
    header, body = rows[0], rows[1:]
    keep = [header.index(c) for c in columns if c in header] if columns else range(len(header))
    out = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    out += ["| " + " | ".join(r[i] for i in keep) + " |" for r in body]
    return out


def rate_cell(k: int, n: int) -> str:
    """``k/n = rate [lo, hi]`` with the 95% Wilson interval."""
    from spag.evaluation.games import wilson_interval

    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]" if n else "n/a"


def reasoning_cell(row: dict | None, digits: int = 3) -> str:
    """A reasoning score with its 95% normal interval half-width, or ``-`` without one."""
    if row is None:
        return "-"
    return f"{float(row['score']):.{digits}f} ± {1.96 * float(row['stderr']):.{digits}f}"


def _rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def _games(results: Path) -> dict[tuple[str, str], dict]:
    """A run's evaluation games table, by (model, role)."""
    return {(r["model"], r["role"]): r for r in _rows(results / "eval_games.tsv")}


def _reasoning(results: Path) -> dict[str, dict]:
    """A run's reasoning scores by model (the task rows, not their geometric mean)."""
    return {
        r["model"]: r for r in _rows(results / "reasoning.tsv") if r["task"] != "geometric_mean"
    }


def _decisive(row: dict) -> int:
    """Games won by either side by play: neither a rule break nor a tie."""
    return int(row["games"]) - int(row["ties"]) - int(row["broke_rules"])


def _models(games: dict) -> list[str]:
    models = [m for m in ("base", "imitation") if (m, "attacker") in games]
    return models + sorted({m for m, _ in games if m.startswith("epoch")}, key=lambda m: int(m[5:]))


def _label(model: str) -> str:
    return {"base": "base", "imitation": "M0"}.get(model, f"M{model[5:]}")


def _opponent(games: dict) -> str:
    names = {r["opponent"] for r in games.values()} - {"opponent"}
    return ", ".join(sorted(names)) or "the opponent"


def learning_table(results: Path) -> list[str]:
    """By model: its own self-play (the games of the next epoch: rule breaks, decisive
    games), its evaluation games against the fixed opponent per role (95% Wilson
    intervals), its reasoning score. ``results``: a folder with the run's summary
    tables (``eval_games.tsv``, ``epochs.tsv``, ``reasoning.tsv``)."""
    games = _games(results)
    reasoning = _reasoning(results)
    epochs = {r["epoch"]: r for r in _rows(results / "epochs.tsv")}
    out = [
        "| model | its self-play: attacker broke rules | its self-play: decisive | "
        "as attacker: broke rules | as attacker: decisive | as attacker: wins | "
        "as defender: decisive | as defender: wins | reasoning (acc ± 1.96 s.e.) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in _models(games):
        # M(k) plays itself in epoch k + 1; the base model never plays itself.
        k = None if m == "base" else 0 if m == "imitation" else int(m[5:])
        sp = epochs.get(str(k + 1)) if k is not None else None
        n = int(sp["selfplay_games"]) if sp else 0
        broke = rate_cell(int(sp["attacker_broke_rules"]), n) if sp else "-"
        decisive = rate_cell(int(sp["decisive_games"]), n) if sp else "-"
        att, dfd = games[m, "attacker"], games[m, "defender"]
        cells = [
            rate_cell(int(att["broke_rules"]), int(att["games"])),
            rate_cell(_decisive(att), int(att["games"])),
            rate_cell(int(att["wins"]), int(att["games"])),
            rate_cell(_decisive(dfd), int(dfd["games"])),
            rate_cell(int(dfd["wins"]), int(dfd["games"])),
        ]
        r = reasoning.get(m)
        score = reasoning_cell(r)
        out.append(f"| {_label(m)} | {broke} | {decisive} | {' | '.join(cells)} | {score} |")
    return out


PAIRED_METRICS = {"broke_rules": "broke rules", "decisive": "decisive", "win": "wins"}


def _diff(row: dict, metric: str) -> tuple[float, float, float, float] | None:
    if not row.get(f"{metric}_diff"):
        return None
    return tuple(float(row[f"{metric}_diff{s}"]) for s in ("", "_lo", "_hi", "_p"))


def diff_cell(d: tuple[float, float, float, float] | None) -> str:
    """A paired difference ``(diff, lo, hi, McNemar p)`` as ``+d [lo, hi], p=...``."""
    if d is None:
        return "-"
    x, lo, hi, p = d
    return f"{x:+.2f} [{lo:+.2f}, {hi:+.2f}], p={p:.2g}"


def _effect(d: tuple[float, float, float, float] | None) -> int:
    """+1 / -1: the paired interval excludes zero on that side and McNemar's p < 0.05;
    0: no effect resolved."""
    if d is None:
        return 0
    x, lo, hi, p = d
    if p < 0.05 and (lo > 0 or hi < 0):
        return 1 if x > 0 else -1
    return 0


def paired_table(results: Path) -> list[str]:
    """Each model minus M0 on the same words and roles (the paired columns of
    ``eval_games.tsv``)."""
    games = _games(results)
    out = [
        "| difference | role | " + " | ".join(PAIRED_METRICS.values()) + " | pairs |",
        "|---|---|---|---|---|---|",
    ]
    for m in _models(games):
        for role in ("attacker", "defender", "all"):
            row = games.get((m, role))
            if row is None or not row.get("pairs"):
                continue
            cells = [diff_cell(_diff(row, k)) for k in PAIRED_METRICS]
            out.append(f"| {_label(m)} - M0 | {role} | {' | '.join(cells)} | {row['pairs']} |")
    return out


def seeds_table(runs: dict[str, Path]) -> list[str]:
    """Each seed's paired difference from M0 side by side, and what both seeds agree
    on: an effect is stated only where, in every seed, the paired interval excludes
    zero on the same side and McNemar's p < 0.05."""
    tables = {seed: _games(d) for seed, d in runs.items()}
    seeds = list(runs)
    models = [m for m in _models(next(iter(tables.values()))) if m != "imitation"]
    out = [
        "| difference | role | metric | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | spread | both seeds |",
        "|---|---|---|" + "---|" * len(seeds) + "---|---|",
    ]
    for m in models:
        for role in ("attacker", "defender", "all"):
            for key, name in PAIRED_METRICS.items():
                ds = [_diff(tables[s].get((m, role), {}), key) for s in seeds]
                if all(d is None for d in ds):
                    continue
                values = [d[0] for d in ds if d is not None]
                spread = f"{max(values) - min(values):.2f}" if len(values) > 1 else "-"
                effects = {_effect(d) for d in ds}
                verdict = (
                    {1: "higher", -1: "lower"}[effects.pop()]
                    if len(effects) == 1 and 0 not in effects
                    else "not resolved"
                )
                out.append(
                    f"| {_label(m)} - M0 | {role} | {name} | "
                    + " | ".join(diff_cell(d) for d in ds)
                    + f" | {spread} | {verdict} |"
                )
    return out


def rates_by_seed(runs: dict[str, Path]) -> list[str]:
    """Each model's own rates against the fixed opponent, one column per seed."""
    tables = {seed: _games(d) for seed, d in runs.items()}
    reasoning = {seed: _reasoning(d) for seed, d in runs.items()}
    seeds = list(runs)
    cols = [
        ("attacker", "broke rules", lambda r: int(r["broke_rules"])),
        ("attacker", "decisive", _decisive),
        ("attacker", "wins", lambda r: int(r["wins"])),
        ("defender", "decisive", _decisive),
        ("defender", "wins", lambda r: int(r["wins"])),
    ]
    head = [f"{role}: {name}" for role, name, _ in cols] + ["reasoning (acc)"]
    out = [
        "| model | seed | " + " | ".join(head) + " |",
        "|---|---|" + "---|" * len(head),
    ]
    for m in _models(next(iter(tables.values()))):
        for s in seeds:
            t = tables[s]
            if (m, "attacker") not in t:
                continue
            cells = [rate_cell(f(t[m, role]), int(t[m, role]["games"])) for role, _, f in cols]
            r = reasoning[s].get(m)
            cells.append(reasoning_cell(r))
            out.append(f"| {_label(m)} | {s} | " + " | ".join(cells) + " |")
    return out


def copy_games(workdir: Path, out: Path) -> None:
    """Every model's evaluation games (a few tens of KB each) into ``out/games/`` (sampled
    ones into ``out/games/sampled/``) and each epoch's self-play episodes into
    ``out/selfplay/``, so the messages behind the tables can be read; the graded hints'
    and the inference's ranks into ``out/ranks/`` and the reasoning records (each item's
    score) into ``out/reasoning/``, so their summaries recompute."""
    results = workdir / "results"
    for f in sorted((results / "eval" / "reasoning").glob("*.json")):
        if f.name.endswith(".job.json"):  # the job's provenance, not a record
            continue
        (out / "reasoning").mkdir(parents=True, exist_ok=True)
        shutil.copy(f, out / "reasoning" / f.name)
    for kind in ("hints", "inference"):
        for f in sorted((results / "eval" / kind).glob("*.parquet")):
            (out / "ranks" / kind).mkdir(parents=True, exist_ok=True)
            shutil.copy(f, out / "ranks" / kind / f.name)
    for kind, sub in (("games", "games"), ("sampled", "games/sampled")):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for f in sorted((results / "eval" / kind).glob("*.parquet")):
            shutil.copy(f, out / sub / f.name)
    for f in sorted(results.glob("epoch*/eval/games.parquet")):
        shutil.copy(f, out / "games" / f"{f.parents[1].name}.parquet")
    for f in sorted(results.glob("epoch*/eval/sampled/games.parquet")):
        shutil.copy(f, out / "games" / "sampled" / f"{f.parents[2].name}.parquet")
    (out / "selfplay").mkdir(exist_ok=True)
    for f in sorted(results.glob("epoch*/episodes.parquet")):
        shutil.copy(f, out / "selfplay" / f"{f.parent.name}.parquet")


def games_profiles(out: Path, game: str) -> list[str]:
    """Self-play per epoch and every model's evaluation games, profiled
    (perf/episode_profile.py: decisive games per role, echoes, openings, cut replies)."""
    from episode_profile import table

    lines = ["## Self-play per epoch", ""]
    lines += table([(f.stem, f) for f in sorted((out / "selfplay").glob("*.parquet"))], game)
    for title, folder in (("Evaluation games", "games"), ("Sampled evaluation games",
                                                          "games/sampled")):  # fmt: skip
        files = {f.stem: f for f in (out / folder).glob("*.parquet")}
        if files:
            ordered = [(m, files[m]) for m in _models({(m, "attacker"): None for m in files})]
            lines += ["", f"## {title}", "", *table(ordered, game)]
    return lines


def openings_table(runs: dict[str, Path]) -> list[str]:
    """What the attacker says first in its evaluation games: how many different first
    messages over the held-out words, and the commonest one with its count."""
    from collections import Counter

    import pyarrow.parquet as pq

    out = [
        "| model | seed | different first messages | commonest first message |",
        "|---|---|---|---|",
    ]
    for seed, d in runs.items():
        names = {f.stem: f for f in (d / "games").glob("*.parquet")}
        for m in _models({(n, "attacker"): None for n in names}):
            games = [
                g for g in pq.read_table(names[m]).to_pylist() if g["policy_role"] == "attacker"
            ]
            firsts = [g["history"][0]["content"].replace("\n", " ").strip() for g in games]
            # Ties go to the first message in text order: the same however the games
            # were sharded.
            top, count = min(Counter(firsts).items(), key=lambda kv: (-kv[1], kv[0]))
            top = top.replace("|", "\\|")
            out.append(
                f"| {_label(m)} | {seed} | {len(set(firsts))} of {len(firsts)} | "
                f"{count}x: {top[:90]} |"
            )
    return out


def _rate_entry(k: int, n: int) -> tuple[str, float]:
    return rate_cell(k, n), k / n


def _diff_entry(d: tuple[float, float, float, float] | None) -> tuple[str, float | None]:
    return diff_cell(d), d[0] if d else None


def compact_table(runs: dict[str, Path]) -> list[str]:
    """The README's table: per model and seed, the rates against the fixed opponent
    with each model's paired difference from its own seed's M0 beside them."""
    out = [
        "| model | seed | as attacker: broke rules | minus M0 (paired) | as attacker: wins | "
        "as defender: wins | decisive, both roles | minus M0 (paired) | reasoning (acc) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    tables = {seed: _games(d) for seed, d in runs.items()}
    reasoning = {seed: _reasoning(d) for seed, d in runs.items()}
    for m in _models(next(iter(tables.values()))):
        values: list[list[float | None]] = []
        for s, t in tables.items():
            if (m, "attacker") not in t:
                continue
            att, dfd, both = t[m, "attacker"], t[m, "defender"], t[m, "all"]
            r = reasoning[s].get(m)
            # (cell, value for the spread) per column
            entries = [
                _rate_entry(int(att["broke_rules"]), int(att["games"])),
                _diff_entry(_diff(att, "broke_rules")),
                _rate_entry(int(att["wins"]), int(att["games"])),
                _rate_entry(int(dfd["wins"]), int(dfd["games"])),
                _rate_entry(_decisive(both), int(both["games"])),
                _diff_entry(_diff(both, "decisive")),
                (reasoning_cell(r, 2), float(r["score"]) if r else None),
            ]
            values.append([v for _, v in entries])
            out.append(f"| {_label(m)} | {s} | " + " | ".join(c for c, _ in entries) + " |")
        if len(values) > 1:
            # The spread over seeds: the largest value minus the smallest, per column.
            spread = []
            for column in zip(*values, strict=True):
                known = [v for v in column if v is not None]
                spread.append(f"{max(known) - min(known):.2f}" if len(known) > 1 else "-")
            out.append(f"| {_label(m)} | spread | " + " | ".join(spread) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "smollm2-135m.yaml"))
    ap.add_argument("--workdir", default=None, help="run folder (default: a new temporary one)")
    ap.add_argument("--results", default=str(REPO / "perf" / "results" / "smollm2"))
    ap.add_argument("--seed", type=int, default=None, help="override the config's seed")
    ap.add_argument(
        "--control",
        action="store_true",
        help="then run the control arm (rewards.control: true) in a copy of the run folder",
    )
    ap.add_argument(
        "--learning-only",
        action="store_true",
        help="only (re)write learning.md from the tables already copied to --results",
    )
    ap.add_argument(
        "--combine",
        nargs="+",
        metavar="SEED=DIR",
        help="only write --results/seeds.md from finished seeds' result folders "
        "(each seed side by side, and what every seed agrees on)",
    )
    args = ap.parse_args()
    if args.combine:
        runs = dict(item.split("=", 1) for item in args.combine)
        write_seeds(Path(args.results), {s: Path(d) for s, d in runs.items()})
        return
    if args.learning_only:
        write_learning(Path(args.results), Path(args.config).name)
        return
    overlay = yaml.safe_load(Path(args.config).read_text())
    if args.seed is not None:
        overlay["seed"] = args.seed
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
    copy_games(wd, out)
    name = Path(args.config).name
    seed_flag = f" --seed {args.seed}" if args.seed is not None else ""
    lines = [
        f"# `{name}` from nothing",
        "",
        f"Started {started}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average at the start {load:.1f}.",
        f"Command: `python perf/bench_real_model.py --config configs/{name}{seed_flag}`, "
        "which runs "
        f"`snakemake spag_epoch3 --configfile configs/{name}` in a fresh copy of the workflow.",
        "",
        f"**spag_epoch3: {secs / 60:.1f} min wall** ({jobs} jobs, {cpu / 60:.1f} min CPU over "
        f"all jobs; goal: 60 min or less); `snakemake all` afterwards (tables, plots): "
        f"{secs_all:.0f} s.",
        "",
        *seconds_table(wd),
        "",
        *timeline(wd),
    ]
    lines += ["", "## Evaluation games (95% Wilson intervals)", ""]
    cols = ["model", "role", "games", "win_rate", "win_rate_lo", "win_rate_hi"]
    cols += ["tie_rate", "broke_rules_rate", "broke_rules_rate_lo", "broke_rules_rate_hi"]
    lines += _tsv_as_markdown(out / "eval_games.tsv", cols)
    lines += ["", "## Self-play outcomes per epoch", ""]
    for e in range(1, overlay.get("epochs", 3) + 1):
        lines += [f"Epoch {e}:", ""] + _tsv_as_markdown(out / f"outcomes_epoch{e}.tsv") + [""]
    lines += ["## Reasoning", ""] + _tsv_as_markdown(out / "reasoning.tsv") + [""]
    lines += games_profiles(out, overlay.get("game", {}).get("name", "taboo")) + [""]
    control_secs = None
    if args.control:
        game = overlay.get("game", {}).get("name", "taboo")
        control_lines, control_secs = control_arm(wd, out, game)
        lines += ["", *control_lines]
    (out / "run.tsv").write_text(
        "started\tload\tseed\tspag_wall_s\tcontrol_wall_s\n"
        f"{started}\t{load:.2f}\t{overlay.get('seed')}\t{secs + secs_all:.0f}\t"
        f"{'' if control_secs is None else f'{control_secs:.0f}'}\n"
    )
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/README.md")
    write_learning(out, name)


def control_arm(spag: Path, out: Path, game: str) -> tuple[list[str], float]:
    """Run the control arm in a copy of the finished SPAG folder (``rewards.control:
    true``; M0 and epoch 1's games are shared, the rest is redone), pair the arms with
    ``spag compare-arms`` into ``out/arms.tsv`` and copy the control's tables and games
    to ``out/control/``; Markdown lines saying how long it took, and its wall seconds."""
    control = spag.with_name(spag.name + "-control")
    if control.exists():
        shutil.rmtree(control)
    shutil.copytree(spag, control, symlinks=True)
    shutil.rmtree(control / "checkpoints", ignore_errors=True)  # SPAG's, not to resume
    load = os.getloadavg()[0]
    secs, cpu, res = timed(control, "all", config={"rewards": {"control": True}}, timeout=3 * 3600)
    jobs = sum(job_counts(res.stdout + res.stderr).values())
    print(f"control arm: {secs / 60:.1f} min ({jobs} jobs) in {control}")
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "spag"), "compare-arms", "--spag", str(spag), "--control", str(control)]
    subprocess.run([*cmd, "--game", game, "--output", str(out / "arms.tsv")], check=True)
    (out / "control").mkdir(exist_ok=True)
    for f in sorted((control / "results" / "summary").glob("*.tsv")):
        shutil.copy(f, out / "control" / f.name)
    copy_games(control, out / "control")
    return [
        "## Control arm",
        "",
        f"`rewards.control: true` in a copy of this run folder (load average at its start "
        f"{load:.1f}): **{secs / 60:.1f} min wall** ({jobs} jobs, {cpu / 60:.1f} min CPU), "
        "M0 and epoch 1's self-play games shared with SPAG. Its tables and games: "
        "`control/`; SPAG minus control, model by model: `arms.tsv`.",
    ], secs


def write_learning(out: Path, config_name: str) -> None:
    """learning.md: the learning-signal tables of the run whose summary tables are in
    ``out``."""
    games = _games(out)
    lines = [
        f"# Learning signal of `{config_name}`",
        "",
        "From the run's `results/summary/` tables (copied here); counts with 95% Wilson "
        f"intervals. Evaluation games are greedy, against {_opponent(games)}, on the "
        "held-out words, each word once per role.",
        "",
        *learning_table(out),
        "",
        "Paired: each model minus M0 on the same words and roles (95% bootstrap "
        "interval over words, exact McNemar p):",
        "",
        *paired_table(out),
    ]
    (out / "learning.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/learning.md")


def write_seeds(out: Path, runs: dict[str, Path]) -> None:
    """seeds.md of several seeds' runs: each seed's rates and paired differences from
    its own M0 side by side, and the effects every seed agrees on."""
    seeds = " ".join(f"{s}={d}" for s, d in runs.items())
    lines = [
        "# SmolLM2-135M, several seeds",
        "",
        f"Command: `python perf/bench_real_model.py --combine {seeds}` after one "
        "`python perf/bench_real_model.py --seed S --results DIR` per seed (each folder's "
        "README.md: its command, date, load and seconds per step).",
        "",
        "Each model's evaluation games (greedy, held-out words, each word once per role, "
        "against the fixed opponent; 95% Wilson intervals):",
        "",
        *rates_by_seed(runs),
        "",
        "Each model minus its own seed's M0 on the same words and roles (95% bootstrap "
        "interval over words, exact McNemar p). `both seeds`: `higher`/`lower` only where "
        "every seed's interval excludes zero on that side and p < 0.05; `spread`: the "
        "largest minus the smallest difference over seeds.",
        "",
        *seeds_table(runs),
        "",
        "The attacker's first message in its evaluation games:",
        "",
        *openings_table(runs),
        "",
        "The README's table:",
        "",
        *compact_table(runs),
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/seeds.md")


if __name__ == "__main__":
    main()
