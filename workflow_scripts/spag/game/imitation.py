"""Imitation samples (docs/design.md section 3): M0 imitates demonstration games (the
winner's messages of decisive games, or with ``data.scripted.imitate: every`` every
message of games nobody broke), then instruction rows as they are. The inputs are read
by :mod:`spag.data.imitation`; the table is built by :mod:`spag.game.samples`.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.episodes import Episode, check_columns, is_judged, iter_episodes
from spag.game.samples import SampleRows, game_rows, validate_sft


def _imitate(
    game: Game, episode: Episode, outcome: str, n: int, settings: Any
) -> list[tuple[int, float]]:
    # Imitation: the winner's messages among the first n (section 3), reward 1.0 each.
    winner = game.winner(outcome)
    return [(k, 1.0) for k in range(n) if episode.history[k]["role"] == winner]


def _imitate_every(
    game: Game, episode: Episode, outcome: str, n: int, settings: Any
) -> list[tuple[int, float]]:
    # Every message of a game nobody broke, reward 1.0 each: the demonstrator's policy
    # itself (a loser's moves too: Kuhn Poker's fold is never a winner's move).
    return [] if game.rule_breaker(outcome) else [(k, 1.0) for k in range(n)]


# Which messages of demonstration games M0 imitates (config data.scripted.imitate).
IMITATE = {"winners": _imitate, "every": _imitate_every}


def imitation_samples(
    episodes_table: pa.Table | None = None,
    instructions: pa.Table | None = None,
    *,
    seed: int,
    prompts: Any = None,
    source: str,
    instructions_source: str = "instructions",
    both_roles_key: str | None = None,
    game: Game,
    imitate: str,
) -> pa.Table:
    """Imitation data: the winner's messages of decisive demonstration games (with
    ``imitate="every"``: every message of every game without a rule break), type
    ``game``, reward 1.0, weight 1.0, randomised prompts; then instruction rows
    (``query``/``target``) as they are (type ``sft``, reward 1.0, weight 1.0).

    With ``both_roles_key`` (the config key that made the games, e.g. a teacher's),
    games won by only one role are refused naming it: M0 would never see the other
    role won.
    """
    samples = SampleRows()
    if episodes_table is not None:
        judged = is_judged(episodes_table)
        table = check_columns(episodes_table, source, judged)
        episodes = iter_episodes(table, source, judged, game=game)
        prompts = prompts if prompts is not None else game.load_prompts()
        rand = random.Random(seed).random
        if imitate not in IMITATE:
            raise SpagInputError(f"imitate {imitate!r}: choose one of {', '.join(IMITATE)}")
        sampled, outcomes = game_rows(
            game, episodes, prompts, rand, IMITATE[imitate], lambda r: 1.0, samples
        )
        counts = ", ".join(f"{o} {outcomes.count(o)}" for o in sorted(set(outcomes)))
        if not sampled:
            # Never a silent empty imitation set (e.g. a teacher whose games all tie).
            raise SpagInputError(
                f"{source}: no decisive game among {len(outcomes)} ({counts}): "
                "no demonstrations to imitate"
            )
        missing = [r for r in game.roles if not sampled.get(r)]
        if both_roles_key and missing:
            raise SpagInputError(
                f"{source}: no game won by the {missing[0]} among {len(outcomes)} ({counts}): "
                f"M0 would never imitate the {missing[0]}; key '{both_roles_key}': play more "
                "games per word, sample at another temperature, or choose a stronger player"
            )
    if instructions is not None:
        samples.add_sft(*validate_sft(instructions, instructions_source))
    return samples.table(game)
