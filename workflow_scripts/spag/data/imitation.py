"""Reading the input of the imitation step: games or instruction data, Parquet or JSON."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from spag.data.tables import read_parquet
from spag.errors import SpagInputError


def load_imitation_input(path: str | os.PathLike) -> tuple[pa.Table | None, pa.Table | None]:
    """Return ``(games, instructions)``, one of them None.

    A Parquet file with a ``history`` column is an episodes table; one with
    ``query`` and ``target`` columns is instruction data. Any other file is one
    of the research code's JSON formats, read by :mod:`spag.data.formats`.
    """
    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"input file not found: {p}")
    with p.open("rb") as fh:
        is_parquet = fh.read(4) == b"PAR1"
    if is_parquet:
        table = read_parquet(p, what="imitation input")
        if "history" in table.column_names:
            return table, None
        if "query" in table.column_names and "target" in table.column_names:
            return None, table
        raise SpagInputError(
            f"{p}: neither an episodes table (column 'history') nor instruction data "
            "(columns 'query', 'target')"
        )
    from spag.data import formats as data_formats

    kind = data_formats.detect_format(str(p))
    if kind == "games":
        return data_formats.load_games_json(str(p)), None
    if kind in ("instructions", "alpaca"):
        return None, data_formats.load_instructions_json(str(p))
    raise SpagInputError(f"{p}: unknown data format {kind!r}")


def load_imitation_inputs(
    paths: list[str | os.PathLike],
) -> tuple[pa.Table | None, pa.Table | None]:
    """:func:`load_imitation_input` over several files: games and instructions concatenated."""
    games, instructions = [], []
    for path in paths:
        g, i = load_imitation_input(path)
        if g is not None:
            games.append(g)
        if i is not None:
            instructions.append(i.select(["query", "target"]))
    try:
        return (
            pa.concat_tables(games, promote_options="permissive") if games else None,
            pa.concat_tables(instructions, promote_options="permissive") if instructions else None,
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        names = ", ".join(map(str, paths))
        raise SpagInputError(f"{names}: the files' columns do not fit together: {exc}") from exc
