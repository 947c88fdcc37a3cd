"""Paired comparison of two models' evaluation games on the same words and roles.

Every model of a run plays the same held-out words in both roles against the same
opponent, greedily: game ``(word, role)`` of M(e) and of M0 differ only by the
model (sampled games: the k-th game of a word and role pairs with the k-th). Separate intervals per model do not answer "is M(e) better than M0 on these
words?"; the paired difference does. For each metric (win, the game ending in a
rule break, the game decisive: won by either side by play) and each role (and both
together):

- ``<metric>_diff``: the model's rate minus the reference's, over the pairs;
- ``<metric>_diff_lo``, ``_hi``: its 95% percentile bootstrap interval, resampling
  words (both roles of a word together in the ``all`` row), seeded: the table is
  the same on every run;
- ``<metric>_diff_p``: the exact McNemar test's two-sided p-value (a binomial test
  on the discordant pairs).

A difference is read as an effect only where its interval excludes zero and the
McNemar p-value is below 0.05: with few discordant pairs the percentile
bootstrap is too narrow (4 discordant pairs, all one way, of 100: interval
[-0.08, -0.01], p = 0.125).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

from spag.errors import SpagInputError
from spag.evaluation.games import game_result
from spag.game.base import Game

# metric -> whether a game counts, from (game, outcome, the role the evaluated model played)
METRICS: dict[str, Callable[[Game, str, str], bool]] = {
    "win": lambda game, outcome, role: game_result(outcome, role, game) == "win",
    "broke_rules": lambda game, outcome, role: game.rule_breaker(outcome) is not None,
    "decisive": lambda game, outcome, role: game.winner(outcome) is not None,
}
PAIRED_COLUMNS = (
    "reference",
    "pairs",
    *(f"{m}_diff{s}" for m in METRICS for s in ("", "_lo", "_hi", "_p")),
)
RESAMPLES = 10_000
SEED = 0


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts ``b`` and ``c``."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def cluster_bootstrap(
    sums: Sequence[float], sizes: Sequence[int], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """95% percentile bootstrap interval of a mean over clusters (a word's games, an
    item): ``sums`` and ``sizes`` are each cluster's total and count; whole clusters
    are resampled, seeded; nan under two clusters (nothing to resample). Drawn in
    chunks: at paper scale (14k items, 10,000 resamples) the indices at once would
    take GBs."""
    import numpy as np

    sums, sizes = np.asarray(sums, dtype=float), np.asarray(sizes, dtype=float)
    n = len(sums)
    if n < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, 2_000_000 // n))
    means = []
    for done in range(0, resamples, chunk):
        draws = rng.integers(0, n, (min(chunk, resamples - done), n))
        means.append(sums[draws].sum(axis=1) / sizes[draws].sum(axis=1))
    lo, hi = np.percentile(np.concatenate(means), [2.5, 97.5])
    return float(lo), float(hi)


def paired_rows(
    games: Sequence[Mapping],
    reference: Sequence[Mapping],
    *,
    names: tuple[str, str] = ("model", "reference"),
    resamples: int = RESAMPLES,
    seed: int = SEED,
    game: Game,
) -> dict[str, dict[str, float]]:
    """Paired differences per role and ``all`` (columns of :data:`PAIRED_COLUMNS` but
    ``reference``). ``games`` and ``reference`` are judged games (``word``, ``role``,
    ``outcome``) of the same words and roles, as many of each: one (greedy games), or
    several sampled games, the k-th of a word and role paired with the reference's
    k-th (the bootstrap resamples words, so a word's games move together)."""
    import numpy as np

    mine, theirs = _by_pair(games, names[0]), _by_pair(reference, names[1])
    if mine.keys() != theirs.keys():
        only = sorted(mine.keys() ^ theirs.keys())[:3]
        raise SpagInputError(
            f"{names[0]} and {names[1]} did not play the same words and roles (e.g. {only}): "
            "evaluation games are compared pair by pair"
        )
    rng = np.random.default_rng(seed)
    rows: dict[str, dict[str, float]] = {}
    for role in (*game.roles, "all"):
        keys = sorted(k for k in mine if role in ("all", k[1]))
        words = sorted({k[0] for k in keys})
        index = {w: i for i, w in enumerate(words)}
        row: dict[str, float] = {"pairs": len(keys)}
        # one resample of words for every metric of this row
        draws = rng.integers(0, len(words), size=(resamples, len(words))) if words else None
        for metric, counts in METRICS.items():
            x = {k: int(counts(game, mine[k], k[1])) for k in keys}
            y = {k: int(counts(game, theirs[k], k[1])) for k in keys}
            b = sum(x[k] and not y[k] for k in keys)
            c = sum(y[k] and not x[k] for k in keys)
            if not keys:
                row.update({f"{metric}_diff{s}": math.nan for s in ("", "_lo", "_hi", "_p")})
                continue
            per_word = np.zeros(len(words))
            games_of = np.zeros(len(words))
            for k in keys:
                per_word[index[k[0]]] += x[k] - y[k]
                games_of[index[k[0]]] += 1
            boot = per_word[draws].sum(axis=1) / games_of[draws].sum(axis=1)
            lo, hi = np.percentile(boot, [2.5, 97.5])
            row[f"{metric}_diff"] = float(per_word.sum() / len(keys))
            row[f"{metric}_diff_lo"], row[f"{metric}_diff_hi"] = float(lo), float(hi)
            row[f"{metric}_diff_p"] = mcnemar_p(b, c)
        rows[role] = row
    return rows


def _by_pair(games: Sequence[Mapping], name: str) -> dict[tuple[str, str, int], str]:
    """Outcomes by (word, role, k): the k-th game of that word and role, in table order."""
    out: dict[tuple[str, str, int], str] = {}
    seen: dict[tuple[str, str], int] = {}
    for g in games:
        k = seen.get((g["word"], g["role"]), 0)
        seen[(g["word"], g["role"])] = k + 1
        out[(g["word"], g["role"], k)] = g["outcome"]
    return out


def paired_table(
    episodes: Sequence[str | os.PathLike], reference_model: str = "imitation", *, game: Game
) -> list[dict]:
    """Rows (``model``, ``role``, :data:`PAIRED_COLUMNS`) comparing every evaluated
    model in ``episodes`` with ``reference_model`` (one of them; none for it)."""
    from spag.evaluation.games import evaluated_model, judged_games

    judged = {}
    for path in episodes:
        games, _ = judged_games(path, game)
        judged[evaluated_model(games, path)] = games
    if reference_model not in judged:
        raise SpagInputError(
            f"no evaluation games of the reference model {reference_model!r} among "
            f"{', '.join(map(str, episodes))} (models: {', '.join(sorted(judged))})"
        )
    rows = []
    for model, games in judged.items():
        if model == reference_model:
            continue
        paired = paired_rows(
            games, judged[reference_model], names=(model, reference_model), game=game
        )
        for role, row in paired.items():
            rows.append({"model": model, "role": role, "reference": reference_model, **row})
    return rows
