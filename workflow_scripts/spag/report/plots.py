"""Drawing the report's plots (matplotlib, Agg backend, no torch).

This module owns what each plot shows. Which files there are is
:mod:`spag.report.names` (:data:`RUN_PLOTS`, :data:`EPOCH_PLOTS`); inputs are read
with :mod:`spag.report.inputs`. Run-wide plots (:func:`run_plots`, from the
summary tables) show each quantity by epoch, or by model (base, M0, M1, ...)
where the base model and M0 were evaluated too; epoch plots
(:func:`epoch_plots`) show one epoch's distributions. Every plot file is always
written: a plot whose data is missing says so in the picture instead of
failing, so that a report never lacks a file.

Inputs that stand for one epoch, stage or step come as mappings from a label to
a path (``spag plot-run --samples 1=... --loss imitation=...``): nothing is
guessed from a path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from spag.data.tables import atomic_path, read_parquet  # noqa: E402
from spag.game.base import Game  # noqa: E402
from spag.report.inputs import (  # noqa: E402
    benchmark_seconds,
    check_columns,
    read_samples,
    read_tsv,
)
from spag.report.names import EPOCH_PLOTS, RUN_PLOTS  # noqa: E402

__all__ = ["epoch_plots", "run_plots"]
# Colours of a game's outcomes and roles, in their order (Taboo: attacker red,
# defender blue, rule breaks orange, ties grey); both roles together green.
PALETTE = ("#d62728", "#1f77b4", "#ff7f0e", "#7f7f7f", "#9467bd", "#8c564b")
ALL_COLOR = "#2ca02c"


def outcome_colors(game: Game) -> dict[str, str]:
    return {o: PALETTE[i % len(PALETTE)] for i, o in enumerate(game.outcomes)}


def role_colors(game: Game) -> dict[str, str]:
    return {**{r: PALETTE[i] for i, r in enumerate(game.roles)}, "all": ALL_COLOR}


def role_labels(game: Game) -> dict[str, str]:
    return {**{r: f"as {r}" for r in game.roles}, "all": "both roles"}


def role_offsets(game: Game) -> dict[str, float]:
    return {game.roles[0]: -0.08, game.roles[1]: 0.08, "all": 0.0}


WIN_RATE_COLUMNS = ["epoch", "model", "role", "win_rate", "win_rate_lo", "win_rate_hi"]
FIGSIZE = (7.0, 4.2)
DPI = 110


# ------------------------------------------------------------------ helpers
def save(fig: Any, path: str | os.PathLike) -> None:
    """Save a figure as PNG atomically and close it."""
    with atomic_path(path, suffix=".png.tmp") as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def no_data(ax: Any, message: str) -> None:
    """Mark an axis as empty, with the reason, instead of leaving it blank."""
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=11,
        color="#555555",
        wrap=True,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def model_label(order: int) -> str:
    """Axis label of a model: base, M0 (imitation), M1, ..."""
    return "base" if order < 0 else f"M{order}"


def _numeric(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series([math.nan] * len(df), index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce")


def _has(series: pd.Series) -> bool:
    return bool(series.notna().any())


def _epoch_axis(ax: Any, epochs: Sequence[int]) -> None:
    epochs = [int(e) for e in epochs]
    ax.set_xlabel("epoch")
    ax.set_xticks(epochs, labels=[str(e) for e in epochs])


def _step_axis(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# ------------------------------------------------------------------ run-wide plots
def plot_reasoning(reasoning: pd.DataFrame, path: str | os.PathLike) -> None:
    """Score of every task and their geometric mean (bold) by model: base, M0, M1, ..."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    if reasoning.empty or not _has(_numeric(reasoning, "score")):
        no_data(ax, "no reasoning scores")
    else:
        for task, df in reasoning.groupby("task", sort=False):
            df = df.sort_values("epoch")
            x, y = df["epoch"].astype(int), _numeric(df, "score")
            gmean = task == "geometric_mean"
            err = _numeric(df, "stderr")
            ax.errorbar(
                x,
                y,
                yerr=None if gmean or not _has(err) else err.fillna(0),
                marker="o",
                lw=2.6 if gmean else 1.2,
                capsize=3,
                color="black" if gmean else None,
                label=str(task),
                zorder=3 if gmean else 2,
            )
        orders = sorted(reasoning["epoch"].astype(int).unique())
        ax.set_xticks(orders)
        ax.set_xticklabels([model_label(o) for o in orders])
        ax.set_xlabel("model")
        ax.set_ylabel("score (accuracy)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    ax.set_title("Reasoning benchmarks by model")
    save(fig, path)


def win_rate_table(
    summary: pd.DataFrame, eval_games: pd.DataFrame | None = None, *, game: Game
) -> pd.DataFrame:
    """Win rate and its 95% interval per model and role (columns :data:`WIN_RATE_COLUMNS`).

    From the run's evaluation games table (base model, M0 and every M(e); ``epoch``
    -1, 0, e) when there is one, else from the epoch summary's ``eval_win_rate*``
    columns (M(e) only).
    """
    if eval_games is not None and not eval_games.empty:
        df = eval_games.assign(
            **{c: _numeric(eval_games, c) for c in ("epoch", *WIN_RATE_COLUMNS[3:])}
        )
        return df[WIN_RATE_COLUMNS].dropna(subset=["epoch"]).reset_index(drop=True)
    frames = []
    epochs = (
        summary["epoch"].astype(int) if "epoch" in summary.columns else pd.Series([], dtype=int)
    )
    for role in role_labels(game):
        suffix = "" if role == "all" else f"_{role}"
        frames.append(
            pd.DataFrame(
                {
                    "epoch": epochs,
                    "model": [f"epoch{e}" for e in epochs],
                    "role": role,
                    **{
                        f"win_rate{b}": _numeric(summary, f"eval_win_rate{suffix}{b}")
                        for b in ("", "_lo", "_hi")
                    },
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[WIN_RATE_COLUMNS]


def plot_win_rates(
    summary: pd.DataFrame,
    path: str | os.PathLike,
    eval_games: pd.DataFrame | None = None,
    *,
    game: Game,
) -> None:
    """Win rate against the fixed opponent by model, per role, with 95% Wilson intervals.

    Points: base model, M0, M1, ... as attacker, as defender and over both roles
    (error bars: the intervals). Dashed lines: M0's rates, the reference that a
    SPAG epoch has to beat (M0 against itself with the default opponent).
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    table = win_rate_table(summary, eval_games, game=game)
    if table.empty or not _has(table["win_rate"]):
        no_data(ax, "no evaluation games")
    else:
        # Roles side by side, so that their error bars do not hide each other.
        offsets = role_offsets(game)
        handles = []
        for role, label in role_labels(game).items():
            df = table[table["role"] == role].sort_values("epoch")
            y = df["win_rate"]
            if not _has(y):
                continue
            below = (y - df["win_rate_lo"]).clip(lower=0).fillna(0)
            above = (df["win_rate_hi"] - y).clip(lower=0).fillna(0)
            handles.append(
                ax.errorbar(
                    df["epoch"] + offsets[role],
                    y,
                    yerr=[below, above],
                    marker="o",
                    capsize=3,
                    color=role_colors(game)[role],
                    lw=2.4 if role == "all" else 1.4,
                    label=label,
                )
            )
            reference = y[df["epoch"] == 0].dropna()
            if len(reference):
                ax.axhline(
                    float(reference.iloc[0]),
                    ls="--",
                    lw=1,
                    color=role_colors(game)[role],
                    alpha=0.7,
                )
        if (table["epoch"] == 0).any():
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], ls="--", lw=1, color="#555555", label="M0 (reference)"))
        orders = sorted(int(o) for o in table["epoch"].unique())
        ax.set_xticks(orders, labels=[model_label(o) for o in orders])
        ax.set_xlim(orders[0] - 0.5, orders[-1] + 0.5)
        ax.set_xlabel("model")
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("win rate (95% Wilson interval)")
        ax.grid(alpha=0.3)
        ax.legend(handles=handles, fontsize=8)
        if eval_games is not None and "opponent" in eval_games.columns:
            names = eval_games["opponent"]
        else:
            names = summary.get("eval_opponent", pd.Series([], dtype=object))
        opponent = names.dropna().astype(str).unique()
        if len(opponent):
            ax.set_title(f"Games against {', '.join(opponent)}")
    if not ax.get_title():
        ax.set_title("Games against the fixed opponent")
    save(fig, path)


def plot_paired(eval_games: pd.DataFrame | None, path: str | os.PathLike, game: Game) -> None:
    """Each model's rates minus the reference's (M0) on the same words and roles, per
    metric (panel) and role, with the paired 95% bootstrap intervals; zero: no change."""
    from spag.evaluation.paired import METRICS

    fig, axes = plt.subplots(1, len(METRICS), figsize=(FIGSIZE[0] * 1.5, FIGSIZE[1]), sharey=True)
    table = eval_games if eval_games is not None else pd.DataFrame()
    has = not table.empty and "win_diff" in table.columns and _has(_numeric(table, "win_diff"))
    titles = {"win": "win rate", "broke_rules": "rule breaks", "decisive": "decisive games"}
    offsets = role_offsets(game)
    for ax, metric in zip(axes, METRICS, strict=True):
        ax.set_title(f"{titles[metric]}: model - M0")
        if not has:
            no_data(ax, "no paired evaluation games")
            continue
        orders = set()
        for role, label in role_labels(game).items():
            df = table[table["role"] == role].assign(epoch=lambda d: _numeric(d, "epoch"))
            df = df[_numeric(df, f"{metric}_diff").notna()].sort_values("epoch")
            if df.empty:
                continue
            y = _numeric(df, f"{metric}_diff")
            below = (y - _numeric(df, f"{metric}_diff_lo")).clip(lower=0).fillna(0)
            above = (_numeric(df, f"{metric}_diff_hi") - y).clip(lower=0).fillna(0)
            ax.errorbar(df["epoch"] + offsets[role], y, yerr=[below, above], marker="o",
                        capsize=3, ls="none", color=role_colors(game)[role], label=label)  # fmt: skip
            orders.update(int(o) for o in df["epoch"])
        ax.axhline(0.0, color="#555555", lw=1)
        ax.set_xticks(sorted(orders), labels=[model_label(o) for o in sorted(orders)])
        ax.set_ylim(-1.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("difference (paired 95% bootstrap interval)")
    if has:
        axes[0].legend(fontsize=8, loc="best")
    save(fig, path)


def plot_outcomes(summary: pd.DataFrame, path: str | os.PathLike, game: Game) -> None:
    """Share of each self-play outcome by epoch (stacked bars, game counts on top)."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    fracs = {o: _numeric(summary, f"{o}_frac") for o in game.outcomes}
    if summary.empty or not any(_has(s) for s in fracs.values()):
        no_data(ax, "no self-play outcomes")
    else:
        epochs = summary["epoch"].astype(int)
        bottom = pd.Series(0.0, index=summary.index)
        for o in game.outcomes:
            vals = fracs[o].fillna(0.0)
            ax.bar(epochs, vals, bottom=bottom, color=outcome_colors(game)[o], label=o, width=0.6)
            bottom = bottom + vals
        games = _numeric(summary, "selfplay_games")
        for e, n in zip(epochs, games, strict=True):
            if not math.isnan(n):
                ax.text(e, 1.01, f"{int(n)} games", ha="center", va="bottom", fontsize=8)
        _epoch_axis(ax, epochs)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("share of self-play games")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Self-play outcomes")
    save(fig, path)


def plot_decisive(summary: pd.DataFrame, path: str | os.PathLike, game: Game) -> None:
    """Decisive games per epoch (bars, by winner) and the role weights (lines, right axis)."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    # Games won by each role: the sum of the outcome columns the role wins.
    wins = {
        r: sum(_numeric(summary, o).fillna(0) for o in game.outcomes if game.winner(o) == r)
        for r in game.roles
    }
    present = any(_has(_numeric(summary, o)) for o in game.outcomes if game.winner(o))
    if summary.empty or not present:
        no_data(ax, "no self-play outcomes")
    else:
        epochs = summary["epoch"].astype(int)
        for shift, role in zip((-0.15, 0.15), game.roles, strict=True):
            ax.bar(
                epochs + shift,
                wins[role],
                width=0.3,
                color=role_colors(game)[role],
                label=f"{role} wins",
            )
        _epoch_axis(ax, epochs)
        ax.set_ylabel("decisive games")
        right = ax.twinx()
        for role in game.roles:
            w = _numeric(summary, f"{role}_weight")
            if _has(w):
                right.plot(
                    epochs,
                    w,
                    marker="s",
                    ls="--",
                    color=role_colors(game)[role],
                    label=f"{role} weight",
                )
        right.set_ylabel("role weight N / (2 N_role)")
        handles = ax.get_legend_handles_labels()
        rhandles = right.get_legend_handles_labels()
        ax.legend(handles[0] + rhandles[0], handles[1] + rhandles[1], fontsize=8, loc="best")
    ax.set_title("Decisive self-play games and role weights")
    save(fig, path)


def plot_rewards(samples: Mapping[int, pd.DataFrame], path: str | os.PathLike, game: Game) -> None:
    """Reward distribution of game samples per epoch, attacker and defender side by side."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    data, positions, colors = [], [], []
    epochs = sorted(samples)
    for e in epochs:
        df = samples[e]
        played = df[df["type"] == "game"]
        for k, role in enumerate(game.roles):
            vals = pd.to_numeric(
                played.loc[played["role"] == role, "reward"], errors="coerce"
            ).dropna()
            if len(vals):
                data.append(vals.to_numpy())
                positions.append(e + (k - 0.5) * 0.35)
                colors.append(role_colors(game)[role])
    if not data:
        no_data(ax, "no game samples (no decisive self-play game)")
    else:
        box = ax.boxplot(data, positions=positions, widths=0.3, patch_artist=True, showfliers=True)
        for patch, c in zip(box["boxes"], colors, strict=True):
            patch.set_facecolor(c)
            patch.set_alpha(0.6)
        _epoch_axis(ax, epochs)
        ax.set_xlim(min(epochs) - 0.6, max(epochs) + 0.6)
        ax.set_ylabel("reward per message")
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=role_colors(game)[r], alpha=0.6, label=r) for r in game.roles],
            fontsize=8,
        )
        ax.grid(alpha=0.3, axis="y")
    ax.set_title("Rewards of game samples")
    save(fig, path)


def plot_training(losses: Mapping[str, pd.DataFrame], path: str | os.PathLike) -> None:
    """Loss (top) and KL to the reference (bottom) by step, one line per stage.

    ``losses`` maps a stage's name (its legend entry) to its training log, in run order.
    """
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGSIZE[0], FIGSIZE[1] * 1.4), sharex=False)
    drawn = False
    for name, df in losses.items():
        loss = _numeric(df, "loss")
        if not _has(loss):
            continue
        step = _numeric(df, "step") if "step" in df.columns else pd.Series(range(1, len(df) + 1))
        top.plot(step, loss, marker=".", label=name)
        kl = _numeric(df, "kl")
        if _has(kl):
            bottom.plot(step, kl, marker=".", label=name)
        drawn = True
    if not drawn:
        no_data(top, "no training log")
        no_data(bottom, "")
    else:
        top.set_ylabel("loss")
        bottom.set_ylabel("KL (mean lp - ref lp)")
        bottom.set_xlabel("optimizer step")
        for ax in (top, bottom):
            _step_axis(ax)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    top.set_title("Training curves")
    fig.tight_layout()
    save(fig, path)


