"""The samples table (docs/design.md section 6) built from judged games: one loop over the
games, a picker choosing each game's messages and their rewards, the messages' randomised
training prompts, then instruction rows. Rewards (:mod:`spag.game.rewards`) and
imitation (:mod:`spag.game.imitation`) both build their tables here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from spag.data.tables import META_GAME, SAMPLE_SCHEMA
from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.episodes import Episode

# A picker: (game, episode, outcome, n, settings) -> [(message index, reward)], the
# messages among the first n that become samples of their author's role (a reward
# scheme's shape; ``settings``: what the picker reads, the rewards section for a scheme).
Picker = Callable[[Game, Episode, str, int, Any], list[tuple[int, float]]]


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


class SampleRows:
    """The sample table's columns as lists (a row of dicts each would double the memory
    of 100,000 games' long prompts)."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in SAMPLE_SCHEMA.names}

    def add(self, **row: Any) -> None:
        for name, values in self.columns.items():
            values.append(row[name])

    def add_sft(self, queries: list[str], targets: list[str]) -> None:
        for q, t in zip(queries, targets, strict=True):
            self.add(type="sft", role=None, episode_id=None, turn=None, query=q, target=t,
                     reward=1.0, weight=1.0, move=None, legal_moves=None)  # fmt: skip

    def table(self, game: Game) -> pa.Table:
        table = pa.table(self.columns, schema=SAMPLE_SCHEMA)
        if game.move_set is not None:
            table = table.replace_schema_metadata({META_GAME: game.name.encode()})
        return table


def game_rows(
    game: Game,
    episodes: Iterable[Episode],
    prompts: Any,
    rand: Callable[[], float],
    pick: Picker,
    weight: Callable[[str], float],
    samples: SampleRows,
    settings: Any = None,
) -> tuple[Counter, list[str]]:
    """One loop over the games: take each one's verdict (as stored by the judge in a
    judged table, else the judge's now), let ``pick`` choose its samples (a reward
    scheme with its ``settings``, or imitation's choice), build their randomised
    prompts, add them to ``samples`` with ``weight(role)`` (or 0.0 for now).
    Returns the games per role that gave samples, and every game's outcome."""
    sampled: Counter = Counter()
    outcomes = []
    for episode in episodes:
        verdict = episode.verdict
        if verdict is None:
            verdict = game.judge(episode.history, episode.secret, episode.max_turns)
        outcome, n = verdict
        outcomes.append(outcome)
        picked = pick(game, episode, outcome, n, settings)
        for role in {episode.history[k]["role"] for k, _ in picked}:
            sampled[role] += 1
        for k, reward in picked:
            role = episode.history[k]["role"]
            query = game.training_prompt(
                prompts, episode.history[:k], role, episode.secret, episode.max_turns, rand()
            )
            target = episode.history[k]["content"].strip()
            closed = game.move_set is not None
            samples.add(
                type="game",
                role=role,
                episode_id=episode.episode_id,
                turn=k,
                query=query,
                target=target,
                reward=reward,
                weight=weight(role),
                move=game.read_move(target) if closed else None,
                legal_moves=list(game.legal_moves(episode.history[:k])) if closed else None,
            )
    return sampled, outcomes
