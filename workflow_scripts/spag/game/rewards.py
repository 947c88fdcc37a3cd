"""Samples for training: rewards of self-play games and imitation data (docs/design.md section 3).

The arithmetic mirrors the reference: the winner's k-th message gets the
coefficient ``(1/decay)^k`` (built by repeated multiplication), divided by the
sum over the winner's messages of that game, and each role's samples are
weighted so that attacker and defender carry half of the total weight each.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spag.data.columns import build_array
from spag.data.tables import SAMPLE_SCHEMA
from spag.errors import SpagInputError
from spag.game.episodes import FlatEpisodes, judge_flat_episodes, load_episodes
from spag.game.prompts import Prompts, load_prompts
from spag.judge import ATTACKER_WINS, DEFENDER_WINS
from spag.settings import config_options, opt, section

_WINNER = {ATTACKER_WINS: "attacker", DEFENDER_WINS: "defender"}


@section("rewards")
@dataclass(frozen=True, kw_only=True)
class RewardsSettings:
    """How self-play games are turned into rewards (config ``rewards``)."""

    # The design's flag name (docs/design.md section 5) predates the config key.
    decay: float = opt(0.8, "reward decay", flag="decay_weight")


def rewards_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """``spag assign-rewards``'s settings from a validated config (``{"decay_weight": 0.8}``);
    the rule adds the files and the epoch's seed."""
    return config_options(RewardsSettings, config["rewards"])


class _Columns:
    """The sample table's columns, filled row by row as Python lists."""

    def __init__(self) -> None:
        self.type: list[str] = []
        self.role: list[str | None] = []
        self.episode_id: list[str | None] = []
        self.turn: list[int | None] = []
        self.query: list[str] = []
        self.target: list[str] = []
        self.reward: list[float] = []
        self.weight: list[float] = []

    def add_sft(self, queries: list[str], targets: list[str]) -> None:
        n = len(queries)
        self.type += ["sft"] * n
        self.role += [None] * n
        self.episode_id += [None] * n
        self.turn += [None] * n
        self.query += queries
        self.target += targets
        self.reward += [1.0] * n
        self.weight += [1.0] * n

    def table(self) -> pa.Table:
        names = SAMPLE_SCHEMA.names
        arrays = [
            build_array(getattr(self, name), SAMPLE_SCHEMA.field(name).type) for name in names
        ]
        return pa.Table.from_arrays(arrays, schema=SAMPLE_SCHEMA)


def _game_rows(
    cols: _Columns,
    flat: FlatEpisodes,
    outcomes: list[str],
    ns: list[int],
    prompts: Prompts,
    rand: Callable[[], float],
    decay: float | None,
) -> tuple[int, int]:
    """Append the winner's messages of each decisive game; return (N_a, N_d).

    With ``decay`` None every row gets reward 1.0 (imitation); otherwise the
    discounted, per-game normalised rewards of section 3.
    """
    increase = 1.0 if decay is None else 1.0 / decay
    build = prompts.training_prompt_from
    roles, contents, offsets = flat.roles, flat.contents, flat.offsets
    n_att = n_def = 0
    for i, outcome in enumerate(outcomes):
        winner = _WINNER.get(outcome)
        if winner is None:
            continue
        if winner == "attacker":
            n_att += 1
        else:
            n_def += 1
        start = offsets[i]
        word, max_turns, eid = flat.target_words[i], flat.max_turns[i], flat.episode_ids[i]
        coeff = 1.0
        coeffs = []
        count = 0
        for k in range(start, start + ns[i]):
            if roles[k] != winner:
                continue
            count += 1
            cols.query.append(
                build(roles[start:k], contents[start:k], winner, word, max_turns, rand())
            )
            cols.target.append(contents[k].strip())
            cols.turn.append(k - start)
            coeff *= increase
            coeffs.append(coeff)
        cols.type += ["game"] * count
        cols.role += [winner] * count
        cols.episode_id += [eid] * count
        if decay is None:
            cols.reward += [1.0] * count
        else:
            total = 0.0
            for c in coeffs:
                total += c
            # The reference multiplies a total reward of 1.0 by the share.
            cols.reward += [1.0 * c / total for c in coeffs]
    return n_att, n_def