def plot_generation_speed(summary: pd.DataFrame, path: str | os.PathLike) -> None:
    """Self-play tokens per game (bars) and generated tokens per second (line) by epoch.

    Tokens/s is the summary's (:func:`spag.report.summary.generation_summary`:
    from the shards' own time, else their jobs' benchmark time).
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    per_game = _numeric(summary, "gen_tokens_per_game")
    speed = _numeric(summary, "gen_tokens_per_s")
    if summary.empty or not (_has(per_game) or _has(speed)):
        no_data(ax, "no generation metadata in the self-play shards")
    else:
        epochs = summary["epoch"].astype(int)
        ax.bar(epochs, per_game.fillna(0), width=0.5, color="#9ecae1", label="tokens per game")
        ax.set_ylabel("generated tokens per game")
        _epoch_axis(ax, epochs)
        handles, labels = ax.get_legend_handles_labels()
        if _has(speed):
            right = ax.twinx()
            right.plot(epochs, speed, marker="o", color="#08519c", label="tokens/s")
            right.set_ylabel("tokens/s (all shards)")
            right.set_ylim(bottom=0)
            h, lab = right.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
        ax.legend(handles, labels, fontsize=8, loc="best")
    ax.set_title("Self-play generation")
    save(fig, path)


def benchmark_step(label: str) -> str:
    """The step of a benchmark label: ``selfplay/epoch2/shard_001`` -> ``selfplay``."""
    return label.split("/", 1)[0]


def plot_step_runtime(benchmarks: Mapping[str, str | os.PathLike], path: str | os.PathLike) -> None:
    """Total wall time per pipeline step (all epochs and shards), from Snakemake benchmarks.

    ``benchmarks`` maps a label ``STEP[/DETAIL]`` (the rule, then its wildcards)
    to the job's benchmark file; the bars sum the files of each step.
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    totals: dict[str, float] = {}
    for label, b in benchmarks.items():
        seconds = benchmark_seconds(b)
        if not math.isnan(seconds):
            step = benchmark_step(label)
            totals[step] = totals.get(step, 0.0) + seconds
    if not totals:
        no_data(ax, "no benchmark files")
    else:
        items = sorted(totals.items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color="#756bb1")
        ax.set_xlabel("wall time (s), summed over epochs and shards")
        ax.grid(alpha=0.3, axis="x")
    ax.set_title("Time per step")
    save(fig, path)


