"""The SmolLM2 study's report: SPAG and its control arm over several seeds, read from
the folders ``perf/bench_real_model.py --control`` wrote, one per seed.

    python perf/study_report.py 42=perf/results/smollm2/seed42 43=perf/results/smollm2/seed43 \
        [--output perf/results/smollm2]

Writes ``claims.md`` (every paired comparison of every seed side by side, with its
verdict) and ``tables.md`` (each model's levels, the training samples per role and
the self-play games of every epoch, both arms). A comparison *holds* when on every
seed its 95% interval excludes zero on the same side (and, where there is one, for
game rates and reasoning accuracy, McNemar's p < 0.05); otherwise it is *not
resolved*. Two kinds of comparison:

- ``M(e) - M0``: the SPAG arm's model against its own seed's M0 on the same held-out
  words and roles (the paired columns of ``eval_games.tsv``, ``eval_sampled.tsv``,
  ``hints.tsv``, ``inference.tsv``) and on the same reasoning items
  (``reasoning.tsv``);
- ``SPAG - control``: M(e) of both arms (``arms.tsv`` of ``spag compare-arms``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "perf"))

import bench_real_model as bench  # noqa: E402
from episode_profile import table as profile_table  # noqa: E402

ROLES = ("attacker", "defender", "all")
GAME_METRICS = {"win": "wins", "decisive": "decisive", "broke_rules": "broke rules"}


def _rows(path: Path) -> list[dict]:
    """A summary table's rows; none where the run did not write it (no control arm yet)."""
    return bench._rows(path) if path.is_file() else []


def _f(value: str | None) -> float:
    return float(value) if value not in (None, "") else math.nan


def _order(model: str) -> int:
    order = {"base": -1, "imitation": 0}
    return order[model] if model in order else int(model.removeprefix("epoch"))


# A comparison: (kind, model, metric, group) -> (diff, lo, hi, p); p is NaN where the
# metric has no exact test (graded ranks).
Key = tuple[str, str, str, str]
Diff = tuple[float, float, float, float]


def against_m0(folder: Path) -> dict[Key, Diff]:
    """The SPAG arm's paired differences from its M0."""
    out: dict[Key, Diff] = {}
    for table, name in (("eval_games.tsv", "greedy"), ("eval_sampled.tsv", "sampled")):
        for r in _rows(folder / table):
            if r["model"] == "imitation" or not r.get("pairs"):
                continue
            for metric, words in GAME_METRICS.items():
                if r.get(f"{metric}_diff"):
                    d = tuple(_f(r[f"{metric}_diff{s}"]) for s in ("", "_lo", "_hi", "_p"))
                    out["M(e) - M0", r["model"], f"{name} {words}", r["role"]] = d
    for table, column, name in (
        ("hints.tsv", "role", "hint MRR, best message"),
        ("inference.tsv", "source", "inference MRR, best message"),
    ):
        for r in _rows(folder / table):
            if r["model"] == "imitation" or not r.get("paired_mrr_best_diff"):
                continue
            d = (_f(r["paired_mrr_best_diff"]), _f(r["paired_lo"]), _f(r["paired_hi"]), math.nan)
            # Tables of runs scored before calibration have no rank column (raw ranks).
            label = name if r.get("rank", "raw") == "raw" else f"{name} ({r['rank']})"
            out["M(e) - M0", r["model"], label, r[column]] = d
    for r in _rows(folder / "reasoning.tsv"):
        if r["model"] != "imitation" and _f(r.get("paired_pairs")) > 0:
            d = tuple(_f(r[f"paired_{k}"]) for k in ("diff", "lo", "hi", "p"))
            out["M(e) - M0", r["model"], f"reasoning {r['task']}", "all"] = d
    return out


ARM_METRICS = {
    **{f"{m}_rate": f"greedy {w}" for m, w in GAME_METRICS.items()},
    **{f"sampled_{m}_rate": f"sampled {w}" for m, w in GAME_METRICS.items()},
    **{f"hints_mrr_{w}": f"hint MRR, {w} message" for w in ("first", "last", "best")},
    **{f"inference_mrr_{w}": f"inference MRR, {w} message" for w in ("first", "last", "best")},
    **{
        f"{k}_calibrated_mrr_{w}": f"{n} MRR, {w} message (calibrated)"
        for k, n in (("hints", "hint"), ("inference", "inference"))
        for w in ("first", "last", "best")
    },
}


