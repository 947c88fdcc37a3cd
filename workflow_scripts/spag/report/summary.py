"""Per-epoch summary rows and the run-wide tables built from them.

One epoch's row (``results/epoch{e}/summary.tsv``) gathers what the epoch's
steps wrote: the self-play outcome mix, the training samples and their role
weights and rewards, the training log, the evaluation games against the fixed
opponent (rates with their 95% Wilson intervals), the reasoning scores and the
generation speed. Optional inputs and columns that a step did not write leave
their cells empty (NaN), so that a summary never fails because of a metadata
column.

:func:`collect_epochs` stacks the rows of all epochs (``results/summary/epochs.tsv``);
:func:`collect_reasoning` turns the reasoning JSON files of every model into a
long table (``results/summary/reasoning.tsv``); :func:`collect_eval_games` stacks
the evaluation-game tables of the base model, M0 and every M(e)
(``results/summary/eval_games.tsv``), so that each epoch can be read against
the models it started from.

This module owns the summary tables' columns and the generation speed (tokens/s
of self-play, :func:`generation_summary`): the plots read it from the summary.
Inputs are read with :mod:`spag.report.inputs`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spag.data.tables import atomic_path, read_parquet
from spag.errors import SpagInputError
from spag.evaluation.games import COLUMNS as EVAL_COLUMNS
from spag.evaluation.games import COUNT_COLUMNS as EVAL_COUNTS
from spag.evaluation.games import RATES as EVAL_RATES
from spag.evaluation.games import rates as eval_rates
from spag.game.base import Game
from spag.models.names import model_order
from spag.report.inputs import benchmark_seconds, check_columns, read_samples, read_tsv

NAN = float("nan")
BOUNDS = ("", "_lo", "_hi")  # a rate, then its 95% Wilson interval


def summary_columns(game: Game) -> list[str]:
    """Fixed leading columns of a summary row, named by the game's outcomes and roles;
    reasoning_<task> columns follow."""
    outcomes, roles = game.outcomes, game.roles
    return [
        "epoch",
        "selfplay_games",
        *outcomes,
        *(f"{o}_frac" for o in outcomes),
        "decisive_games",
        "decisive_frac",
        "samples",
        "game_samples",
        "sft_samples",
        *(f"{r}_samples" for r in roles),
        *(f"{r}_weight" for r in roles),
        "roles_untrained",
        "reward_mean",
        "reward_std",
        "reward_min",
        "reward_median",
        "reward_max",
        "train_steps",
        "loss_first",
        "loss_final",
        "loss_mean",
        "kl_final",
        "kl_mean",
        "ratio_mean",
        "clipped_frac_mean",
        "train_tokens_per_s",
        "eval_opponent",
        "eval_games",
        *(f"eval_{k}_rate_{r}{b}" for r in roles for k in EVAL_RATES for b in BOUNDS),
        *(f"eval_{k}_rate{b}" for k in EVAL_RATES for b in BOUNDS),
        "gen_games",
        "gen_tokens",
        "gen_tokens_per_game",
        "gen_empty_replies",
        "gen_truncated_replies",
        "gen_seconds",
        "gen_tokens_per_s",
        "reasoning_gmean",
    ]


PAIRED_REASONING = ("pairs", "diff", "lo", "hi", "p")
REASONING_COLUMNS = [
    "model",
    "epoch",
    "task",
    "metric",
    "score",
    "stderr",
    "acc",
    "acc_stderr",
    "acc_norm",
    "acc_norm_stderr",
    "num_samples",
    # The model minus M0 item by item (spag.evaluation.reasoning.paired_scores).
    *(f"paired_{k}" for k in PAIRED_REASONING),
]
GMEAN_TASK = "geometric_mean"
# Columns of shard metadata that may hold a shard's generation time in seconds.
SHARD_TIME_COLUMNS = ("generation_seconds", "elapsed_s", "seconds")


def _num(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return NAN
    return x


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else NAN


def outcome_summary(path: str | os.PathLike, game: Game) -> dict[str, Any]:
    """Self-play outcome counts, shares and decisive games from ``outcomes.tsv``.

    Accepts the wide form (one column per outcome, one row) and the long form
    (columns ``outcome`` and ``count``).
    """
    df = read_tsv(path, "outcome counts")
    counts: dict[str, float] = {}
    if "outcome" in df.columns:
        count_col = next((c for c in ("count", "games", "n") if c in df.columns), None)
        if count_col is None:
            raise SpagInputError(f"{path}: long outcome table without a 'count' column")
        for o in game.outcomes:
            counts[o] = float(df.loc[df["outcome"] == o, count_col].sum())
    else:
        check_columns(df, game.outcomes, path)
        if len(df) == 0:
            raise SpagInputError(f"{path}: no row of outcome counts")
        for o in game.outcomes:
            counts[o] = float(df[o].sum())
    total = sum(counts.values())
    row: dict[str, Any] = {"selfplay_games": int(total)}
    for o in game.outcomes:
        row[o] = int(counts[o])
        row[f"{o}_frac"] = counts[o] / total if total else NAN
    decisive = sum(counts[o] for o in game.outcomes if game.winner(o) is not None)
    row["decisive_games"] = int(decisive)
    row["decisive_frac"] = decisive / total if total else NAN
    return row


def sample_summary(path: str | os.PathLike, game: Game) -> dict[str, Any]:
    """Sample counts per type and role, role weights and the game rewards' distribution."""
    import numpy as np

    df = read_samples(path)
    played = df[df["type"] == "game"]
    row: dict[str, Any] = {
        "samples": len(df),
        "game_samples": len(played),
        "sft_samples": int((df["type"] == "sft").sum()),
    }
    for role in game.roles:
        sel = played[played["role"] == role]
        row[f"{role}_samples"] = len(sel)
        # Every sample of a role carries the same weight (N / 2 N_role).
        row[f"{role}_weight"] = float(sel["weight"].iloc[0]) if len(sel) else 0.0
    # A role without game samples of weight above 0 learns nothing from self-play this
    # epoch (e.g. no defender wins under the paper's winners-only rewards, or the control
    # arm): said, not left to find.
    row["roles_untrained"] = (
        " ".join(r for r in game.roles if not row[f"{r}_samples"] or not row[f"{r}_weight"]) or "-"
    )
    rewards = played["reward"].to_numpy(dtype=float)
    if rewards.size:
        row.update(
            reward_mean=float(rewards.mean()),
            reward_std=float(rewards.std()),
            reward_min=float(rewards.min()),
            reward_median=float(np.median(rewards)),
            reward_max=float(rewards.max()),
        )
    else:
        row.update(
            dict.fromkeys(
                ("reward_mean", "reward_std", "reward_min", "reward_median", "reward_max"), NAN
            )
        )
    return row


