"""Games of a game's scripted player (``Game.scripted_reply``) in every seat: M0's
demonstrations with ``data.imitation: scripted`` (Kuhn Poker: uniformly random legal
moves, legal and far from equilibrium). Deterministic in the seed; the table is the
self-play shards' (:data:`spag.game.selfplay.SHARD_SCHEMA`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.imitation import IMITATE
from spag.game.selfplay import POLICY, GameSpec, GameState, games_table
from spag.settings import Checked, opt

SCRIPTED_NAME = "scripted"


@dataclass(frozen=True, kw_only=True)
class ScriptedSettings(Checked):
    """M0's demonstrations played by the game's scripted player (config ``data.scripted``,
    with ``data.imitation: scripted``)."""

    games_per_secret: int = opt(100, "games per secret (per deal in Kuhn Poker)", ge=1)
    imitate: str = opt(
        "winners",
        'which moves M0 imitates: "winners": the winner\'s moves of decisive games, as of any '
        'demonstrations; "every": every move of every game without a rule break (M0 copies '
        "the scripted player: Kuhn Poker's loser folds too)",
        choices=IMITATE,
    )


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