def role_weights(n_attacker_wins: int, n_defender_wins: int) -> dict[str, float]:
    """Per-role sample weight: ``N / (2 N_role)``, 0 for a role that never won."""
    n = n_attacker_wins + n_defender_wins
    return {
        "attacker": n / (2 * n_attacker_wins) if n_attacker_wins > 0 else 0.0,
        "defender": n / (2 * n_defender_wins) if n_defender_wins > 0 else 0.0,
    }


def validate_sft(table: pa.Table, source: str) -> tuple[list[str], list[str]]:
    """The ``query`` and ``target`` columns of an instruction table, checked."""
    out = []
    for name in ("query", "target"):
        if name not in table.column_names:
            raise SpagInputError(f"{source}: missing column '{name}'")
        col = table.column(name)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            raise SpagInputError(f"{source}: column '{name}' has type {col.type}, expected string")
        values = col.to_pylist()
        if col.null_count:
            raise SpagInputError(f"{source}: column '{name}' is null in row {values.index(None)}")
        out.append(values)
    return out[0], out[1]


def assign_rewards(
    episodes_table: pa.Table,
    *,
    decay: float,
    seed: int,
    prompts: Prompts | None = None,
    sft: pa.Table | None = None,
    source: str,
    sft_source: str = "sft data",
) -> pa.Table:
    """Judge the episodes and build the samples table (``SAMPLE_SCHEMA``).

    Game rows come in episode order, then message order; SFT rows follow.
    The randomised prompts depend only on ``seed`` and the input. ``source`` and
    ``sft_source`` name the inputs in error messages.
    """
    if not decay > 0:
        raise SpagInputError(f"decay weight must be positive, got {decay}")
    _, flat = load_episodes(episodes_table, source)
    sft_cols = validate_sft(sft, sft_source) if sft is not None else None
    prompts = prompts if prompts is not None else load_prompts()
    outcomes, ns = judge_flat_episodes(flat)
    cols = _Columns()
    n_att, n_def = _game_rows(cols, flat, outcomes, ns, prompts, random.Random(seed).random, decay)
    weights = role_weights(n_att, n_def)
    w_att, w_def = weights["attacker"], weights["defender"]
    cols.weight = [w_att if r == "attacker" else w_def for r in cols.role]
    if sft_cols is not None:
        cols.add_sft(*sft_cols)
    return cols.table()


def imitation_samples(
    episodes_table: pa.Table | None = None,
    instructions: pa.Table | None = None,
    *,
    seed: int,
    prompts: Prompts | None = None,
    source: str,
    instructions_source: str = "instructions",
    both_roles_key: str | None = None,
) -> pa.Table:
    """Imitation data: the winner's messages of decisive demonstration games
    (type ``game``, reward 1.0, weight 1.0, randomised prompts), then instruction
    rows (``query``/``target``) as they are (type ``sft``, reward 1.0, weight 1.0).

    With ``both_roles_key`` (the config key that made the games, e.g. a teacher's),
    games won by only one role are refused naming it: M0 would never see the other
    role won.
    """
    cols = _Columns()
    if episodes_table is not None:
        _, flat = load_episodes(episodes_table, source)
        prompts = prompts if prompts is not None else load_prompts()
        outcomes, ns = judge_flat_episodes(flat)
        n_att, n_def = _game_rows(
            cols, flat, outcomes, ns, prompts, random.Random(seed).random, None
        )
        if n_att + n_def == 0:
            # Never a silent empty imitation set (e.g. a teacher whose games all tie).
            counts = ", ".join(f"{o} {outcomes.count(o)}" for o in sorted(set(outcomes)))
            raise SpagInputError(
                f"{source}: no decisive game among {len(outcomes)} ({counts}): "
                "no demonstrations to imitate"
            )
        if both_roles_key and not (n_att and n_def):
            missing = "attacker" if not n_att else "defender"
            counts = ", ".join(f"{o} {outcomes.count(o)}" for o in sorted(set(outcomes)))
            raise SpagInputError(
                f"{source}: no game won by the {missing} among {len(outcomes)} ({counts}): "
                f"M0 would never imitate the {missing}; key '{both_roles_key}': play more "
                "games per word, sample at another temperature, or choose a stronger player"
            )
        cols.weight = [1.0] * len(cols.role)
    if instructions is not None:
        cols.add_sft(*validate_sft(instructions, instructions_source))
    return cols.table()
