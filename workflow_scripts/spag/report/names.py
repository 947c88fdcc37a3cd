"""The report's plot files: their names, and where the Snakemake report files them.

This module owns the list of plots. ``spag plot-run`` writes every plot of
:data:`RUN_PLOTS` into one folder (``results/plots``), ``spag plot-epoch`` every
plot of :data:`EPOCH_PLOTS` into one epoch's folder (``results/plots/epoch<N>``);
the rules ``plots`` and ``epoch_plots`` (``rules/report.smk``) declare the same
files as their outputs by importing these tables. Each plot's caption is
``report/<key>.rst`` (run-wide) or ``report/epoch_<key>.rst`` (per epoch).

Nothing heavy is imported here: Snakemake reads this module when it parses the rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plot:
    """One plot: ``key`` names its rule output and caption, ``file`` is ``<key>.png``."""

    key: str
    subcategory: str  # where the Snakemake report files it
    what: str  # what it shows (the report's caption says more)

    @property
    def file(self) -> str:
        return f"{self.key}.png"


def _by_file(*plots: Plot) -> dict[str, Plot]:
    return {p.file: p for p in plots}


# file name -> plot, for the whole run (report category "Summary")
RUN_PLOTS: dict[str, Plot] = _by_file(
    Plot("reasoning", "Reasoning", "reasoning scores by model, per task and their geometric mean"),
    Plot(
        "eval_win_rates",
        "Games against the opponent",
        "win rates against the fixed opponent by model and role, with 95% intervals and M0's "
        "rates as reference lines",
    ),
    Plot(
        "eval_paired",
        "Games against the opponent",
        "each model's win, rule-break and decisive rates minus M0's on the same words and "
        "roles, with paired 95% intervals",
    ),
    Plot("selfplay_outcomes", "Self-play", "self-play outcome mix by epoch"),
    Plot("decisive_games", "Self-play", "decisive games and role weights by epoch"),
    Plot("rewards", "Self-play", "reward distribution of game samples by epoch and role"),
    Plot("training_curves", "Training", "training loss and KL by step, imitation and every epoch"),
    Plot("generation_speed", "Speed", "self-play generation: tokens and tokens/s by epoch"),
    Plot("step_runtime", "Speed", "wall time of the pipeline's steps"),
)
# file name -> plot, for each epoch (report category "Epoch <N>")
EPOCH_PLOTS: dict[str, Plot] = _by_file(
    Plot(
        "rewards",
        "Self-play and training",
        "reward histogram of the epoch's game samples by role",
    ),
    Plot(
        "training",
        "Self-play and training",
        "the epoch's training loss, KL and probability ratio by step",
    ),
    Plot(
        "game_lengths",
        "Self-play and training",
        "number of messages of the epoch's self-play games by outcome",
    ),
)
