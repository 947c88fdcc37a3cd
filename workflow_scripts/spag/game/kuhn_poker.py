"""Kuhn Poker, one hand: its rules, its exact solution (a strategy's value, its best
responses and exploitability), and the game as played.

One hand: a deck of J < Q < K, each player antes 1 chip and is dealt one card. The
first player checks or bets 1; after a check the second player checks (showdown: the
higher card takes the pot) or bets; facing a bet a player calls (showdown) or folds
(the bettor takes the pot). Zero-sum; at equilibrium the first player wins -1/18 chip
per hand.

A *strategy* gives, at each of the 12 information sets (seat, own card, moves so
far), a probability for each legal move. A model playing both seats is one strategy
over all 12. Everything here is exact enumeration over the 6 deals and the 64 pure
strategies of a seat: no sampling.

As played (the :class:`spag.game.base.Game` protocol): roles ``first`` and ``second``
act in turn, the first player first; a hand has 2 or 3 moves. The secret a hand is
dealt is its deal, two letters: the first player's card, then the second's (``"kq"``);
each seat's prompt shows its own card only.

A reply's move is the first of the words check, bet, call and fold it contains (any
case). A reply that names no move, or a move that is not legal at that point, breaks
the rules: the hand ends and its author loses its ante (1 chip). Outcomes name the
winner and the chips won; the result of an outcome is the chips each seat won.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from spag.errors import SpagInputError
from spag.game.base import History, PromptsFile, TwoPlayerGame, placeholders

# ---------------------------------------------------------------- rules and solution
CARDS = ("J", "Q", "K")
SEATS = ("first", "second")
CHECK, BET, CALL, FOLD = "check", "bet", "call", "fold"
# Where a seat acts (moves so far) and its moves there: the passive one, then the
# aggressive one (bet, or call facing a bet).
DECISIONS: dict[str, dict[tuple[str, ...], tuple[str, str]]] = {
    "first": {(): (CHECK, BET), (CHECK, BET): (FOLD, CALL)},
    "second": {(CHECK,): (CHECK, BET), (BET,): (FOLD, CALL)},
}
# (seat, card, moves so far): the 12 information sets.
InfoSet = tuple[str, str, tuple[str, ...]]
INFOSETS: tuple[InfoSet, ...] = tuple(
    (seat, card, history) for seat in SEATS for card in CARDS for history in DECISIONS[seat]
)
# A strategy: information set -> move -> probability (over the legal moves).
Strategy = Mapping[InfoSet, Mapping[str, float]]
DEALS = tuple(itertools.permutations(CARDS, 2))  # (first's card, second's card), 1/6 each


def legal_moves(history: tuple[str, ...]) -> tuple[str, ...]:
    """The moves of whoever acts after ``history`` (empty when the hand is over)."""
    for seat in SEATS:
        if history in DECISIONS[seat]:
            return DECISIONS[seat][history]
    return ()


def to_act(history: tuple[str, ...]) -> str | None:
    """The seat that acts after ``history``, None when the hand is over."""
    return next((seat for seat in SEATS if history in DECISIONS[seat]), None)


def payoff(deal: tuple[str, str], history: tuple[str, ...]) -> int:
    """Chips the first player wins in a finished hand."""
    showdown = 1 if CARDS.index(deal[0]) > CARDS.index(deal[1]) else -1
    if history == (CHECK, CHECK):
        return showdown
    if history[-1] == FOLD:
        # The player who folded loses its ante (a bet it did not call is returned).
        return 1 if to_act(history[:-1]) == "second" else -1
    if history[-1] == CALL:
        return 2 * showdown
    raise ValueError(f"not a finished hand: {history}")


def first_player_value(strategy: Strategy, opponent: Strategy | None = None) -> float:
    """The first player's expected chips per hand: the first seat plays ``strategy``,
    the second ``opponent`` (``strategy`` itself by default, as in self-play)."""
    opponent = strategy if opponent is None else opponent

    def walk(deal: tuple[str, str], history: tuple[str, ...]) -> float:
        seat = to_act(history)
        if seat is None:
            return payoff(deal, history)
        mover = strategy if seat == "first" else opponent
        card = deal[SEATS.index(seat)]
        probs = mover[(seat, card, history)]
        return sum(p * walk(deal, (*history, m)) for m, p in probs.items() if p)

    return sum(walk(deal, ()) for deal in DEALS) / len(DEALS)


def pure_strategies(seat: str) -> list[dict[InfoSet, dict[str, float]]]:
    """Every deterministic strategy of ``seat``: one move at each of its 6 sets (64)."""
    sets = [s for s in INFOSETS if s[0] == seat]
    choices = [legal_moves(s[2]) for s in sets]
    return [
        {
            s: {m: float(m == pick) for m in legal_moves(s[2])}
            for s, pick in zip(sets, picks, strict=True)
        }
        for picks in itertools.product(*choices)
    ]


def best_response_value(strategy: Strategy, seat: str) -> float:
    """What a best response in ``seat`` wins per hand against ``strategy`` in the other
    seat (a best response can always be deterministic: the best of the 64)."""
    if seat == "first":
        return max(first_player_value(br, strategy) for br in pure_strategies("first"))
    return max(-first_player_value(strategy, br) for br in pure_strategies("second"))


def exploitability(strategy: Strategy) -> float:
    """The mean over both seats of what a best response wins against ``strategy``
    (0 at equilibrium: the first seat's best response wins -1/18, the second's +1/18)."""
    return (best_response_value(strategy, "first") + best_response_value(strategy, "second")) / 2


def value_against(strategy: Strategy, opponent: Strategy) -> float:
    """Chips per hand ``strategy`` wins against ``opponent``, both seats averaged."""
    as_first = first_player_value(strategy, opponent)
    as_second = -first_player_value(opponent, strategy)
    return (as_first + as_second) / 2


def uniform_random() -> dict[InfoSet, dict[str, float]]:
    """The player that picks each legal move with equal probability."""
    return {s: {m: 0.5 for m in legal_moves(s[2])} for s in INFOSETS}


def equilibrium(alpha: float | Fraction = Fraction(1, 6)) -> dict[InfoSet, dict[str, float]]:
    """A Nash equilibrium: the first seat's family at ``alpha`` in [0, 1/3] (bluff a J
    with ``alpha``, bet a K with ``3 alpha``, call a bet with a Q with ``alpha + 1/3``),
    the second seat's unique strategy (bet a J after a check with 1/3, call a bet with
    a Q with 1/3, always bet and call with a K, never call with a J or bet with a Q).
    Kuhn's solution; the first seat never bets a Q or calls with a J."""
    if not 0 <= alpha <= Fraction(1, 3):
        raise ValueError(f"alpha must be in [0, 1/3], got {alpha}")
    third = Fraction(1, 3)
    aggressive = {  # probability of bet / call at each set
        ("first", "J", ()): alpha,
        ("first", "Q", ()): 0,
        ("first", "K", ()): 3 * alpha,
        ("first", "J", (CHECK, BET)): 0,
        ("first", "Q", (CHECK, BET)): alpha + third,
        ("first", "K", (CHECK, BET)): 1,
        ("second", "J", (CHECK,)): third,
        ("second", "Q", (CHECK,)): 0,
        ("second", "K", (CHECK,)): 1,
        ("second", "J", (BET,)): 0,
        ("second", "Q", (BET,)): third,
        ("second", "K", (BET,)): 1,
    }
    return {s: _two(s, float(p)) for s, p in aggressive.items()}