def loss_summary(path: str | os.PathLike) -> dict[str, Any]:
    """Training log (``loss.tsv``): steps, first/final/mean loss and KL, ratio statistics."""
    df = read_tsv(path, "training log")
    check_columns(df, ["loss"], path)
    df = df[df["loss"].notna()]

    def col(name: str):
        return df[name].astype(float).tolist() if name in df.columns else []

    loss, kl = col("loss"), col("kl")
    return {
        "train_steps": int(df["step"].max()) if "step" in df.columns and len(df) else len(df),
        "loss_first": loss[0] if loss else NAN,
        "loss_final": loss[-1] if loss else NAN,
        "loss_mean": _mean(loss),
        "kl_final": kl[-1] if kl else NAN,
        "kl_mean": _mean(kl),
        "ratio_mean": _mean(col("ratio_mean")),
        "clipped_frac_mean": _mean(col("clipped_frac")),
        "train_tokens_per_s": _mean(col("tokens_per_s")),
    }


def _role_rates(r: Mapping[str, Any] | None) -> dict[str, float]:
    """Rates and Wilson intervals of one row of an evaluation games table.

    Computed from the counts when the row has them (a table written before the
    intervals existed gets them too), else read from the rate columns.
    """
    if r is None:
        return {}
    counts = {c: _num(r.get(c)) for c in EVAL_COUNTS}
    if not any(math.isnan(v) for v in counts.values()):
        return eval_rates(counts)
    return {f"{k}_rate{b}": _num(r.get(f"{k}_rate{b}")) for k in EVAL_RATES for b in BOUNDS}


