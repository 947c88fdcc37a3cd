"""Parquet contracts (docs/design.md section 6) and atomic file writing.

This module owns the column names and types of the episode and sample tables;
every reader and writer goes through it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spag.errors import SpagInputError

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])

# Columns every episode table (shard or merged) carries; extra metadata is allowed.
EPISODE_FIELDS = [
    pa.field("episode_id", pa.string()),
    pa.field("target_word", pa.string()),
    pa.field("max_turns", pa.int64()),
    pa.field("history", pa.list_(MESSAGE_TYPE)),
]
# Added by the merge (judge) step.
JUDGED_FIELDS = [
    pa.field("outcome", pa.string()),
    pa.field("num_messages", pa.int64()),
]
SAMPLE_FIELDS = [
    pa.field("type", pa.string()),
    pa.field("role", pa.string()),
    pa.field("episode_id", pa.string()),
    pa.field("turn", pa.int64()),
    pa.field("query", pa.string()),
    pa.field("target", pa.string()),
    pa.field("reward", pa.float64()),
    pa.field("weight", pa.float64()),
]
# A game whose moves form a closed set (``Game.move_set``) fills these for its game rows:
# the move the target names (null when it names none) and the moves legal there, in the
# game's order; null elsewhere (instruction rows, other games). Not required on read.
MOVE_FIELDS = [
    pa.field("move", pa.string()),
    pa.field("legal_moves", pa.list_(pa.string())),
]
REF_LOGPROB_FIELD = pa.field("ref_logprob", pa.float64())
# Written by scoring where the samples have legal moves and the rows are packed: the
# reference's log-prob of the row's move among the legal ones (null where none).
REF_MOVE_LOGPROB_FIELD = pa.field("ref_move_logprob", pa.float64())

SAMPLE_SCHEMA = pa.schema([*SAMPLE_FIELDS, *MOVE_FIELDS])
# Sample tables with moves name their game in the Parquet metadata: training and scoring
# read the moves' forms (``Game.move_forms``) from it.
META_GAME = b"spag.game"
SCORED_SAMPLE_SCHEMA = pa.schema([*SAMPLE_FIELDS, REF_LOGPROB_FIELD])


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success.

    On any exception the temporary file (or folder) is removed, so a half-written
    output never appears under its final name and an older complete file is kept.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{final.name}.", suffix=suffix or ".tmp", dir=final.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.chmod(0o644)  # mkstemp makes it private
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


# Written into every folder output (models): each file's size, so that a file lost or
# cut later is noticed by the step that reads the folder (spag.generation.base).
MANIFEST = "spag_manifest.json"


def file_sizes(folder: str | os.PathLike, leave_out: str) -> dict[str, int]:
    """Every file under ``folder`` (but ``leave_out``) by relative path, with its size."""
    root = Path(folder)
    return {
        p.relative_to(root).as_posix(): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != leave_out
    }


def size_problem(folder: str | os.PathLike, files: dict[str, int]) -> str | None:
    """The first listed file missing or of another size than listed (None: all as listed)."""
    root = Path(folder)
    for name, size in files.items():
        p = root / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != size:
            return f"{name} has {p.stat().st_size} bytes, {size} were written"
    return None


def write_manifest(folder: str | os.PathLike) -> None:
    files = file_sizes(folder, leave_out=MANIFEST)
    (Path(folder) / MANIFEST).write_text(json.dumps({"files": files}, indent=1) + "\n")


def manifest_problem(folder: str | os.PathLike) -> str | None:
    """What differs from the folder's manifest (None: as written, or no manifest)."""
    root = Path(folder)
    try:
        text = (root / MANIFEST).read_text()
    except FileNotFoundError:
        return None  # a folder this project did not write (a user's local model)
    try:
        files = json.loads(text)["files"]
    except (ValueError, KeyError, TypeError):
        return f"{MANIFEST} unreadable"
    return size_problem(root, files)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Like :func:`atomic_path` for a folder: built under a temporary name, then renamed
    (with its manifest)."""
    import shutil

    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    # A build killed earlier left its folder (gigabytes for a large model): only one job
    # writes an output at a time, so any such folder is a dead one.
    for stale in final.parent.glob(f".{glob.escape(final.name)}.*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is shared like any output
    try:
        yield tmp
        write_manifest(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's content, read in blocks (hex digest)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Write ``table`` to ``path`` atomically."""
    with atomic_path(path, suffix=".parquet.tmp") as tmp:
        pq.write_table(table, tmp)


def read_parquet(path: str | os.PathLike, what: str = "table") -> pa.Table:
    """Read a Parquet file, turning I/O and format errors into :class:`SpagInputError`."""
    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"{what} file not found: {p}")
    try:
        # ParquetFile, not read_table: read_table imports pyarrow.dataset, which imports
        # pandas (most of a second), and a path here is always a single file.
        return pq.ParquetFile(p).read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise SpagInputError(f"{p}: not a readable Parquet {what}: {exc}") from exc


def require_columns(table: pa.Table, fields: list[pa.Field], path: str | os.PathLike) -> pa.Table:
    """Check that ``table`` has ``fields`` with compatible types; cast them to the contract.

    Raises :class:`SpagInputError` naming the file and the missing or mistyped column.
    """
    for field in fields:
        if field.name not in table.column_names:
            raise SpagInputError(f"{path}: missing column '{field.name}'")
        col = table.column(field.name)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SpagInputError(
                    f"{path}: column '{field.name}' has type {col.type}, expected {field.type}"
                ) from exc
            table = table.set_column(table.schema.get_field_index(field.name), field.name, col)
    return table