def _two(infoset: InfoSet, aggressive: float) -> dict[str, float]:
    passive_move, aggressive_move = legal_moves(infoset[2])
    return {passive_move: 1.0 - aggressive, aggressive_move: aggressive}


def aggressive_probability(strategy: Strategy, infoset: InfoSet) -> float:
    """The probability of bet (or call, facing a bet) at ``infoset``."""
    return strategy[infoset][legal_moves(infoset[2])[1]]


# ---------------------------------------------------------------- the game as played
FIRST, SECOND = SEATS
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


def move_forms(move: str) -> tuple[str, ...]:
    """The whole replies that name ``move``: the word lower-case or capitalised, with or
    without a space (a model may write one after the prompt's cue). Read with the end of
    the turn after them, they leave out what play rejects ("callheck") and what it
    accepts with other words ("I bet"): their mass is what surely plays the move."""
    return move, move.capitalize(), f" {move}", f" {move.capitalize()}"


def play_hand(history: History) -> tuple[tuple[str, ...], str | None]:
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


def judge_hand(history: History, secret: str, max_turns: int) -> tuple[str, int]:
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


def read_kuhn_prompts(c: PromptsFile) -> KuhnPrompts:
    """Check the texts of a Kuhn Poker prompts file, naming the file and key on error."""

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


