"""Two arms of one study compared model by model: SPAG against its control arm.

The control arm (config ``rewards.control``) runs the same loop from the same seed,
with its game samples weighing 0: whatever separates its M(e) from SPAG's M(e) is
what self-play's samples did. Both arms evaluate on the same held-out secrets in
the same roles against the same opponent, so every per-game metric is paired:

- evaluation games: win, rule break and decisive rates per role (and both), the
  difference's 95% bootstrap interval over secrets and the exact McNemar p-value
  (:mod:`spag.evaluation.paired`); the sampled games (config
  ``evaluation.sampled_games_per_secret``) the same way, as ``sampled_<metric>_rate``,
  game k of a secret and role paired with the other arm's game k;
- graded hints (Taboo): mean reciprocal rank of the secret after the attacker's
  first, last and best message, per role, paired game by game;
- the defender's inference (Taboo): the same, per dialogue source, paired dialogue
  by dialogue;
- the exact strategy read-out (Kuhn Poker): exploitability, chips per hand against
  the random and the equilibrium player, mass outside the legal moves. These are
  exact for each model: no sampling, so no interval;
- reasoning tasks: each arm's mean over the items both answered, paired item by
  item (bootstrap interval over items; McNemar's p for a 0/1 metric); the headline
  scores without an interval where a record kept no items.

One long table, a row per model, metric and group: ``spag`` and ``control`` (each
arm's value), ``diff`` (spag minus control), ``lo``/``hi`` and ``p`` where they exist.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from itertools import product
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.game.base import Game

ARM_COLUMNS = ("model", "metric", "group", "pairs", "spag", "control", "diff", "lo", "hi", "p")
POKER_METRICS = ("exploitability", "ev_vs_random", "ev_vs_equilibrium", "illegal_mass")
NAN = math.nan


def _row(model: str, metric: str, group: str, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(ARM_COLUMNS, NAN)
    row.update(model=model, metric=metric, group=group, **values)
    return row


def arm_models(results: Path) -> list[str]:
    """The trained models of a run folder's ``results`` that were evaluated (``epoch<N>``)."""
    found = [p.parent.parent.name for p in results.glob("epoch*/eval/games.parquet")]
    return sorted(found, key=lambda m: int(m.removeprefix("epoch")))


def games_path(model: str, sampled: bool = False) -> Path:
    """Where a model's evaluation games sit under ``results/``: M(e)'s in its epoch's
    folder, the baselines' (base, M0) beside each other; sampled games in ``sampled/``."""
    if model in ("base", "imitation"):
        return Path("eval", "sampled" if sampled else "games", f"{model}.parquet")
    return Path(model, "eval", *(("sampled",) if sampled else ()), "games.parquet")


def game_rows(
    model: str, spag: Path, control: Path, game: Game, sampled: bool = False
) -> list[dict[str, Any]]:
    """Paired evaluation-game rates of one model (its greedy games, or its ``sampled``
    ones with metrics named ``sampled_<metric>_rate``)."""
    from spag.evaluation.games import judged_games
    from spag.evaluation.paired import METRICS, paired_rows

    path = games_path(model, sampled)
    prefix = "sampled_" if sampled else ""
    mine, _ = judged_games(spag / path, game)
    theirs, _ = judged_games(control / path, game)
    paired = paired_rows(mine, theirs, names=(f"spag {model}", f"control {model}"), game=game)
    rows = []
    for group, diffs in paired.items():
        for metric, counts in METRICS.items():
            rate = [
                sum(counts(game, g["outcome"], g["role"]) for g in sel) / len(sel) if sel else NAN
                for sel in (
                    [g for g in arm if group in ("all", g["role"])] for arm in (mine, theirs)
                )
            ]
            rows.append(
                _row(
                    model,
                    f"{prefix}{metric}_rate",
                    group,
                    pairs=diffs["pairs"],
                    spag=rate[0],
                    control=rate[1],
                    diff=diffs[f"{metric}_diff"],
                    lo=diffs[f"{metric}_diff_lo"],
                    hi=diffs[f"{metric}_diff_hi"],
                    p=diffs[f"{metric}_diff_p"],
                )
            )
    return rows


