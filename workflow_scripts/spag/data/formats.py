"""Readers for the research code's JSON data formats.

Three kinds of file are understood, each as a JSON list of records or as JSON
Lines (one record a line):

- ``games``: Adversarial Taboo games, ``{"history": [{"role", "content"}, ...],
  "target_word": str, "max_turns": int}`` plus optional ``id``/``episode_id``,
  ``outcome`` and other keys (ignored). Read into the episodes contract.
- ``instructions``: ``{"query": str, "target": str}``.
- ``alpaca``: ``{"instruction": str, "input": str (optional), "output": str}``,
  turned into query/target with the Alpaca prompt layout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from spag.errors import SpagInputError

ROLES = ("attacker", "defender")

# The public Alpaca prompt layout (Stanford Alpaca), with and without an input.
ALPACA_PROMPT_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)

INSTRUCTION_SCHEMA = pa.schema([pa.field("query", pa.string()), pa.field("target", pa.string())])


def read_records(path: str | os.PathLike) -> list[Any]:
    """Read a JSON list or a JSON Lines file; return its records."""
    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"data file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpagInputError(f"{p}: not a UTF-8 text file ({exc})") from exc
    if not text.strip():
        raise SpagInputError(f"{p}: file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as whole_err:
        # Not one JSON document: try JSON Lines.
        records = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if lineno == 1:
                    raise SpagInputError(f"{p}: not JSON or JSON Lines: {whole_err}") from exc
                raise SpagInputError(f"{p}:{lineno}: bad JSON Lines record: {exc}") from exc
        return records
    if isinstance(data, dict):
        # A single JSON object on one line is JSON Lines with one record.
        return [data]
    if not isinstance(data, list):
        raise SpagInputError(f"{p}: expected a JSON list of records, got {type(data).__name__}")
    if not data:
        raise SpagInputError(f"{p}: no records")
    return data


def _kind_of(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    if "history" in record:
        return "games"
    if "query" in record and "target" in record:
        return "instructions"
    if "instruction" in record and "output" in record:
        return "alpaca"
    return None


def detect_format(path: str | os.PathLike) -> str:
    """Return ``"games"``, ``"instructions"`` or ``"alpaca"`` from the first record's keys."""
    records = read_records(path)
    kind = _kind_of(records[0])
    if kind is None:
        keys = sorted(records[0]) if isinstance(records[0], dict) else type(records[0]).__name__
        raise SpagInputError(
            f"{path}: record 0 is none of the known formats (games: 'history', 'target_word', "
            f"'max_turns'; instructions: 'query', 'target'; alpaca: 'instruction', 'input', "
            f"'output'); it has {keys}"
        )
    return kind


def _game_error(path, index: int, msg: str) -> SpagInputError:
    return SpagInputError(f"{path}: game {index}: {msg}")