# ------------------------------------------------------------------ epoch plots
def plot_epoch_rewards(
    samples: pd.DataFrame, epoch: int, path: str | os.PathLike, game: Game
) -> None:
    """Histogram of one epoch's game-sample rewards, by role (weights in the legend)."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    played = samples[samples["type"] == "game"]
    if played.empty:
        no_data(ax, "no game samples (no decisive self-play game)")
    else:
        for role in game.roles:
            sel = played[played["role"] == role]
            if len(sel):
                w = float(sel["weight"].iloc[0])
                ax.hist(
                    sel["reward"].astype(float),
                    bins=20,
                    alpha=0.6,
                    color=role_colors(game)[role],
                    label=f"{role}: {len(sel)} samples, weight {w:.3g}",
                )
        ax.set_xlabel("reward per message")
        ax.set_ylabel("samples")
        ax.legend(fontsize=8)
    ax.set_title(f"Epoch {epoch}: rewards of game samples")
    save(fig, path)


def plot_epoch_training(loss: pd.DataFrame, epoch: int, path: str | os.PathLike) -> None:
    """One epoch's loss, KL and probability-ratio range by step."""
    fig, axes = plt.subplots(3, 1, figsize=(FIGSIZE[0], FIGSIZE[1] * 1.6), sharex=True)
    step = _numeric(loss, "step") if "step" in loss.columns else pd.Series(range(1, len(loss) + 1))
    if not _has(_numeric(loss, "loss")):
        for ax in axes:
            no_data(ax, "no training log" if ax is axes[0] else "")
    else:
        axes[0].plot(step, _numeric(loss, "loss"), marker=".", color="#333333")
        axes[0].set_ylabel("loss")
        axes[1].plot(step, _numeric(loss, "kl"), marker=".", color="#e6550d")
        axes[1].set_ylabel("KL")
        rmean = _numeric(loss, "ratio_mean")
        if _has(rmean):
            axes[2].plot(step, rmean, marker=".", color="#3182bd", label="mean")
            lo, hi = _numeric(loss, "ratio_min"), _numeric(loss, "ratio_max")
            if _has(lo) and _has(hi):
                axes[2].fill_between(step, lo, hi, alpha=0.25, color="#3182bd", label="min-max")
            axes[2].legend(fontsize=8)
        else:
            no_data(axes[2], "no probability ratio in the log")
        axes[2].set_ylabel("ratio pi/ref")
        axes[2].set_xlabel("optimizer step")
        for ax in axes:
            _step_axis(ax)
            ax.grid(alpha=0.3)
    axes[0].set_title(f"Epoch {epoch}: training")
    fig.tight_layout()
    save(fig, path)