def eval_summary(path: str | os.PathLike, game: Game) -> dict[str, Any]:
    """Win / loss / tie / rule-break rates (with intervals) per role from ``eval/games.tsv``."""
    df = read_tsv(path, "evaluation games table")
    check_columns(df, ["role"], path)
    row: dict[str, Any] = {}
    row["eval_opponent"] = (
        str(df["opponent"].iloc[0]) if "opponent" in df.columns and len(df) else ""
    )
    by_role = {str(r["role"]): r for _, r in df.iterrows()}
    for role, suffix in (*((r, f"_{r}") for r in game.roles), ("all", "")):
        values = _role_rates(by_role.get(role))
        for kind in EVAL_RATES:
            for b in BOUNDS:
                row[f"eval_{kind}_rate{suffix}{b}"] = values.get(f"{kind}_rate{b}", NAN)
    if "all" in by_role:
        row["eval_games"] = int(_num(by_role["all"].get("games", 0)) or 0)
    else:
        row["eval_games"] = int(
            sum(_num(by_role[r].get("games", 0)) for r in game.roles if r in by_role)
        )
    return row


def reasoning_row(path: str | os.PathLike) -> dict[str, Any]:
    """``reasoning_<task>`` headline scores and ``reasoning_gmean`` of one reasoning JSON."""
    from spag.evaluation.reasoning import geometric_mean, read_record, task_scores

    scores = task_scores(read_record(path))
    row: dict[str, Any] = {f"reasoning_{t}": s for t, s in scores.items()}
    gm = geometric_mean(list(scores.values()))
    row["reasoning_gmean"] = NAN if gm is None else gm
    return row


def total_benchmark_seconds(paths: Iterable[str | os.PathLike]) -> float:
    """Total wall time of Snakemake benchmark files; NaN if none records one."""
    seconds = [s for s in map(benchmark_seconds, paths) if not math.isnan(s)]
    return sum(seconds) if seconds else NAN


def generation_summary(
    shards: Sequence[str | os.PathLike], benchmarks: Sequence[str | os.PathLike] = ()
) -> dict[str, Any]:
    """Generated tokens of the self-play shards, and tokens/s when their time is known.

    The one place where tokens/s is computed (the plots read ``gen_tokens_per_s``).
    The time comes from a per-episode or per-shard time column of the shards if
    they have one, else from the shards' Snakemake benchmark files (whole job
    time, model loading included, so a lower bound on generation speed).
    """
    import pyarrow.compute as pc

    games = tokens = empty = truncated = 0
    have_tokens = False
    seconds = 0.0
    have_seconds = True
    for path in shards:
        table = read_parquet(path, "self-play shard")
        games += table.num_rows
        if "num_generated_tokens" in table.column_names:
            tokens += int(pc.sum(table.column("num_generated_tokens")).as_py() or 0)
            have_tokens = True
        if "empty_replies" in table.column_names:
            empty += int(pc.sum(table.column("empty_replies")).as_py() or 0)
        if "truncated_replies" in table.column_names:
            truncated += int(pc.sum(table.column("truncated_replies")).as_py() or 0)
        time_col = next((c for c in SHARD_TIME_COLUMNS if c in table.column_names), None)
        if time_col is None or table.num_rows == 0:
            have_seconds = False
        else:
            # A shard-level time is repeated on every row: count it once.
            values = table.column(time_col).to_pylist()
            distinct = {v for v in values if v is not None}
            seconds += float(next(iter(distinct))) if len(distinct) == 1 else float(sum(distinct))
    if not have_seconds:
        seconds = total_benchmark_seconds(benchmarks)
    row: dict[str, Any] = {
        "gen_games": games,
        "gen_tokens": tokens if have_tokens else NAN,
        "gen_tokens_per_game": tokens / games if have_tokens and games else NAN,
        "gen_empty_replies": empty,
        "gen_truncated_replies": truncated,
        "gen_seconds": seconds,
    }
    ok = have_tokens and not math.isnan(seconds) and seconds > 0
    row["gen_tokens_per_s"] = tokens / seconds if ok else NAN
    return row


