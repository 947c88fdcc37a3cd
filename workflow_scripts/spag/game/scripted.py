"""Games of a game's scripted player (``Game.scripted_reply``) in every seat: M0's
demonstrations with ``data.imitation: scripted`` (Kuhn Poker: uniformly random legal
moves, legal and far from equilibrium). Deterministic in the seed; the table is the
self-play shards' (:data:`spag.game.selfplay.SHARD_SCHEMA`)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pyarrow as pa

from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.selfplay import POLICY, GameSpec, GameState, games_table

SCRIPTED_NAME = "scripted"


def scripted_games(
    game: Game, secrets: Sequence[str], games_per_secret: int, seed: int, max_turns: int
) -> pa.Table:
    """``games_per_secret`` games per secret, the scripted player in every seat."""
    if game.scripted_reply is None:
        raise SpagInputError(
            f"key 'data.imitation': game {game.name!r} has no scripted player; "
            "give demonstration games or a teacher"
        )
    rng = random.Random(seed)
    games = []
    for secret in secrets:
        for k in range(games_per_secret):
            g = GameState(GameSpec(episode_id=f"scripted-{secret}-{k}", target_word=secret))
            for turn in range(2 * max_turns):
                role = game.roles[turn % 2]
                reply = game.scripted_reply(g.history, secret, rng)
                g.history.append({"role": role, "content": reply})
                g.message_tokens.append(0)  # nothing generated
                g.end_reason = game.end_reason(g.history, secret, max_turns)
                if g.end_reason is not None:
                    break
            games.append(g)
    return games_table(
        games, max_turns=max_turns, epoch=0, shard=0, seed=seed,
        model_names={POLICY: SCRIPTED_NAME}, game=game,
    )  # fmt: skip