def _lines(history: History) -> str:
    return "".join(f"\n  - {m['role']}: {m['content']}" for m in history)


def random_legal_reply(history: History, secret: str, rng: random.Random) -> str:
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


class KuhnPoker(TwoPlayerGame):
    """Kuhn Poker through the :class:`spag.game.base.Game` protocol."""

    name = "kuhn_poker"
    roles = (FIRST, SECOND)
    outcomes = (*WINS.values(), FIRST_BROKE_RULES, SECOND_BROKE_RULES, UNFINISHED)
    prompts_file = "data/kuhn_poker_prompts.yaml"
    demonstrations = "scripted"  # random legal hands (data.scripted)
    deals = tuple(deal_name(d) for d in DEALS)
    infosets = INFOSETS  # where a model's strategy is read out exactly (spag.evaluation.strategy)
    move_set = (CHECK, BET, CALL, FOLD)
    # The chips each seat won; a rule break costs its author the ante (1 chip).
    won = {outcome: (seat, float(chips)) for (seat, chips), outcome in WINS.items()}
    broken = {FIRST_BROKE_RULES: FIRST, SECOND_BROKE_RULES: SECOND}

    @staticmethod
    def scripted_reply(history: History, secret: str, rng: random.Random) -> str:
        return random_legal_reply(history, secret, rng)

    def judge(self, history: History, secret: str, max_turns: int) -> tuple[str, int]:
        return judge_hand(history, secret, max_turns)

    def legal_moves(self, history: History) -> tuple[str, ...]:
        return legal_moves(play_hand(history)[0])

    @staticmethod
    def read_move(text: str) -> str | None:
        return read_move(text)

    @staticmethod
    def move_forms(move: str) -> tuple[str, ...]:
        return move_forms(move)

    def end_reason(self, history: History, secret: str, max_turns: int) -> str | None:
        moves, breaker = play_hand(history)
        if breaker is not None:
            return END_RULE_BREAK
        if to_act(moves) is None:
            return END_FINISHED
        if len(history) >= 2 * max_turns:
            return END_MAX_TURNS
        return None

    def read_prompts(self, texts: PromptsFile) -> KuhnPrompts:
        return read_kuhn_prompts(texts)

    def _instruction(self, text: str, history: History, role: str, secret: str) -> str:
        moves, _ = play_hand(history)
        card = parse_deal(secret)[self.roles.index(role)]
        return text.format(seat=role, card=card, moves=" or ".join(legal_moves(moves)))

    def play_prompt(
        self, prompts: KuhnPrompts, history: History, role: str, secret: str, max_turns: int
    ) -> str:
        play = prompts.play
        so_far = f"{play['history_title']}{_lines(history)}" if history else play["started"]
        instruction = self._instruction(play["instruction"], history, role, secret)
        return f"{play['rules']}\n\n{so_far}\n\n{instruction}\n\n{play['cue']}"

    def training_prompt(
        self,
        prompts: KuhnPrompts,
        history: History,
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