def _episode_id(game: dict, index: int, path) -> str:
    for key in ("id", "episode_id"):
        if key in game and game[key] is not None:
            value = game[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
                raise _game_error(path, index, f"key '{key}' must be a non-empty string or int")
            return str(value)
    return f"demo-{index:05d}"


def _check_history(history: Any, index: int, path) -> list[dict[str, str]]:
    if not isinstance(history, list):
        raise _game_error(
            path, index, f"key 'history' must be a list, got {type(history).__name__}"
        )
    out = []
    for m, msg in enumerate(history):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise _game_error(
                path, index, f"history[{m}] must be an object with keys 'role' and 'content'"
            )
        role, content = msg["role"], msg["content"]
        expected = ROLES[m % 2]
        if role not in ROLES:
            raise _game_error(
                path, index, f"history[{m}] key 'role' is {role!r}, expected one of {ROLES}"
            )
        if role != expected:
            raise _game_error(
                path,
                index,
                f"history[{m}] key 'role' is {role!r}, expected {expected!r} "
                "(messages alternate, attacker first)",
            )
        if not isinstance(content, str):
            raise _game_error(path, index, f"history[{m}] key 'content' must be a string")
        out.append({"role": role, "content": content})
    return out


def load_games_json(path: str | os.PathLike) -> pa.Table:
    """Read games (JSON list or JSON Lines) into the episodes contract.

    Columns: the fields of :data:`spag.data.tables.EPISODE_FIELDS`, plus ``outcome`` when
    any game carries one (informative only: the judge decides downstream). Errors
    name the file, the game index and the key.
    """
    from spag.data.tables import EPISODE_FIELDS
    from spag.data.words import check_word

    records = read_records(path)
    ids, words, turns, histories, outcomes = [], [], [], [], []
    first_index: dict[str, int] = {}
    for i, game in enumerate(records):
        if not isinstance(game, dict):
            raise _game_error(path, i, f"expected an object, got {type(game).__name__}")
        for key in ("history", "target_word", "max_turns"):
            if key not in game:
                raise _game_error(path, i, f"missing key '{key}'")
        word = game["target_word"]
        if not isinstance(word, str):
            raise _game_error(path, i, "key 'target_word' must be a string")
        word = check_word(word.strip().lower(), f"{path}: game {i}: key 'target_word'")
        max_turns = game["max_turns"]
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise _game_error(
                path, i, f"key 'max_turns' must be an integer >= 1, got {max_turns!r}"
            )
        episode_id = _episode_id(game, i, path)
        if episode_id in first_index:
            raise _game_error(
                path, i, f"episode id {episode_id!r} repeats game {first_index[episode_id]}"
            )
        first_index[episode_id] = i
        outcome = game.get("outcome")
        if outcome is not None and not isinstance(outcome, str):
            raise _game_error(path, i, "key 'outcome' must be a string")
        ids.append(episode_id)
        words.append(word)
        turns.append(max_turns)
        histories.append(_check_history(game["history"], i, path))
        outcomes.append(outcome)
    schema = pa.schema(EPISODE_FIELDS)
    columns = [ids, words, turns, histories]
    if any(o is not None for o in outcomes):
        schema = schema.append(pa.field("outcome", pa.string()))
        columns.append(outcomes)
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def alpaca_query(instruction: str, input_text: str = "") -> str:
    """The Alpaca prompt for one record (the no-input layout when ``input`` is blank)."""
    if input_text.strip():
        return ALPACA_PROMPT_INPUT.format(instruction=instruction, input=input_text)
    return ALPACA_PROMPT_NO_INPUT.format(instruction=instruction)


def _text(record: dict, key: str, index: int, path, *, required: bool = True) -> str:
    if key not in record or record[key] is None:
        if required:
            raise SpagInputError(f"{path}: record {index}: missing key '{key}'")
        return ""
    value = record[key]
    if not isinstance(value, str):
        raise SpagInputError(
            f"{path}: record {index}: key '{key}' must be a string, got {type(value).__name__}"
        )
    return value


def load_instructions_json(path: str | os.PathLike) -> pa.Table:
    """Read instruction data into a ``query``/``target`` table.

    Accepts a JSON list or JSON Lines of ``{query, target}`` records or of Alpaca
    records ``{instruction, input, output}`` (formatted with the Alpaca layout).
    The format is decided by the first record; every record must follow it.
    Targets are stripped of surrounding white space; an empty query or target is
    an error naming the record.
    """
    kind = detect_format(path)
    if kind == "games":
        raise SpagInputError(
            f"{path}: holds games (key 'history'), not instruction data; "
            "use 'spag imitation-samples' for demonstration games"
        )
    records = read_records(path)
    queries, targets = [], []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise SpagInputError(f"{path}: record {i}: expected an object")
        if kind == "instructions":
            query, target = _text(rec, "query", i, path), _text(rec, "target", i, path)
            key_q, key_t = "query", "target"
        else:
            instruction = _text(rec, "instruction", i, path)
            if not instruction.strip():
                raise SpagInputError(f"{path}: record {i}: key 'instruction' is empty")
            query = alpaca_query(instruction, _text(rec, "input", i, path, required=False))
            target = _text(rec, "output", i, path)
            key_q, key_t = "instruction", "output"
        target = target.strip()
        if not query.strip():
            raise SpagInputError(f"{path}: record {i}: key '{key_q}' is empty")
        if not target:
            raise SpagInputError(f"{path}: record {i}: key '{key_t}' is empty")
        queries.append(query)
        targets.append(target)
    return pa.table(
        [pa.array(queries, pa.string()), pa.array(targets, pa.string())],
        schema=INSTRUCTION_SCHEMA,
    )


def load_instructions(path: str | os.PathLike) -> pa.Table:
    """Instruction data from JSON/JSON Lines or from a Parquet file with query/target."""
    p = Path(path)
    if p.is_file():
        with p.open("rb") as fh:
            is_parquet = fh.read(4) == b"PAR1"
        if is_parquet:
            from spag.data.tables import read_parquet, require_columns

            table = read_parquet(p, what="instruction data")
            table = require_columns(table, list(INSTRUCTION_SCHEMA), p)
            return table.select(["query", "target"])
    return load_instructions_json(p)


def sample_rows(table: pa.Table, max_rows: int | None, seed: int) -> pa.Table:
    """A seeded sample of at most ``max_rows`` rows, in the original order."""
    import random

    if max_rows is None or max_rows >= table.num_rows:
        return table
    if max_rows < 1:
        raise SpagInputError(f"--max-rows must be >= 1 (got {max_rows})")
    keep = sorted(random.Random(seed).sample(range(table.num_rows), max_rows))
    return table.take(pa.array(keep, pa.int64()))