def spag_minus_control(folder: Path) -> dict[Key, Diff]:
    """SPAG minus control, model by model (``arms.tsv``)."""
    out: dict[Key, Diff] = {}
    for r in _rows(folder / "arms.tsv"):
        name = ARM_METRICS.get(r["metric"])
        if r["metric"].startswith("reasoning_") and not math.isnan(_f(r.get("lo"))):
            name = f"reasoning {r['metric'].removeprefix('reasoning_')}"
        if name is not None:
            d = (_f(r["diff"]), _f(r["lo"]), _f(r["hi"]), _f(r["p"]))
            out["SPAG - control", r["model"], name, r["group"]] = d
    return out


def effect(d: Diff | None) -> int:
    """+1 / -1: the interval excludes zero on that side (and p < 0.05 where there is a
    p); 0: not resolved."""
    if d is None or any(math.isnan(v) for v in d[:3]):
        return 0
    x, lo, hi, p = d
    if (lo > 0 or hi < 0) and (math.isnan(p) or p < 0.05):
        return 1 if x > 0 else -1
    return 0


def verdict(ds: list[Diff | None]) -> str:
    effects = {effect(d) for d in ds}
    if len(effects) == 1 and 0 not in effects:
        return {1: "**higher**", -1: "**lower**"}[effects.pop()]
    return "not resolved"


def cell(d: Diff | None) -> str:
    if d is None or math.isnan(d[0]):
        return "-"
    x, lo, hi, p = d
    # a single word, dialogue or item: no interval (cluster_bootstrap's nan)
    text = f"{x:+.3f}" + (
        f" [{lo:+.3f}, {hi:+.3f}]" if not math.isnan(lo) else " (too few to resample)"
    )
    return text + (f", p={p:.2g}" if not math.isnan(p) else "")


def claims(runs: dict[str, Path]) -> tuple[list[str], list[str]]:
    """Every comparison's table, and the rows that hold on every seed."""
    per_seed = {s: {**against_m0(d), **spag_minus_control(d)} for s, d in runs.items()}
    keys = sorted({k for c in per_seed.values() for k in c},
                  key=lambda k: (k[0], _order(k[1]), list(ARM_METRICS.values()).index(k[2])
                                 if k[2] in ARM_METRICS.values() else 99, k[2], k[3]))  # fmt: skip
    head = ["| comparison | model | metric | group | "
            + " | ".join(f"seed {s}" for s in runs) + " | every seed |",
            "|---|---|---|---|" + "---|" * (len(runs) + 1)]  # fmt: skip
    full, held = list(head), list(head)
    for k in keys:
        ds = [per_seed[s].get(k) for s in runs]
        v = verdict(ds)
        row = f"| {k[0]} | {bench._label(k[1])} | {k[2]} | {k[3]} | " + " | ".join(map(cell, ds))
        full.append(f"{row} | {v} |")
        if v != "not resolved":
            held.append(f"{row} | {v} |")
    return full, held


def _rate(r: dict | None, column: str) -> str:
    if r is None:
        return "-"
    k, n = int(r[column]), int(r["games"])
    return f"{k}/{n} = {k / n:.2f}" if n else "-"


def _mrr(r: dict | None) -> str:
    if r is None:
        return "-"
    m, lo, hi = (_f(r[f"mrr_best{s}"]) for s in ("", "_lo", "_hi"))
    if math.isnan(m):
        return "none to grade"
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if not math.isnan(lo) else f"{m:.3f} (one game)"


def levels(runs: dict[str, Path]) -> list[str]:
    """Each model's own figures, per seed and arm."""
    out = [
        "| model | seed | arm | greedy: wins as attacker | greedy: wins as defender "
        "| sampled: wins as attacker | sampled: wins as defender | greedy: broke rules as "
        "attacker | hint MRR, best (as attacker) | inference MRR, best (all) | reasoning |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    arms = {(s, a): d if a == "SPAG" else d / "control" for s, d in runs.items()
            for a in ("SPAG", "control")}  # fmt: skip
    tables = {}
    for key, d in arms.items():
        # The levels table shows the calibrated hint ranks where the run has them.
        by = {
            name: {(r["model"], r[col]): r for r in _rows(d / f"{name}.tsv")
                   if r.get("rank", "calibrated") == "calibrated"}
            for name, col in (("eval_games", "role"), ("eval_sampled", "role"),
                              ("hints", "role"), ("inference", "source"))
        }  # fmt: skip
        by["reasoning"] = {r["model"]: r for r in _rows(d / "reasoning.tsv")
                           if r.get("task") != "geometric_mean"}  # fmt: skip
        tables[key] = by
    models = sorted({m for t in tables.values() for m, _ in t["eval_games"]}, key=_order)
    for m in models:
        for (s, arm), t in tables.items():
            games, sampled = t["eval_games"], t["eval_sampled"]
            if (m, "attacker") not in games or (arm == "control" and m in ("base", "imitation")):
                continue
            cells = [
                _rate(games.get((m, "attacker")), "wins"),
                _rate(games.get((m, "defender")), "wins"),
                _rate(sampled.get((m, "attacker")), "wins"),
                _rate(sampled.get((m, "defender")), "wins"),
                _rate(games.get((m, "attacker")), "broke_rules"),
                _mrr(t["hints"].get((m, "attacker"))),
                _mrr(t["inference"].get((m, "all"))),
                bench.reasoning_cell(t["reasoning"].get(m)),
            ]
            out.append(f"| {bench._label(m)} | {s} | {arm} | " + " | ".join(cells) + " |")
    return out


