"""The self-play game loop, shared by every generation backend.

All games of a shard advance together, message by message: at each step the
prompts of every unfinished game are built, grouped by the model that speaks
next, and sent to that model's backend as one batch. A game leaves the batch as
soon as the game says it is over (:meth:`spag.game.base.Game.end_reason`; at the
latest after 2T messages).

Self-play games pair a model with itself; evaluation games pair it with an
opponent, twice per secret (the model in the first role, then in the second).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spag.data.tables import EPISODE_FIELDS
from spag.game.base import Game
from spag.game.settings import GameSettings
from spag.generation.base import Backend, derive_seed
from spag.generation.settings import Sampling

log = logging.getLogger(__name__)

POLICY = "policy"
OPPONENT = "opponent"

METADATA_FIELDS = [
    pa.field("epoch", pa.int64()),
    pa.field("shard", pa.int64()),
    pa.field("seed", pa.int64()),
    pa.field("attacker_model", pa.string()),
    pa.field("defender_model", pa.string()),
    pa.field("policy_role", pa.string()),
    pa.field("num_generated_tokens", pa.int64()),
    pa.field("message_tokens", pa.list_(pa.int64())),
    pa.field("empty_replies", pa.int64()),
    pa.field("truncated_replies", pa.int64()),
    pa.field("truncated_prompts", pa.int64()),
    pa.field("end_reason", pa.string()),
]
SHARD_SCHEMA = pa.schema([*EPISODE_FIELDS, *METADATA_FIELDS])


@dataclass(frozen=True)
class GameSpec:
    """Who plays which game: ``players`` maps each role to a backend key (policy or
    opponent; the policy plays every role not named); ``target_word`` is the secret."""

    episode_id: str
    target_word: str
    players: Mapping[str, str] = field(default_factory=dict)
    policy_role: str | None = None

    def player(self, role: str) -> str:
        return self.players.get(role, POLICY)


@dataclass
class GameState:
    """A game in progress and its bookkeeping."""

    spec: GameSpec
    history: list[dict[str, str]] = field(default_factory=list)
    message_tokens: list[int] = field(default_factory=list)
    empty_replies: int = 0
    truncated_replies: int = 0
    truncated_prompts: int = 0
    end_reason: str | None = None


def shard_seed(run_seed: int, epoch: int, shard_index: int) -> int:
    """The seed of one shard job: derived from the run seed, the epoch and the shard index."""
    return derive_seed("shard", run_seed, epoch, shard_index)


def selfplay_specs(
    words: Sequence[str], epoch: int, shard_index: int, games_per_word: int
) -> list[GameSpec]:
    """``games_per_word`` self-play games per word, ids unique across a run."""
    return [
        GameSpec(episode_id=f"e{epoch}-s{shard_index:03d}-{w}-{k}", target_word=w)
        for w in words
        for k in range(games_per_word)
    ]


def evaluation_specs(
    words: Sequence[str],
    epoch: int,
    shard_index: int,
    game: Game,
    games_per_role: int = 1,
) -> list[GameSpec]:
    """Games against the opponent, the model in each role in turn: one per secret and
    role (greedy games), or ``games_per_role`` (sampled games, ids ending ``-k``)."""
    specs = []
    for w in words:
        for role in game.roles:
            players = {r: POLICY if r == role else OPPONENT for r in game.roles}
            base = f"e{epoch}-eval-s{shard_index:03d}-{w}-{role}"
            ids = [base] if games_per_role == 1 else [f"{base}-{k}" for k in range(games_per_role)]
            specs += [GameSpec(i, w, players, role) for i in ids]
    return specs


Progress = Callable[[int, int], None]  # (games finished since last call, tokens generated)
Finished = Callable[[list[GameState]], None]  # the games that ended at this message


def play_games(
    specs: Sequence[GameSpec],
    backends: Mapping[str, Backend],
    prompts: Any,
    *,
    sampling: Sampling,
    seed: int,
    max_turns: int = GameSettings.max_turns,
    progress: Progress | None = None,
    done: Mapping[str, GameState] | None = None,
    on_finished: Finished | None = None,
    game: Game,
) -> list[GameState]:
    """Play all ``specs`` to the end, turn by turn in one batch; return them in spec order.

    ``backends`` maps the keys used in the specs (``policy``, ``opponent``) to
    backends; ``prompts`` are the game's (:meth:`Game.load_prompts`); every reply is
    drawn as ``sampling`` says. Each generate call's seed derives from ``seed``, the message index
    and the speaking model, and each game's from that and its id, so the same shard
    replays identically, whichever of its games play together. Games in ``done``
    (finished earlier, by episode id) are taken as they are; ``on_finished`` is told of
    every game as it ends (``spag.ops.journal``).
    """
    done = done or {}
    games = [done.get(spec.episode_id) or GameState(spec) for spec in specs]
    active = [g for g in games if g.spec.episode_id not in done]
    if progress is not None and len(active) < len(games):
        progress(len(games) - len(active), 0)
    max_messages = 2 * max_turns
    started = time.perf_counter()
    total_tokens = 0
    for turn in range(max_messages):
        if not active:
            break
        role = game.roles[turn % 2]
        groups: dict[str, list[GameState]] = {}
        for g in active:
            groups.setdefault(g.spec.player(role), []).append(g)
        log.info("message %d/%d (%s): %d games playing", turn + 1, max_messages, role, len(active))
        turn_tokens = 0
        for key in sorted(groups):
            batch = groups[key]
            texts = [
                game.play_prompt(prompts, g.history, role, g.spec.target_word, max_turns)
                for g in batch
            ]
            replies = backends[key].generate(
                texts,
                sampling,
                seed=derive_seed(seed, turn, key),
                game_ids=[g.spec.episode_id for g in batch],
            )
            if len(replies) != len(batch):
                raise RuntimeError(
                    f"backend '{key}' returned {len(replies)} replies for {len(batch)} prompts"
                )
            for g, r in zip(batch, replies, strict=True):
                g.history.append({"role": role, "content": r.text})
                g.message_tokens.append(r.num_tokens)
                g.empty_replies += not r.text
                g.truncated_replies += not r.finished_by_eos
                g.truncated_prompts += r.prompt_truncated
                turn_tokens += r.num_tokens
        total_tokens += turn_tokens
        still = []
        for g in active:
            g.end_reason = game.end_reason(g.history, g.spec.target_word, max_turns)
            if g.end_reason is None:
                still.append(g)
            elif turn + 1 < max_messages:
                _release(backends, g.spec.episode_id)
        finished = len(active) - len(still)
        if on_finished is not None and finished:
            on_finished([g for g in active if g.end_reason is not None])
        elapsed = max(time.perf_counter() - started, 1e-9)
        log.info(
            "message %d/%d done: %d games finished, %d still playing, %.0f tokens/s",
            turn + 1,
            max_messages,
            finished,
            len(still),
            total_tokens / elapsed,
        )
        active = still
        if progress is not None:
            progress(finished, turn_tokens)
    for g in games:
        _release(backends, g.spec.episode_id)
    return games


def _release(backends: Mapping[str, Backend], episode_id: str) -> None:
    for backend in backends.values():
        release = getattr(backend, "release", None)
        if release is not None:
            release([episode_id])


def games_table(
    games: Sequence[GameState],
    *,
    max_turns: int,
    epoch: int,
    shard: int,
    seed: int,
    model_names: Mapping[str, str],
    game: Game,
) -> pa.Table:
    """The shard table: episode contract columns plus metadata (schema :data:`SHARD_SCHEMA`);
    ``attacker_model``/``defender_model`` name the players of the first and second role."""
    rows: dict[str, list] = {f.name: [] for f in SHARD_SCHEMA}
    for g in games:
        rows["episode_id"].append(g.spec.episode_id)
        rows["target_word"].append(g.spec.target_word)
        rows["max_turns"].append(max_turns)
        rows["history"].append([{"role": m["role"], "content": m["content"]} for m in g.history])
        rows["epoch"].append(epoch)
        rows["shard"].append(shard)
        rows["seed"].append(seed)
        rows["attacker_model"].append(model_names[g.spec.player(game.roles[0])])
        rows["defender_model"].append(model_names[g.spec.player(game.roles[1])])
        rows["policy_role"].append(g.spec.policy_role)
        rows["num_generated_tokens"].append(sum(g.message_tokens))
        rows["message_tokens"].append(list(g.message_tokens))
        rows["empty_replies"].append(g.empty_replies)
        rows["truncated_replies"].append(g.truncated_replies)
        rows["truncated_prompts"].append(g.truncated_prompts)
        rows["end_reason"].append(g.end_reason)
    return pa.table(rows, schema=SHARD_SCHEMA)
