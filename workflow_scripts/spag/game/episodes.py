"""Episode tables: validation of what a step reads, and judging a whole table.

An episode table follows docs/design.md section 6 (``spag.data.tables.EPISODE_FIELDS``);
``target_word`` holds the game's secret. Every error names the file, the column and,
where there is one, the episode id. The game (:mod:`spag.game.base`) says which roles
speak in turn and which outcomes a judged table may hold.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from spag.data.tables import EPISODE_FIELDS, JUDGED_FIELDS, read_parquet, require_columns
from spag.errors import SpagInputError
from spag.game.base import Game

_STRING_TYPES = (pa.string(), pa.large_string())


@dataclass
class Episode:
    """One game of an episode table: its secret, length limit and messages; in a judged
    table also its ``verdict``, the (outcome, num_messages) the judge stored there."""

    episode_id: str
    secret: str
    max_turns: int
    history: list[dict[str, str]]
    verdict: tuple[str, int] | None = None


def _check_history_type(table: pa.Table, source: str) -> None:
    """Reject a history column whose message fields are not strings before any cast."""
    if "history" not in table.column_names:
        return  # require_columns reports the missing column
    t = table.schema.field("history").type
    expected = EPISODE_FIELDS[3].type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_null(t.value_type):
        return  # only empty (or null) histories: nothing to check here
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(
        t.value_type
    ):
        raise SpagInputError(f"{source}: column 'history' has type {t}, expected {expected}")
    struct = t.value_type
    for name in ("role", "content"):
        idx = struct.get_field_index(name)
        if idx < 0:
            raise SpagInputError(f"{source}: column 'history' has no message field '{name}'")
        if struct.field(idx).type not in _STRING_TYPES and not pa.types.is_null(
            struct.field(idx).type
        ):
            raise SpagInputError(
                f"{source}: column 'history': message field '{name}' has type "
                f"{struct.field(idx).type}, expected string"
            )


def validate_episodes(
    table: pa.Table, source: str, judged: bool = False, *, game: Game
) -> pa.Table:
    """Check an episode table and cast its contract columns; return the checked table.

    Checks: the contract columns and types, at least one row, unique non-null
    episode ids, non-empty secrets, ``max_turns`` > 0, non-null histories whose
    roles alternate from the game's first role, non-null contents. With ``judged``,
    also ``outcome`` (one of the game's outcomes) and ``num_messages``.
    """
    return load_episodes(table, source, judged, game=game)[0]


def load_episodes(
    table: pa.Table, source: str, judged: bool = False, *, game: Game
) -> tuple[pa.Table, list[Episode]]:
    """:func:`validate_episodes` that also returns the games, one :class:`Episode` each."""
    table = check_columns(table, source, judged)
    return table, list(iter_episodes(table, source, judged, game=game))


def check_columns(table: pa.Table, source: str, judged: bool = False) -> pa.Table:
    """The contract columns present with their types (cast to them), at least one row."""
    _check_history_type(table, source)
    table = require_columns(table, EPISODE_FIELDS + (JUDGED_FIELDS if judged else []), source)
    if table.num_rows == 0:
        raise SpagInputError(f"{source}: no episodes (the table is empty)")
    return table


def iter_episodes(
    table: pa.Table, source: str, judged: bool = False, *, game: Game
) -> Iterator[Episode]:
    """The games of a table checked by :func:`check_columns`, each checked as it comes
    (see :func:`validate_episodes`); a few thousand at a time are held as Python objects."""
    fields = EPISODE_FIELDS + (JUDGED_FIELDS if judged else [])
    seen: set[str] = set()
    row_index = 0
    for batch in table.select([f.name for f in fields]).to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            yield _episode(row, row_index, seen, source, judged, game)
            row_index += 1


def _episode(
    row: dict, index: int, seen: set[str], source: str, judged: bool, game: Game
) -> Episode:
    eid = row["episode_id"]
    if eid is None:
        raise SpagInputError(f"{source}: column 'episode_id' is null in row {index}")
    if eid in seen:
        raise SpagInputError(f"{source}: column 'episode_id': duplicate episode id {eid!r}")
    seen.add(eid)
    if not row["target_word"]:
        raise SpagInputError(f"{source}: column 'target_word' is null or empty in episode {eid!r}")
    turns = row["max_turns"]
    if turns is None or turns <= 0:
        raise SpagInputError(
            f"{source}: column 'max_turns' must be a positive integer, got {turns!r} "
            f"in episode {eid!r}"
        )
    history = row["history"]
    if history is None:
        raise SpagInputError(f"{source}: column 'history' is null in episode {eid!r}")
    _check_messages(history, eid, source, game)
    if judged:
        if row["outcome"] not in game.outcomes:
            raise SpagInputError(
                f"{source}: column 'outcome' has {row['outcome']!r} in episode {eid!r}; "
                f"expected one of {list(game.outcomes)}"
            )
        n = row["num_messages"]
        if n is None or not 0 <= n <= len(history):
            raise SpagInputError(
                f"{source}: column 'num_messages' must be between 0 and the game's "
                f"{len(history)} messages, got {n!r} in episode {eid!r}"
            )
        return Episode(eid, row["target_word"], turns, history, (row["outcome"], n))
    return Episode(eid, row["target_word"], turns, history)


def is_judged(table: pa.Table) -> bool:
    """Whether ``table`` carries the judge's verdict (``outcome``, ``num_messages``)."""
    return all(f.name in table.column_names for f in JUDGED_FIELDS)


def _check_messages(history: list, eid: str, source: str, game: Game) -> None:
    """Messages present, with content, their roles alternating from the first role."""
    for k, message in enumerate(history):
        where = f"message {k} of episode {eid!r}"
        if message is None:
            raise SpagInputError(f"{source}: column 'history': {where} is null")
        if message["content"] is None:
            raise SpagInputError(f"{source}: column 'history': {where} has null content")
        role, expected = message["role"], game.roles[k % 2]
        if role == expected:
            continue
        if role in game.roles:
            raise SpagInputError(
                f"{source}: column 'history': roles must alternate starting with the "
                f"{game.roles[0]}; {where} is by the {role}"
            )
        raise SpagInputError(
            f"{source}: column 'history': {where} has role {role!r}, "
            f"expected {' or '.join(repr(r) for r in game.roles)}"
        )


def read_episodes(path: str | os.PathLike, judged: bool = False, *, game: Game) -> pa.Table:
    """Read and validate an episodes Parquet file (see :func:`validate_episodes`)."""
    table = read_parquet(path, what="episodes")
    return validate_episodes(table, str(path), judged=judged, game=game)


def judge_table(table: pa.Table, game: Game) -> pa.Table:
    """``table`` with ``outcome`` and ``num_messages`` set by the game's judge (replaced
    if present). The table must be valid (see :func:`validate_episodes`); other columns
    are kept."""
    _, episodes = load_episodes(table, "episodes", game=game)
    verdicts = [game.judge(e.history, e.secret, e.max_turns) for e in episodes]
    for field, values in zip(JUDGED_FIELDS, zip(*verdicts, strict=True), strict=True):
        arr = pa.array(values, field.type)
        idx = table.schema.get_field_index(field.name)
        table = table.set_column(idx, field, arr) if idx >= 0 else table.append_column(field, arr)
    return table


def outcome_counts(outcomes: list[str] | pa.Array | pa.ChunkedArray, game: Game) -> dict[str, int]:
    """Number of games per outcome, every outcome of the game present (0 when absent)."""
    values = outcomes.to_pylist() if hasattr(outcomes, "to_pylist") else list(outcomes)
    counts = dict.fromkeys(game.outcomes, 0)
    for v in values:
        counts[v] += 1
    return counts