def hint_rows(
    model: str, spag: Path, control: Path, what: str, column: str, pair_by: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Paired reciprocal ranks of graded hints (``what``: ``hints`` by the evaluated
    model's role, ``inference`` by dialogue source) after the first, last, best message
    and over the messages (mean)."""
    import pyarrow.compute as pc

    from spag.data.tables import read_parquet
    from spag.evaluation.hints import WHENS, paired_difference, ranks_in

    path = Path("eval", what, f"{model}.parquet")
    tables = [read_parquet(arm / path, f"{what} ranks") for arm in (spag, control)]
    groups = sorted({g for t in tables for g in t.column(column).to_pylist() if g}) + ["all"]
    rows = []
    for rank, group, when in product(ranks_in(*tables), groups, WHENS):
        mine, theirs = (
            t if group == "all" else t.filter(pc.equal(t[column], group)) for t in tables
        )
        # Each arm's mean over the paired games only: spag - control is then the diff.
        d = paired_difference(mine, theirs, pair_by, when=when, rank=rank)
        # The raw rank keeps the metric's first name (runs scored before calibration).
        kind = "" if rank == "raw" else f"{rank}_"
        rows.append(
            _row(
                model,
                f"{what}_{kind}mrr_{when}",
                group,
                pairs=d["pairs"],
                spag=d["mean"],
                control=d["reference_mean"],
                diff=d[f"mrr_{when}_diff"],
                lo=d["lo"],
                hi=d["hi"],
            )
        )
    return rows


def poker_rows(model: str, spag: Path, control: Path) -> list[dict[str, Any]]:
    """Exact strategy metrics of one model from each arm's ``summary/poker.tsv``."""
    import pandas as pd

    values = []
    for arm in (spag, control):
        path = arm / "summary" / "poker.tsv"
        table = pd.read_csv(path, sep="\t")
        row = table[table["model"] == model]
        if row.empty:
            raise SpagInputError(f"{path}: no row for model {model!r}")
        values.append(row.iloc[0])
    return [
        _row(
            model,
            metric,
            "all",
            spag=float(values[0][metric]),
            control=float(values[1][metric]),
            diff=float(values[0][metric]) - float(values[1][metric]),
        )
        for metric in POKER_METRICS
    ]


def reasoning_rows(model: str, spag: Path, control: Path) -> list[dict[str, Any]]:
    """Each reasoning task's headline score in both arms, paired item by item (no
    interval where a record kept no items)."""
    from spag.evaluation.reasoning import paired_scores, read_record, task_scores

    path = Path("eval", "reasoning", f"{model}.json")
    records = [read_record(arm / path) for arm in (spag, control)]
    mine, theirs = (task_scores(r) for r in records)
    rows = []
    for task in mine:
        if task not in theirs:
            continue
        d = paired_scores(*records, task)
        if d["pairs"]:  # each arm's mean over the items both answered, and its interval
            values = {"spag": d["mean"], "control": d["reference_mean"], "diff": d["diff"],
                      "lo": d["lo"], "hi": d["hi"], "p": d["p"], "pairs": d["pairs"]}  # fmt: skip
        else:  # records without items: the headline scores, no interval
            values = {
                "spag": mine[task],
                "control": theirs[task],
                "diff": mine[task] - theirs[task],
            }
        rows.append(_row(model, f"reasoning_{task}", "all", **values))
    return rows


def compare_arms(
    spag: str | os.PathLike,
    control: str | os.PathLike,
    game: Game,
    models: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Rows (:data:`ARM_COLUMNS`) comparing the SPAG run folder ``spag`` with its control
    run folder ``control`` (each holding ``results/``), for ``models`` (default: every
    evaluated ``epoch<N>`` of both)."""
    arms = [Path(spag) / "results", Path(control) / "results"]
    for arm, name in zip(arms, ("--spag", "--control"), strict=True):
        if not arm.is_dir():
            raise SpagInputError(f"{name}: {arm.parent} has no results/ folder (a run folder)")
    if models is None:
        found = [arm_models(arm) for arm in arms]
        models = [m for m in found[0] if m in found[1]]
        if not models:
            raise SpagInputError(
                f"no evaluated model in both {arms[0]} and {arms[1]} "
                "(results/epoch<N>/eval/games.parquet)"
            )
    rows: list[dict[str, Any]] = []
    for model in models:
        rows += game_rows(model, *arms, game)
        if all((arm / games_path(model, sampled=True)).is_file() for arm in arms):
            rows += game_rows(model, *arms, game, sampled=True)
        for what, column, pair_by in (
            ("hints", "policy_role", ("word", "role")),
            ("inference", "source", ("source", "episode")),
        ):
            if all((arm / "eval" / what / f"{model}.parquet").is_file() for arm in arms):
                rows += hint_rows(model, *arms, what, column, pair_by)
        if all((arm / "summary" / "poker.tsv").is_file() for arm in arms):
            rows += poker_rows(model, *arms)
        if all((arm / "eval" / "reasoning" / f"{model}.json").is_file() for arm in arms):
            rows += reasoning_rows(model, *arms)
    return rows