def timing(runs: dict[str, Path]) -> list[str]:
    """Each arm's wall time (``run.tsv``): SPAG from nothing (``spag_epoch3`` then
    ``all``), the control from a copy of SPAG's folder (M0 and epoch 1's games shared)."""
    out = ["| seed | started | load | SPAG from nothing | control from SPAG's M0 |",
           "|---|---|---|---|---|"]  # fmt: skip
    for s, d in runs.items():
        for r in _rows(d / "run.tsv"):
            spag, control = (_f(r[k]) / 60 for k in ("spag_wall_s", "control_wall_s"))
            cells = ["not run" if math.isnan(m) else f"{m:.1f} min" for m in (spag, control)]
            out.append(f"| {s} | {r['started']} | {r['load']} | " + " | ".join(cells) + " |")
    return out


def training(runs: dict[str, Path]) -> list[str]:
    """Each epoch's self-play outcome and the samples each role trained on."""
    out = [
        "| seed | arm | epoch | self-play games | decisive | attacker samples "
        "| defender samples | roles untrained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, d in runs.items():
        for arm, folder in (("SPAG", d), ("control", d / "control")):
            for r in _rows(folder / "epochs.tsv"):
                out.append(
                    f"| {s} | {arm} | {r['epoch']} | {r['selfplay_games']} | "
                    f"{r['decisive_games']} | {r['attacker_samples']} | "
                    f"{r['defender_samples']} | {r['roles_untrained']} |"
                )
    return out


def selfplay(runs: dict[str, Path], game: str) -> list[str]:
    """The self-play games of every epoch (perf/episode_profile.py's figures)."""
    files = []
    for s, d in runs.items():
        for arm, folder in (("SPAG", d), ("control", d / "control")):
            for f in sorted((folder / "selfplay").glob("*.parquet")):
                files.append((f"seed {s}, {arm}, {f.stem}", f))
    return profile_table(files, game)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="SEED=DIR")
    ap.add_argument("--output", default=str(REPO / "perf" / "results" / "smollm2"))
    ap.add_argument("--game", default="taboo")
    args = ap.parse_args()
    runs = {s: Path(d) for s, d in (item.split("=", 1) for item in args.runs)}
    out = Path(args.output)
    full, held = claims(runs)
    command = "python perf/study_report.py " + " ".join(args.runs)
    (out / "claims.md").write_text("\n".join([
        "# Every paired comparison, seed by seed",
        "",
        f"Command: `{command}`. 95% intervals: a bootstrap over held-out words (game "
        "rates, hint ranks, the inference's dialogues) or questions (reasoning); p: "
        "exact McNemar (game rates, reasoning accuracy). `every seed`: "
        "higher/lower where the interval excludes zero on that side on every seed (and "
        "p < 0.05 where there is one).",
        "",
        "## Comparisons that hold on every seed",
        "",
        *held,
        "",
        "## All comparisons",
        "",
        *full,
    ]) + "\n")  # fmt: skip
    (out / "tables.md").write_text("\n".join([
        "# Levels, training samples and self-play, seed by seed",
        "",
        f"Command: `{command}`.",
        "",
        "## Wall time of each arm (2 cores)",
        "",
        *timing(runs),
        "",
        "## Each model (greedy and sampled evaluation games against the fixed opponent; "
        "graded hints with 95% intervals; reasoning ± 1.96 s.e.)",
        "",
        *levels(runs),
        "",
        "## Training samples per epoch and role",
        "",
        *training(runs),
        "",
        "## Self-play games of each epoch",
        "",
        *selfplay(runs, args.game),
    ]) + "\n")  # fmt: skip
    print(f"wrote {out}/claims.md and {out}/tables.md ({len(held) - 2} comparisons hold)")


if __name__ == "__main__":
    main()