def epoch_summary(
    epoch: int,
    *,
    outcomes: str | os.PathLike,
    samples: str | os.PathLike,
    loss: str | os.PathLike,
    eval_games: str | os.PathLike,
    reasoning: str | os.PathLike | None,
    selfplay: Sequence[str | os.PathLike],
    selfplay_benchmarks: Sequence[str | os.PathLike] = (),
    game: Game,
) -> dict[str, Any]:
    """The summary row of one epoch (columns :func:`summary_columns` + ``reasoning_<task>``;
    ``reasoning`` None: a run without reasoning tasks, ``reasoning_gmean`` empty)."""
    row: dict[str, Any] = {"epoch": int(epoch)}
    row.update(outcome_summary(outcomes, game))
    row.update(sample_summary(samples, game))
    row.update(loss_summary(loss))
    row.update(eval_summary(eval_games, game))
    row.update(generation_summary(selfplay, selfplay_benchmarks))
    row.update(reasoning_row(reasoning) if reasoning else {"reasoning_gmean": NAN})
    return row


def ordered_columns(columns: Iterable[str], game: Game) -> list[str]:
    """:func:`summary_columns` first (those present), then the others in their order."""
    cols = list(columns)
    head = [c for c in summary_columns(game) if c in cols]
    return head + [c for c in cols if c not in head]


def write_tsv(df, path: str | os.PathLike) -> None:
    """Write a DataFrame as TSV atomically (NaN as an empty cell)."""
    with atomic_path(path, suffix=".tsv.tmp") as tmp:
        df.to_csv(tmp, sep="\t", index=False, na_rep="", float_format="%.6g")


def write_summary(row: Mapping[str, Any], path: str | os.PathLike, game: Game) -> None:
    """Write one epoch's summary row."""
    import pandas as pd

    df = pd.DataFrame([dict(row)])
    write_tsv(df[ordered_columns(df.columns, game)], path)


def collect_epochs(paths: Sequence[str | os.PathLike], game: Game):
    """Stack per-epoch summary files into one table sorted by epoch."""
    import pandas as pd

    frames = []
    for p in paths:
        df = read_tsv(p, "epoch summary")
        check_columns(df, ["epoch"], p)
        frames.append(df)
    if not frames:
        raise SpagInputError("no epoch summary given")
    df = pd.concat(frames, ignore_index=True, sort=False)
    df = df.sort_values("epoch", kind="stable").reset_index(drop=True)
    return df[ordered_columns(df.columns, game)]


