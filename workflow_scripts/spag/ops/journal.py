"""The finished games of a shard, journaled as they end: no paid request is lost.

A shard is all-or-nothing for Snakemake: when its job fails or is killed, its output
is not written. For endpoint games every reply is a paid request, so ``spag play``
appends each game to a journal beside the output the moment it ends (JSON lines,
flushed and synced). A rerun of the same shard with the same settings takes the
journaled games as played and plays only the others; since a game's replies depend
only on its own seed, not on the games beside it, the shard file is the same as an
uninterrupted run's. The journal is removed once the shard is written.

The first line is a header with a fingerprint of everything that decides the games
(models, settings, words, prompts); a journal of other settings is discarded. A line
cut short by a kill is dropped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spag.game.selfplay import GameSpec, GameState

log = logging.getLogger(__name__)

# 2: a game's players by role (GameSpec.players)
JOURNAL_VERSION = 2


def journal_path(output: str | os.PathLike) -> Path:
    """Where the journal of the shard ``output`` lies: a hidden file beside it."""
    out = Path(output)
    return out.with_name(f".{out.name}.journal.jsonl")


def fingerprint(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _record(game: GameState) -> dict[str, Any]:
    return {
        "spec": dataclasses.asdict(game.spec),
        "history": game.history,
        "message_tokens": game.message_tokens,
        "empty_replies": game.empty_replies,
        "truncated_replies": game.truncated_replies,
        "truncated_prompts": game.truncated_prompts,
        "end_reason": game.end_reason,
    }


def _game(record: Mapping[str, Any]) -> GameState:
    return GameState(
        spec=GameSpec(**record["spec"]),
        history=[dict(m) for m in record["history"]],
        message_tokens=[int(n) for n in record["message_tokens"]],
        empty_replies=int(record["empty_replies"]),
        truncated_replies=int(record["truncated_replies"]),
        truncated_prompts=int(record["truncated_prompts"]),
        end_reason=record["end_reason"],
    )


class GameJournal:
    """Append-only record of a shard's finished games under one fingerprint."""

    def __init__(self, path: str | os.PathLike, key: str) -> None:
        self.path = Path(path)
        self.key = key
        self._ready = False  # the file holds our header and ends with a full line

    def load(self) -> dict[str, GameState]:
        """The games journaled under this fingerprint, by episode id (empty if none)."""
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        complete, cut = lines[:-1], lines[-1]
        games: dict[str, GameState] = {}
        try:
            header = json.loads(complete[0]) if complete else {}
        except ValueError:
            header = {}
        if header.get("journal") != JOURNAL_VERSION or header.get("key") != self.key:
            log.warning("%s: journal of other settings, discarded", self.path)
            self.path.unlink()
            return {}
        kept = [complete[0]]
        for line in complete[1:]:
            try:
                game = _game(json.loads(line))
            except (ValueError, KeyError, TypeError):
                log.warning("%s: unreadable journal line dropped", self.path)
                continue
            games[game.spec.episode_id] = game
            kept.append(line)
        if cut or len(kept) != len(complete):
            # A write cut short by a kill: keep the whole lines only.
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"\n".join(kept) + b"\n")
            os.replace(tmp, self.path)
        self._ready = True
        return games

    def append(self, games: Iterable[GameState]) -> None:
        """Journal finished games (flushed and synced before returning)."""
        lines = [json.dumps(_record(g), ensure_ascii=False) for g in games]
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._ready:
            header = json.dumps({"journal": JOURNAL_VERSION, "key": self.key})
            with open(self.path, "w", encoding="utf-8") as fh:
                fh.write(header + "\n")
            self._ready = True
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


# Flags that do not decide a shard's games: a journal written under other values of
# these still holds games of this shard.
NOT_IN_PLAY_KEY = {"output", "threads", "no_progress", "no_journal", "verbose", "device"}


def play_journal_key(args: Any, words: list[str]) -> str:
    """What decides a ``spag play`` shard's games: the flags, its words, the prompts and
    the models.

    Built from the parsed command line, flag by flag, so that a journal left by an
    earlier job with the same flags resumes; a flag at its default is left out, so that
    one added by an upgrade (at its default) keeps the key of a killed shard's journal."""
    from spag.game.base import load_game
    from spag.game.play_settings import PlayConfig
    from spag.generation.openai_backend import is_endpoint_spec
    from spag.settings import off_default
    from spag.training.scoring import model_identity

    parts = off_default(
        PlayConfig,
        {
            k: v
            for k, v in sorted(vars(args).items())
            if not k.startswith("_") and k not in NOT_IN_PLAY_KEY
        },
    )
    parts["words"] = words
    prompts = Path(args.prompts or load_game(args.game).default_prompts_path())
    parts["prompts_sha256"] = hashlib.sha256(prompts.read_bytes()).hexdigest()
    for key in ("model", "opponent"):
        value = getattr(args, key)
        if value and not is_endpoint_spec(value):
            parts[f"{key}_identity"] = model_identity(value)
    return fingerprint(parts)


def open_play_journal(
    args: Any, words: list[str], output: str, total: int
) -> tuple[GameJournal, dict[str, GameState]]:
    """The journal of the ``spag play`` shard ``output`` and the games it already holds
    (logged when resuming)."""
    journal = GameJournal(journal_path(output), play_journal_key(args, words))
    done = journal.load()
    if done:
        log.info("resuming: %d of %d games were finished (%s)", len(done), total, journal.path)
    return journal, done
