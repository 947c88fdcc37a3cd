"""Episode tables: validation of what a step reads, and judging a whole table.

An episode table follows DESIGN section 6 (``spag.tables.EPISODE_FIELDS``).
Validation is vectorised with pyarrow so that it costs little next to the
judge; every error names the file, the column and, where there is one, the
episode id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spag.errors import SpagInputError
from spag.judge import judge_flat
from spag.tables import EPISODE_FIELDS, JUDGED_FIELDS, OUTCOMES, read_parquet, require_columns

ROLES = ("attacker", "defender")
_STRING_TYPES = (pa.string(), pa.large_string())


@dataclass
class FlatEpisodes:
    """An episode table's game columns as plain Python lists (fast to loop over)."""

    episode_ids: list[str]
    target_words: list[str]
    max_turns: list[int]
    offsets: list[int]  # messages of game i: offsets[i]:offsets[i + 1]
    roles: list[str]
    contents: list[str]


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int | None:
    idx = pc.index(mask, True).as_py()
    return None if idx is None or idx < 0 else idx


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


def validate_episodes(table: pa.Table, source: str, judged: bool = False) -> pa.Table:
    """Check an episode table and cast its contract columns; return the checked table.

    Checks: the contract columns and types, at least one row, unique non-null
    episode ids, non-null target words, ``max_turns`` > 0, message roles that
    are attacker/defender alternating from the attacker, non-null contents.
    With ``judged``, also ``outcome`` (one of the four outcomes) and ``num_messages``.
    """
    _check_history_type(table, source)
    fields = EPISODE_FIELDS + (JUDGED_FIELDS if judged else [])
    table = require_columns(table, fields, source)
    if table.num_rows == 0:
        raise SpagInputError(f"{source}: no episodes (the table is empty)")

    ids = table.column("episode_id")
    if ids.null_count:
        row = _first_true(pc.is_null(ids))
        raise SpagInputError(f"{source}: column 'episode_id' is null in row {row}")
    if pc.count_distinct(ids).as_py() != table.num_rows:
        counts = pc.value_counts(ids)
        dup = counts.field("values").filter(pc.greater(counts.field("counts"), 1))[0].as_py()
        raise SpagInputError(f"{source}: column 'episode_id': duplicate episode id {dup!r}")

    def episode(row: int) -> str:
        return repr(ids[row].as_py())

    words = table.column("target_word")
    row = _first_true(pc.or_kleene(pc.is_null(words), pc.equal(pc.utf8_length(words), 0)))
    if row is not None:
        raise SpagInputError(
            f"{source}: column 'target_word' is null or empty in episode {episode(row)}"
        )
    turns = table.column("max_turns")
    row = _first_true(pc.fill_null(pc.less_equal(turns, 0), True))
    if row is not None:
        raise SpagInputError(
            f"{source}: column 'max_turns' must be a positive integer, got "
            f"{turns[row].as_py()!r} in episode {episode(row)}"
        )

    history = table.column("history").combine_chunks()
    if history.null_count:
        row = _first_true(history.is_null())
        raise SpagInputError(f"{source}: column 'history' is null in episode {episode(row)}")
    lengths = pc.list_value_length(history).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    role_arr, content_arr = history.flatten().flatten()

    def message_episode(msg: int) -> tuple[str, int]:
        row = int(np.searchsorted(offsets, msg, side="right")) - 1
        return episode(row), msg - int(offsets[row])

    bad = _first_true(pc.invert(pc.fill_null(pc.is_in(role_arr, pa.array(ROLES)), False)))
    if bad is not None:
        ep, pos = message_episode(bad)
        raise SpagInputError(
            f"{source}: column 'history': message {pos} of episode {ep} has role "
            f"{role_arr[bad].as_py()!r}, expected 'attacker' or 'defender'"
        )
    if content_arr.null_count:
        ep, pos = message_episode(_first_true(content_arr.is_null()))
        raise SpagInputError(
            f"{source}: column 'history': message {pos} of episode {ep} has null content"
        )
    if len(role_arr):
        is_attacker = pc.equal(role_arr, "attacker").to_numpy(zero_copy_only=False)
        pos = np.arange(len(role_arr), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        wrong = np.flatnonzero(is_attacker != (pos % 2 == 0))
        if len(wrong):
            ep, p = message_episode(int(wrong[0]))
            raise SpagInputError(
                f"{source}: column 'history': roles must alternate starting with the "
                f"attacker; message {p} of episode {ep} is by the "
                f"{role_arr[int(wrong[0])].as_py()}"
            )

    if judged:
        outcome = table.column("outcome")
        row = _first_true(pc.invert(pc.fill_null(pc.is_in(outcome, pa.array(OUTCOMES)), False)))
        if row is not None:
            raise SpagInputError(
                f"{source}: column 'outcome' has {outcome[row].as_py()!r} in episode "
                f"{episode(row)}; expected one of {list(OUTCOMES)}"
            )
        if table.column("num_messages").null_count:
            row = _first_true(pc.is_null(table.column("num_messages")))
            raise SpagInputError(
                f"{source}: column 'num_messages' is null in episode {episode(row)}"
            )
    return table


def read_episodes(path: str | os.PathLike, judged: bool = False) -> pa.Table:
    """Read and validate an episodes Parquet file (see :func:`validate_episodes`)."""
    table = read_parquet(path, what="episodes")
    return validate_episodes(table, str(path), judged=judged)


def flatten_episodes(table: pa.Table) -> FlatEpisodes:
    """The game columns of a validated episode table as Python lists."""
    history = table.column("history").combine_chunks()
    lengths = pc.list_value_length(history).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    role_arr, content_arr = history.flatten().flatten()
    return FlatEpisodes(
        episode_ids=table.column("episode_id").to_pylist(),
        target_words=table.column("target_word").to_pylist(),
        max_turns=table.column("max_turns").to_pylist(),
        offsets=offsets.tolist(),
        roles=role_arr.to_pylist(),
        contents=content_arr.to_pylist(),
    )


def judge_flat_episodes(flat: FlatEpisodes) -> tuple[list[str], list[int]]:
    """Outcome and n of every game of ``flat``."""
    return judge_flat(flat.roles, flat.contents, flat.offsets, flat.target_words, flat.max_turns)


def judge_table(table: pa.Table) -> pa.Table:
    """``table`` with ``outcome`` and ``num_messages`` set by the judge (replaced if present).

    The table must be valid (see :func:`validate_episodes`); other columns are kept.
    """
    outcomes, ns = judge_flat_episodes(flatten_episodes(table))
    for field, values in zip(JUDGED_FIELDS, (outcomes, ns), strict=True):
        arr = pa.array(values, type=field.type)
        idx = table.schema.get_field_index(field.name)
        table = table.set_column(idx, field, arr) if idx >= 0 else table.append_column(field, arr)
    return table


def outcome_counts(outcomes: list[str] | pa.Array | pa.ChunkedArray) -> dict[str, int]:
    """Number of games per outcome, every outcome present (0 when absent)."""
    values = outcomes.to_pylist() if hasattr(outcomes, "to_pylist") else list(outcomes)
    counts = dict.fromkeys(OUTCOMES, 0)
    for v in values:
        counts[v] += 1
    return counts