def collect_reasoning(paths: Sequence[str | os.PathLike], reference: str = "imitation"):
    """Long table of reasoning scores: one row per model and task, plus its geometric
    mean; each model's task rows also hold its difference from ``reference`` (M0) item
    by item, with a bootstrap interval and McNemar's p (``paired_*``). No ``paths``: the
    table's header only (a run without reasoning tasks)."""
    import pandas as pd

    from spag.evaluation.reasoning import geometric_mean, paired_scores, read_record, task_scores

    records = {}
    for p in paths:
        record = read_record(p)
        name = str(record.get("model_name") or Path(p).stem)
        if name in records:
            raise SpagInputError(f"{p}: a second reasoning result of model {name!r}")
        records[name] = record
    rows = []
    for name, record in records.items():
        order = model_order(name)
        scores = task_scores(record)
        for task, score in scores.items():
            m = record["tasks"].get(task, {})
            metric = m.get("metric")
            paired = (
                paired_scores(record, records[reference], task)
                if reference in records and name != reference
                else {}
            )
            rows.append(
                {
                    "model": name,
                    "epoch": order,
                    "task": task,
                    "metric": metric,
                    "score": score,
                    "stderr": _num(m.get(f"{metric}_stderr")) if metric else NAN,
                    "acc": _num(m.get("acc")),
                    "acc_stderr": _num(m.get("acc_stderr")),
                    "acc_norm": _num(m.get("acc_norm")),
                    "acc_norm_stderr": _num(m.get("acc_norm_stderr")),
                    "num_samples": _num(m.get("num_samples")),
                    **{f"paired_{k}": paired.get(k, NAN) for k in PAIRED_REASONING},
                }
            )
        gm = geometric_mean(list(scores.values()))
        rows.append(
            {
                "model": name,
                "epoch": order,
                "task": GMEAN_TASK,
                "metric": "geometric_mean",
                "score": NAN if gm is None else gm,
            }
        )
    df = pd.DataFrame(rows, columns=REASONING_COLUMNS)
    # Per model: its tasks in the order asked, the geometric mean last.
    last = df["task"] == GMEAN_TASK
    df = df.assign(_last=last).sort_values(["epoch", "_last"], kind="stable")
    return df.drop(columns="_last").reset_index(drop=True)


def collect_eval_games(paths: Sequence[str | os.PathLike], game: Game):
    """Stack evaluation games tables (``spag eval-games``) of several models, in run order.

    One row per model and role (columns of :data:`spag.evaluation.games.COLUMNS`);
    ``epoch`` is the model's place in the run (-1 base, 0 M0, e for M(e)), as in
    the reasoning table. Rates and intervals are recomputed from the counts.
    """
    import pandas as pd

    role_order = {r: i for i, r in enumerate((*game.roles, "all"))}
    rows = []
    for p in paths:
        df = read_tsv(p, "evaluation games table")
        check_columns(df, ("model", "role", *EVAL_COUNTS), p)
        for _, r in df.iterrows():
            name = str(r["model"])
            counts = {c: _num(r[c]) for c in EVAL_COUNTS}
            if any(math.isnan(v) for v in counts.values()):
                raise SpagInputError(f"{p}: row of {name} / {r['role']} lacks a count")
            counts = {c: int(v) for c, v in counts.items()}
            opponent = r.get("opponent")
            rows.append(
                {
                    "epoch": model_order(name),
                    "model": name,
                    "opponent": "" if pd.isna(opponent) else str(opponent),
                    "role": str(r["role"]),
                    **counts,
                    **eval_rates(counts),
                }
            )
    if not rows:
        raise SpagInputError("no evaluation games table given")
    df = pd.DataFrame(rows, columns=list(EVAL_COLUMNS))
    df = df.assign(_role=df["role"].map(role_order)).sort_values(["epoch", "_role"], kind="stable")
    return df.drop(columns="_role").reset_index(drop=True)


def add_paired(
    games, episodes: Sequence[str | os.PathLike], reference: str = "imitation", *, game: Game
):
    """The evaluation games table with each model's paired difference from
    ``reference`` per role (:data:`spag.evaluation.paired.PAIRED_COLUMNS`; empty on the
    reference's own rows), from the models' evaluation games (``episodes``)."""
    import pandas as pd

    from spag.evaluation.paired import PAIRED_COLUMNS, paired_table

    paired = pd.DataFrame(
        paired_table(episodes, reference, game=game), columns=["model", "role", *PAIRED_COLUMNS]
    )
    missing = set(games["model"]) - set(paired["model"]) - {reference}
    if missing:
        raise SpagInputError(
            f"no evaluation games given for {', '.join(sorted(missing))}: --eval-episodes "
            "takes the games of every model of --eval-games"
        )
    return games.merge(paired, on=["model", "role"], how="left")
