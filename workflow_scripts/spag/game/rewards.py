"""Rewards of self-play games (docs/design.md section 3): the schemes by name and the
samples table of an epoch.

A reward scheme (config ``rewards.scheme``) turns one judged game into samples: which
messages are learned from and with what reward, ``(game, episode, outcome, n, settings)
-> [(message index, reward)]`` with ``settings`` the config's ``rewards`` section
(:class:`RewardsSettings`: a scheme's own setting is one more field there).
:data:`REWARD_SCHEMES` registers them with the settings each reads;
``winners`` is the paper's: the winner's k-th message gets the coefficient
``(1/decay)^k`` (built by repeated multiplication), divided by the sum over the
winner's messages of that game. Each role's samples are then weighted so that the
roles carry half of the total weight each (``role_weights``).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from spag.errors import SpagInputError
from spag.game.base import Game
from spag.game.episodes import Episode, check_columns, is_judged, iter_episodes
from spag.game.samples import SampleRows, game_rows, validate_sft
from spag.settings import Checked, config_options, opt


def winners(
    game: Game, episode: Episode, outcome: str, n: int, settings: RewardsSettings
) -> list[tuple[int, float]]:
    """The paper's scheme: the winner's messages of a decisive game, discounted and
    normalised to sum to 1; nothing from ties and rule breaks."""
    winner = game.winner(outcome)
    if winner is None:
        return []
    # The reference multiplies a total reward of 1.0 by the share.
    return _discounted(episode, winner, n, settings.decay_weight, 1.0)


def _discounted(
    episode: Episode, role: str, n: int, decay_weight: float, result: float
) -> list[tuple[int, float]]:
    """``role``'s messages among the first n: its k-th gets ``(1/decay_weight)^k`` (by
    repeated multiplication, as the reference), normalised to sum to 1, times ``result``."""
    turns = [k for k in range(n) if episode.history[k]["role"] == role]
    coeffs, coeff = [], 1.0
    for _ in turns:
        coeff *= 1.0 / decay_weight
        coeffs.append(coeff)
    total = 0.0
    for c in coeffs:
        total += c
    return [(k, result * c / total) for k, c in zip(turns, coeffs, strict=True)]


def zero_sum(
    game: Game, episode: Episode, outcome: str, n: int, settings: RewardsSettings
) -> list[tuple[int, float]]:
    """Both players learn from every game: each role's messages get the paper's
    discounted, normalised shares of that role's signed result (``Game.result``: chips
    in Kuhn Poker, +1/-1 in Taboo, a rule break losing), so a loser's moves are pushed
    down; a role whose result is 0 (a tie) gives no samples. Asked in the research
    code's issue #12, where it did not converge for its authors at 7B."""
    picked = []
    for role in game.roles:
        result = game.result(outcome, role)
        if result == 0:
            continue
        picked += _discounted(episode, role, n, settings.decay_weight, result)
    return sorted(picked)


