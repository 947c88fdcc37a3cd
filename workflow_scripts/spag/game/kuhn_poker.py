"""Kuhn Poker, one hand, through the :class:`spag.game.base.Game` protocol.

Rules: :mod:`spag.evaluation.kuhn`. Roles ``first`` and ``second`` act in turn, the
first player first; a hand has 2 or 3 moves. The secret a hand is dealt is its deal,
two letters: the first player's card, then the second's (``"kq"``); each seat's
prompt shows its own card only.

A reply's move is the first of the words check, bet, call and fold it contains (any
case). A reply that names no move, or a move that is not legal at that point, breaks
the rules: the hand ends and its author loses its ante (1 chip). Outcomes name the
winner and the chips won; the result of an outcome is the chips each seat won.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spag.errors import SpagInputError
from spag.evaluation.kuhn import CARDS, DEALS, INFOSETS, InfoSet, legal_moves, payoff, to_act
from spag.game.prompts import PromptsFile, placeholders

FIRST, SECOND = "first", "second"
MOVE = re.compile(r"\b(check|bet|call|fold)\b", re.IGNORECASE)
FIRST_BROKE_RULES = "first_broke_rules"
SECOND_BROKE_RULES = "second_broke_rules"
UNFINISHED = "unfinished"  # the messages ran out before the hand ended
# Outcomes by (winner, chips): every way a hand can end.
WINS = {(seat, chips): f"{seat}_wins_{chips}" for seat in (FIRST, SECOND) for chips in (1, 2)}

# Why a hand ended (recorded per episode).
END_FINISHED = "finished"
END_RULE_BREAK = "rule_break"
END_MAX_TURNS = "max_turns"


def deal_name(deal: tuple[str, str]) -> str:
    """``("K", "Q")`` -> ``"kq"``: a deal as a secret."""
    return "".join(deal).lower()


def parse_deal(secret: str) -> tuple[str, str]:
    """``"kq"`` -> ``("K", "Q")``: the first player's card, then the second's."""
    deal = tuple(secret.upper())
    if len(deal) != 2 or deal[0] == deal[1] or not set(deal) <= set(CARDS):
        raise SpagInputError(f"{secret!r} is not a Kuhn Poker deal (two of J, Q, K, e.g. 'kq')")
    return deal  # type: ignore[return-value]


def read_move(text: str) -> str | None:
    """The move a reply names (its first move word, lower-cased), or None."""
    found = MOVE.search(text)
    return found.group(1).lower() if found else None


def play_hand(history: Sequence[Mapping[str, str]]) -> tuple[tuple[str, ...], str | None]:
    """The legal moves of the messages in order, and the seat that broke the rules (its
    message ends the hand), or None."""
    moves: tuple[str, ...] = ()
    for message in history:
        seat = to_act(moves)
        if seat is None:
            break
        move = read_move(message["content"])
        if move not in legal_moves(moves):
            return moves, seat
        moves = (*moves, move)
    return moves, None


def judge_hand(
    history: Sequence[Mapping[str, str]], secret: str, max_turns: int
) -> tuple[str, int]:
    """``(outcome, n)``: how the hand ended and at which message."""
    moves, breaker = play_hand(history)
    if breaker is not None:
        return (FIRST_BROKE_RULES if breaker == FIRST else SECOND_BROKE_RULES), len(moves) + 1
    if to_act(moves) is not None:
        return UNFINISHED, len(moves)
    chips = payoff(parse_deal(secret), moves)
    return WINS[(FIRST if chips > 0 else SECOND, abs(chips))], len(moves)


@dataclass(frozen=True)
class KuhnPrompts:
    """The prompt texts of one Kuhn Poker prompts file."""

    path: str
    play: Mapping[str, str]
    rules: Sequence[str]
    instructions: Sequence[str]
    history_titles: Sequence[str]
    started: Sequence[str]
    cue: str


_PLACEHOLDERS = frozenset({"seat", "card", "moves"})


def load_kuhn_prompts(path: str | Path) -> KuhnPrompts:
    """Read and check a Kuhn Poker prompts file, naming the file and key on error."""
    c = PromptsFile.read(path)

    def instruction(key: str, text: str | None = None) -> str:
        text = c.text(key, _PLACEHOLDERS, text)
        if not {"card", "moves"} <= placeholders(text):
            raise SpagInputError(
                f"{c.path}: key '{key}' must show the seat's {{card}} and {{moves}}"
            )
        return text

    play = {k: c.text(f"play.{k}") for k in ("rules", "history_title", "started", "cue")}
    play["instruction"] = instruction("play.instruction")
    instructions = c.texts("training.instructions", _PLACEHOLDERS)
    for i, text in enumerate(instructions):
        instruction(f"training.instructions[{i}]", text)
    return KuhnPrompts(
        path=c.path,
        play=play,
        rules=c.texts("training.rules"),
        instructions=instructions,
        history_titles=c.texts("training.history_titles"),
        started=c.texts("training.started"),
        cue=c.text("training.cue"),
    )


def _lines(history: Sequence[Mapping[str, str]]) -> str:
    return "".join(f"\n  - {m['role']}: {m['content']}" for m in history)


def random_legal_reply(
    history: Sequence[Mapping[str, str]], secret: str, rng: random.Random
) -> str:
    """The scripted player: a uniformly random legal move, whatever its card (legal,
    far from equilibrium: exploitability 11/24)."""
    moves, _ = play_hand(history)
    return rng.choice(legal_moves(moves))


def infoset_prompt(infoset: InfoSet) -> tuple[list[dict[str, str]], str, str]:
    """An information set as play shows it: ``(history, role, secret)`` with the moves
    so far as messages of the bare move words, and a deal that gives the seat its card
    (the other card is never shown to it)."""
    seat, card, moves = infoset
    other = next(c for c in CARDS if c != card)
    deal = (card, other) if seat == FIRST else (other, card)
    history = [{"role": (FIRST, SECOND)[i % 2], "content": m} for i, m in enumerate(moves)]
    return history, seat, deal_name(deal)


class KuhnPoker:
    """Kuhn Poker through the :class:`spag.game.base.Game` protocol."""

    name = "kuhn_poker"
    roles = (FIRST, SECOND)
    outcomes = (*WINS.values(), FIRST_BROKE_RULES, SECOND_BROKE_RULES, UNFINISHED)
    prompts_file = "data/kuhn_poker_prompts.yaml"
    demonstrations = "scripted"  # random legal hands (data.scripted)
    deals = tuple(deal_name(d) for d in DEALS)
    infosets = INFOSETS  # where a model's strategy is read out exactly (spag.evaluation.strategy)
    _winner = {outcome: seat for (seat, _), outcome in WINS.items()}
    _chips = {outcome: chips for (_, chips), outcome in WINS.items()}

    def winner(self, outcome: str) -> str | None:
        return self._winner.get(outcome)

    def rule_breaker(self, outcome: str) -> str | None:
        return {FIRST_BROKE_RULES: FIRST, SECOND_BROKE_RULES: SECOND}.get(outcome)

    def result(self, outcome: str, role: str) -> float:
        """Chips ``role`` won in the hand (a rule break costs its author the ante)."""
        if outcome in self._winner:
            chips = self._chips[outcome]
            return float(chips if role == self._winner[outcome] else -chips)
        breaker = self.rule_breaker(outcome)
        if breaker is None:
            return 0.0
        return -1.0 if role == breaker else 1.0

    @staticmethod
    def scripted_reply(
        history: Sequence[Mapping[str, str]], secret: str, rng: random.Random
    ) -> str:
        return random_legal_reply(history, secret, rng)

    def judge(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> tuple[str, int]:
        return judge_hand(history, secret, max_turns)

    def end_reason(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> str | None:
        moves, breaker = play_hand(history)
        if breaker is not None:
            return END_RULE_BREAK
        if to_act(moves) is None:
            return END_FINISHED
        if len(history) >= 2 * max_turns:
            return END_MAX_TURNS
        return None

    def default_prompts_path(self) -> str:
        return str(Path(__file__).resolve().parent / "kuhn_poker_prompts.yaml")

    def load_prompts(self, path: str | None = None) -> KuhnPrompts:
        return load_kuhn_prompts(path or self.default_prompts_path())

    def _instruction(
        self, text: str, history: Sequence[Mapping[str, str]], role: str, secret: str
    ) -> str:
        moves, _ = play_hand(history)
        card = parse_deal(secret)[self.roles.index(role)]
        return text.format(seat=role, card=card, moves=" or ".join(legal_moves(moves)))

    def play_prompt(
        self,
        prompts: KuhnPrompts,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
    ) -> str:
        play = prompts.play
        so_far = f"{play['history_title']}{_lines(history)}" if history else play["started"]
        instruction = self._instruction(play["instruction"], history, role, secret)
        return f"{play['rules']}\n\n{so_far}\n\n{instruction}\n\n{play['cue']}"

    def training_prompt(
        self,
        prompts: KuhnPrompts,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
        u: float,
    ) -> str:
        idx = int(u * len(prompts.rules) * len(prompts.instructions) * len(prompts.history_titles))
        idx, i_rules = divmod(idx, len(prompts.rules))
        idx, i_ins = divmod(idx, len(prompts.instructions))
        i_title = idx % len(prompts.history_titles)
        if history:
            so_far = f"{prompts.history_titles[i_title]}{_lines(history)}"
        else:
            so_far = prompts.started[i_title % len(prompts.started)]
        instruction = self._instruction(prompts.instructions[i_ins], history, role, secret)
        return f"{prompts.rules[i_rules]}\n\n{so_far}\n\n{instruction}\n\n{prompts.cue}"


KUHN_POKER = KuhnPoker()
