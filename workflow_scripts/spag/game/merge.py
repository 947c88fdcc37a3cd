"""Merging self-play shards into one judged episodes table, with outcome counts."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa

from spag.data.tables import atomic_path
from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.episodes import judge_table, outcome_counts, read_episodes


def merge_episode_files(
    paths: Sequence[str | os.PathLike], game: Game
) -> tuple[pa.Table, dict[str, int]]:
    """Concatenate shard files (extra columns kept, schemas unified) and judge every game.

    Each shard is validated on its own, so an error names the shard file; an
    episode id found in two shards is reported with both files.
    """
    if not paths:
        raise SpagInputError("no shard files given")
    tables = []
    seen: dict[str, str] = {}
    for path in paths:
        table = read_episodes(path, game=game)
        for eid in table.column("episode_id").to_pylist():
            other = seen.setdefault(eid, str(path))
            if other != str(path):
                raise SpagInputError(f"duplicate episode id {eid!r}: in {other} and in {path}")
        tables.append(table)
    try:
        merged = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SpagInputError(
            f"shards {', '.join(map(str, paths))}: extra columns have incompatible types: {exc}"
        ) from exc
    merged = judge_table(merged, game)
    return merged, outcome_counts(merged.column("outcome"), game)


def write_counts(
    counts: Mapping[str, int], path: str | os.PathLike, epoch: int | None = None
) -> None:
    """Write one TSV row: ``[epoch]``, one column per outcome (in ``counts``' order),
    ``total``."""
    header = (["epoch"] if epoch is not None else []) + [*counts, "total"]
    row = ([str(epoch)] if epoch is not None else []) + [
        *(str(n) for n in counts.values()),
        str(sum(counts.values())),
    ]
    with atomic_path(path, suffix=".tsv.tmp") as tmp:
        tmp.write_text("\t".join(header) + "\n" + "\t".join(row) + "\n", encoding="utf-8")