@dataclass
class RoleBaselines:
    """``rae``'s baselines: per role, an exponential moving average of that role's results
    over the games in order, carried from epoch to epoch (``save``/``load``)."""

    decay: float
    values: dict[str, float] = field(default_factory=dict)
    games: dict[str, int] = field(default_factory=dict)

    def advantage(self, role: str, result: float) -> float:
        """Fold ``result`` into ``role``'s baseline, then return the result minus it (the
        order of SPIRAL's Algorithm 1: the game's own result is in the baseline)."""
        b = self.decay * self.values.get(role, 0.0) + (1.0 - self.decay) * result
        self.values[role] = b
        self.games[role] = self.games.get(role, 0) + 1
        return result - b

    def save(self, path: str | Path) -> None:
        from spag.data.tables import atomic_path

        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(
                {"decay": self.decay, "values": self.values, "games": self.games},
                indent=1, sort_keys=True,
            ) + "\n")  # fmt: skip

    @classmethod
    def load(cls, path: str | Path, decay: float) -> RoleBaselines:
        """The baselines an earlier epoch left in ``path``, refused naming the file where it
        is not one or was kept under another decay."""
        try:
            data = json.loads(Path(path).read_text())
            values = {str(k): float(v) for k, v in data["values"].items()}
            games = {str(k): int(v) for k, v in data["games"].items()}
            kept = float(data["decay"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SpagInputError(f"{path}: not a file of role baselines ({exc})") from None
        if kept != decay:
            raise SpagInputError(
                f"{path}: baselines kept with rewards.baseline_decay {kept:g}, this epoch "
                f"asks {decay:g}: rerun from the first epoch with one decay"
            )
        return cls(decay, values, games)


def rae(
    game: Game,
    episode: Episode,
    outcome: str,
    n: int,
    settings: RewardsSettings,
    *,
    baselines: RoleBaselines,
) -> list[tuple[int, float]]:
    """Role-conditioned advantages (SPIRAL's RAE): each role's zero-sum result (as
    ``zero_sum``; ``rule_break_cost`` replaces the game's own cost of a rule break) minus
    that role's baseline, given as the paper's discounted, normalised shares over the
    role's messages. Every game moves the ``baselines`` (the state ``assign_rewards``
    carries from epoch to epoch); with ``drop_zero_advantage`` a role whose advantage is
    0 gives no samples."""
    rule_break_cost = settings.rule_break_cost
    breaker = game.rule_breaker(outcome)
    picked = []
    for role in game.roles:
        result = game.result(outcome, role)
        if breaker is not None and rule_break_cost is not None:
            result = -rule_break_cost if role == breaker else rule_break_cost
        advantage = baselines.advantage(role, result)
        if advantage == 0 and settings.drop_zero_advantage:
            continue
        picked += _discounted(episode, role, n, settings.decay_weight, advantage)
    return sorted(picked)


@dataclass(frozen=True)
class Scheme:
    """A registered scheme: ``pick`` turns one judged game into samples; ``keys`` names
    the ``rewards`` keys (fields of :class:`RewardsSettings`) it reads besides ``scheme``
    and ``control``: the config refuses the others set off their defaults."""

    pick: Callable[..., list[tuple[int, float]]]
    keys: tuple[str, ...] = ("decay_weight",)


REWARD_SCHEMES: dict[str, Scheme] = {
    "winners": Scheme(winners),
    "zero_sum": Scheme(zero_sum),
    # Its baselines and options are bound by assign_rewards.
    "rae": Scheme(
        rae, ("decay_weight", "baseline_decay", "drop_zero_advantage", "rule_break_cost")
    ),
}


@dataclass(frozen=True, kw_only=True)
class RewardsSettings(Checked):
    """How self-play games are turned into rewards (config ``rewards``)."""

    scheme: str = opt(
        "winners",
        "reward scheme: a name registered in spag/game/rewards.py REWARD_SCHEMES; winners "
        "is the paper's, the winner's messages of decisive games",
        choices=REWARD_SCHEMES,
    )
    decay_weight: float = opt(
        0.8,
        "the decay of section 3: a message k turns before the end gets (1/decay_weight)^k "
        "before the rewards are normalised",
        gt=0,
    )
    baseline_decay: float = opt(
        0.95,
        "rae: decay of each role's baseline, an exponential moving average of that role's "
        "results over the games in order, carried from epoch to epoch",
        gt=0,
        lt=1,
    )
    drop_zero_advantage: bool = opt(
        False, "rae: a role whose advantage in a game is 0 gives no samples of that game"
    )
    rule_break_cost: float | None = opt(
        None,
        "rae: what a rule break costs its breaker (and gives the other role); null: the "
        "game's own cost (1)",
        ge=0,
    )
    control: bool = opt(
        False,
        "control arm: the game samples weigh 0, so the SPAG step trains the rest of its "
        "objective alone (offline_po: the SFT term; its KL penalty acts only on game "
        "samples) with the same instruction rows and seeds (epoch 1: the same games, "
        "batches and steps; later epochs play the control's own models); run it in its "
        "own folder (snakemake --directory) beside the SPAG run and compare them with "
        "spag compare-arms",
    )


def rewards_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """``spag assign-rewards``'s settings from a validated config (``{"decay_weight": 0.8,
    "scheme": "winners", "control": False}``); the rule adds the files and the epoch's
    seed."""
    return config_options(RewardsSettings, config["rewards"])


def role_weights(games: Mapping[str, int], game: Game) -> dict[str, float]:
    """Per-role sample weight: ``N / (2 N_role)`` with ``N_role`` (``games[role]``) the
    games that gave samples of that role (the winners' under ``winners``) and N their
    sum; 0 for a role without samples."""
    n = sum(games.get(r, 0) for r in game.roles)
    return {r: n / (2 * games[r]) if games.get(r, 0) > 0 else 0.0 for r in game.roles}


def assign_rewards(
    episodes_table: pa.Table,
    settings: RewardsSettings | None = None,
    *,
    seed: int,
    prompts: Any = None,
    sft: pa.Table | None = None,
    source: str,
    sft_source: str = "sft data",
    game: Game,
    baselines: RoleBaselines | None = None,
) -> pa.Table:
    """Build the samples table (``SAMPLE_SCHEMA``) from the episodes' verdicts: those a
    judged table stores (``outcome``, ``num_messages``: the merge step's), else the
    game's judge's.

    Game rows come in episode order, then message order; SFT rows follow.
    The randomised prompts depend only on ``seed`` and the input. ``source`` and
    ``sft_source`` name the inputs in error messages. ``settings`` is the config's
    ``rewards`` section (default: its defaults, the paper's scheme). With ``control``
    every game row weighs 0: the table, hence the trainer's batches and steps, is the one
    SPAG would train on, but nothing is learned from the games. ``rae`` reads and moves
    ``baselines`` (the previous epoch's, or new ones at 0).
    """
    settings = settings if settings is not None else RewardsSettings()
    if settings.scheme not in REWARD_SCHEMES:
        raise SpagInputError(
            f"rewards.scheme: unknown scheme {settings.scheme!r} "
            f"(known: {', '.join(REWARD_SCHEMES)})"
        )
    judged = is_judged(episodes_table)
    table = check_columns(episodes_table, source, judged)
    sft_cols = validate_sft(sft, sft_source) if sft is not None else None
    prompts = prompts if prompts is not None else game.load_prompts()
    samples = SampleRows()
    rand = random.Random(seed).random
    episodes = iter_episodes(table, source, judged, game=game)
    pick = REWARD_SCHEMES[settings.scheme].pick
    if pick is rae:
        if baselines is None:
            baselines = RoleBaselines(settings.baseline_decay)
        pick = functools.partial(rae, baselines=baselines)
    sampled, _ = game_rows(
        game,
        episodes,
        prompts,
        rand,
        pick,
        lambda r: 0.0,
        samples,
        settings,
    )
    # The role weights need every game's samples: set once they are all in.
    weights = role_weights(sampled, game)
    if settings.control:
        weights = dict.fromkeys(weights, 0.0)
    samples.columns["weight"] = [weights[r] for r in samples.columns["role"]]
    if sft_cols is not None:
        samples.add_sft(*sft_cols)
    return samples.table(game)
