"""Win / loss / tie table of evaluation games (the model against a fixed opponent).

Each evaluation game records which side the evaluated model played
(``policy_role``). Games are judged by the game's judge; from the evaluated model's
side a game is a win, a loss or a tie by the sign of its result
(:meth:`spag.game.base.Game.result`). In Adversarial Taboo:

- as attacker: ``attacker_wins`` is a win, ``defender_wins`` a loss,
  ``attacker_broke_rules`` a loss (the model broke the rules), ``tie`` a tie;
- as defender: ``defender_wins`` is a win, ``attacker_wins`` a loss,
  ``attacker_broke_rules`` a win (the opponent broke the rules), ``tie`` a tie.

Rows: one per role of the game and ``all`` (both together).
Each rate (win, loss, tie, and the share of games that ended in a rule break,
``broke_rules_rate``: by either player)
comes with its 95% Wilson score interval (``<rate>_lo``, ``<rate>_hi``): with a
few dozen held-out words per role, the interval says whether two models'
rates differ by more than chance.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.game.base import Game, other_role

# rate name -> the count it is the share of
RATES = {"win": "wins", "loss": "losses", "tie": "ties", "broke_rules": "broke_rules"}
COUNT_COLUMNS = ("games", *RATES.values())
RATE_COLUMNS = tuple(f"{kind}_rate{bound}" for kind in RATES for bound in ("", "_lo", "_hi"))
COLUMNS = ("epoch", "model", "opponent", "role", *COUNT_COLUMNS, *RATE_COLUMNS)
Z95 = 1.959963984540054  # standard normal quantile of 0.975
# The episode columns naming the players of the first and second role.
PLAYER_COLUMNS = ("attacker_model", "defender_model")


def game_result(outcome: str, policy_role: str, game: Game) -> str:
    """``win``, ``loss`` or ``tie`` for the evaluated model playing ``policy_role``."""
    result = game.result(outcome, policy_role)
    return "win" if result > 0 else "loss" if result < 0 else "tie"


def tally(games: Iterable[tuple[str, str]], game: Game) -> dict[str, dict[str, int]]:
    """Count results per role from ``(policy_role, outcome)`` pairs; adds the ``all`` row."""
    counts = {
        r: {"games": 0, "wins": 0, "losses": 0, "ties": 0, "broke_rules": 0}
        for r in (*game.roles, "all")
    }
    key = {"win": "wins", "loss": "losses", "tie": "ties"}
    for role, outcome in games:
        result = key[game_result(outcome, role, game)]
        for row in (role, "all"):
            counts[row]["games"] += 1
            counts[row][result] += 1
            counts[row]["broke_rules"] += game.rule_breaker(outcome) is not None
    return counts


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``k / n`` (95% with the default ``z``).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at
    ``k = 0`` or ``k = n``. ``(nan, nan)`` when ``n`` is 0.
    """
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= k <= n:
        raise ValueError(f"wilson_interval: k={k} outside 0..n={n}")
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # The bounds are exactly 0 at k = 0 and 1 at k = n; rounding would miss them.
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def rates(counts: Mapping[str, float]) -> dict[str, float]:
    """Rates and their Wilson intervals (:data:`RATE_COLUMNS`) from one row's counts."""
    n = int(counts["games"])
    row: dict[str, float] = {}
    for kind, count in RATES.items():
        k = int(counts[count])
        lo, hi = wilson_interval(k, n)
        row[f"{kind}_rate"] = k / n if n else math.nan
        row[f"{kind}_rate_lo"], row[f"{kind}_rate_hi"] = lo, hi
    return row


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.6f}"


def format_table(
    counts: dict[str, dict[str, int]], epoch: int, model: str, opponent: str, game: Game
) -> str:
    """The TSV text (header + one row per role and ``all``)."""
    lines = ["\t".join(COLUMNS)]
    for role in (*game.roles, "all"):
        c = counts[role]
        r = rates(c)
        cells = [epoch, model, opponent, role, *(c[k] for k in COUNT_COLUMNS)]
        cells += [_fmt(r[k]) for k in RATE_COLUMNS]
        lines.append("\t".join(map(str, cells)))
    return "\n".join(lines) + "\n"


def _single(values: Sequence, what: str, path: str | os.PathLike) -> object:
    distinct = sorted({v for v in values if v is not None}, key=str)
    if len(distinct) != 1:
        raise SpagInputError(
            f"{path}: expected one {what} in the evaluation games, found {distinct or 'none'};"
            f" pass --{what.replace('_', '-')} explicitly"
        )
    return distinct[0]


def judged_games(episodes_path: str | os.PathLike, game: Game) -> tuple[list[dict], Any]:
    """Judge every evaluation game in ``episodes_path``: one dict per game (``word`` the
    secret, ``role`` the evaluated model played, ``outcome``, ``model``, ``opponent``),
    and the table (for its other columns)."""
    from spag.data.tables import EPISODE_FIELDS, read_parquet, require_columns

    table = read_parquet(episodes_path, "evaluation episodes")
    table = require_columns(table, EPISODE_FIELDS, episodes_path)
    if "policy_role" not in table.column_names:
        raise SpagInputError(
            f"{episodes_path}: missing column 'policy_role': not evaluation games"
            " (play them with spag play --opponent)"
        )
    games = []
    for i, row in enumerate(table.to_pylist()):
        role = row["policy_role"]
        if role not in game.roles:
            raise SpagInputError(
                f"{episodes_path}: row {i} (episode {row['episode_id']!r}): policy_role is"
                f" {role!r}, expected {' or '.join(game.roles)}"
            )
        history = row["history"] or []
        for j, m in enumerate(history):
            if m is None or m.get("role") not in game.roles or m.get("content") is None:
                raise SpagInputError(
                    f"{episodes_path}: episode {row['episode_id']!r}: message {j} has no valid"
                    " role/content"
                )
        outcome, _ = game.judge(history, row["target_word"], int(row["max_turns"]))
        column = dict(zip(game.roles, PLAYER_COLUMNS, strict=True))
        games.append(
            dict(
                word=row["target_word"], role=role, outcome=outcome,
                model=row.get(column[role]), opponent=row.get(column[other_role(game, role)]),
            )
        )  # fmt: skip
    return games, table


def evaluated_model(games: Sequence[Mapping], path: str | os.PathLike) -> str:
    """The one model the games evaluate (its name as the episodes record it)."""
    return str(_single([g["model"] for g in games], "model_name", path)) if games else ""


def evaluation_table(
    episodes_path: str | os.PathLike,
    output: str | os.PathLike,
    *,
    epoch: int | None = None,
    model_name: str | None = None,
    game: Game,
) -> dict[str, dict[str, int]]:
    """Judge the evaluation games in ``episodes_path`` and write the TSV table to ``output``."""
    from spag.data.tables import atomic_path

    games, table = judged_games(episodes_path, game)
    if epoch is None:
        if "epoch" not in table.column_names:
            raise SpagInputError(f"{episodes_path}: no 'epoch' column; pass --epoch")
        epoch = int(_single(table.column("epoch").to_pylist(), "epoch", episodes_path))
    if model_name is None:
        model_name = evaluated_model(games, episodes_path)
    opponent = ",".join(sorted({g["opponent"] for g in games if g["opponent"] is not None}))
    counts = tally(((g["role"], g["outcome"]) for g in games), game)
    out = Path(output)
    with atomic_path(out, suffix=".tsv.tmp") as tmp:
        tmp.write_text(format_table(counts, epoch, model_name, opponent, game), encoding="utf-8")
    return counts