def plot_epoch_game_lengths(
    episodes: pd.DataFrame, epoch: int, path: str | os.PathLike, game: Game
) -> None:
    """How many messages the epoch's self-play games lasted, stacked by outcome."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    if episodes.empty or "outcome" not in episodes.columns:
        no_data(ax, "no judged episodes")
    else:
        lengths = _numeric(episodes, "num_messages")
        top = int(lengths.max()) if _has(lengths) else 1
        xs = list(range(1, top + 1))
        bottom = [0] * len(xs)
        for o in game.outcomes:
            counts = lengths[episodes["outcome"] == o].value_counts()
            ys = [int(counts.get(x, 0)) for x in xs]
            ax.bar(xs, ys, bottom=bottom, color=outcome_colors(game)[o], label=o)
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
        ax.set_xticks(xs)
        ax.set_xlabel("messages until the game was decided (n)")
        ax.set_ylabel("games")
        ax.legend(fontsize=8)
    ax.set_title(f"Epoch {epoch}: game lengths")
    save(fig, path)


# ------------------------------------------------------------------ entry points
def run_plots(
    output_dir: str | os.PathLike,
    *,
    summary: str | os.PathLike,
    reasoning: str | os.PathLike | None = None,
    samples: Mapping[int, str | os.PathLike] | None = None,
    losses: Mapping[str, str | os.PathLike] | None = None,
    benchmarks: Mapping[str, str | os.PathLike] | None = None,
    eval_games: str | os.PathLike | None = None,
    game: Game,
) -> list[Path]:
    """Write every plot of :data:`RUN_PLOTS` under ``output_dir``; return their paths.

    ``samples`` maps an epoch to its training samples, ``losses`` a stage's name
    (``imitation``, ``epoch1``, ...; the legend, in the order given) to its training
    log, ``benchmarks`` a label ``STEP[/DETAIL]`` to a job's benchmark file.
    ``eval_games`` is the run's evaluation games table (``spag summarize-run
    --eval-games-output``); without it the win-rate plot shows M(e) from ``summary`` only.
    """
    out = Path(output_dir)
    summary_df = read_tsv(summary, "epoch summary")
    check_columns(summary_df, ["epoch"], summary)
    summary_df = summary_df.sort_values("epoch").reset_index(drop=True)
    reasoning_df = read_tsv(reasoning, "reasoning table") if reasoning else pd.DataFrame()
    if not reasoning_df.empty:
        check_columns(reasoning_df, ("epoch", "task", "score"), reasoning)
    games_df = read_tsv(eval_games, "evaluation games table") if eval_games else None
    if games_df is not None:
        check_columns(games_df, ("epoch", "role", "win_rate"), eval_games)
    sample_dfs = {int(e): read_samples(p) for e, p in (samples or {}).items()}
    loss_dfs = {name: read_tsv(p, "training log") for name, p in (losses or {}).items()}
    benchmarks = benchmarks or {}
    jobs: dict[str, Callable[[Path], None]] = {
        "reasoning": lambda p: plot_reasoning(reasoning_df, p),
        "eval_win_rates": lambda p: plot_win_rates(summary_df, p, games_df, game=game),
        "eval_paired": lambda p: plot_paired(games_df, p, game),
        "selfplay_outcomes": lambda p: plot_outcomes(summary_df, p, game),
        "decisive_games": lambda p: plot_decisive(summary_df, p, game),
        "rewards": lambda p: plot_rewards(sample_dfs, p, game),
        "training_curves": lambda p: plot_training(loss_dfs, p),
        "generation_speed": lambda p: plot_generation_speed(summary_df, p),
        "step_runtime": lambda p: plot_step_runtime(benchmarks, p),
    }
    assert set(jobs) == {plot.key for plot in RUN_PLOTS.values()}
    written = []
    for name, plot in RUN_PLOTS.items():
        jobs[plot.key](out / name)
        written.append(out / name)
    return written


def epoch_plots(
    output_dir: str | os.PathLike,
    *,
    epoch: int,
    samples: str | os.PathLike,
    loss: str | os.PathLike,
    episodes: str | os.PathLike,
    game: Game,
) -> list[Path]:
    """Write every plot of :data:`EPOCH_PLOTS` for one epoch under ``output_dir``."""
    out = Path(output_dir)
    samples_df = read_samples(samples)
    loss_df = read_tsv(loss, "training log")
    table = read_parquet(episodes, "episodes")
    cols = [c for c in ("outcome", "num_messages") if c in table.column_names]
    episodes_df = table.select(cols).to_pandas()
    jobs: dict[str, Callable[[Path], None]] = {
        "rewards": lambda p: plot_epoch_rewards(samples_df, epoch, p, game),
        "training": lambda p: plot_epoch_training(loss_df, epoch, p),
        "game_lengths": lambda p: plot_epoch_game_lengths(episodes_df, epoch, p, game),
    }
    assert set(jobs) == {plot.key for plot in EPOCH_PLOTS.values()}
    written = []
    for name, plot in EPOCH_PLOTS.items():
        jobs[plot.key](out / name)
        written.append(out / name)
    return written


def plot_exploitability(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> None:
    """Exploitability (chips per hand a best response wins) by model, in run order, with
    the uniform-random player's level; 0 is the equilibrium."""
    from spag.game import kuhn_poker as kuhn

    fig, ax = plt.subplots(figsize=FIGSIZE)
    x = range(len(rows))
    ax.plot(x, [r["exploitability"] for r in rows], "o-", color=PALETTE[1], label="model")
    ax.axhline(kuhn.exploitability(kuhn.uniform_random()), color=PALETTE[3], ls="--",
               label="uniform-random player")  # fmt: skip
    ax.axhline(0.0, color=ALL_COLOR, ls=":", label="equilibrium")
    ax.set_xticks(list(x), labels=[str(r["model"]) for r in rows])
    ax.set_ylabel("exploitability (chips per hand)")
    ax.set_title("Exploitability of each model's strategy (exact)")
    ax.legend(loc="best", fontsize=9)
    save(fig, path)
