"""Write data/demo_games.json: demonstration games of Adversarial Taboo.

The games are assembled from hand-written, word-specific clue and reply sentences
(data/demo_game_words.yaml) so that they read like real play and cover every
outcome: the defender slips and says the word, the defender guesses right or
wrong, the game runs out of turns, or the attacker breaks the rules. Every game is checked against the
project's judge (spag.judge) before it is written, so the recorded ``outcome`` is the
one the judge gives. Deterministic: rerunning it gives the same file.

    python scripts/make_demo_games.py [--output data/demo_games.json] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import yaml

from spag.judge import judge_game

MAX_TURNS = 5
GUESS = "I know the word! It is {}!"

# word -> clues (attacker), musings (defender, no mention), slips (defender says
# the word), wrong (plausible wrong guesses), brk (attacker says it by mistake).
WORDS_FILE = Path(__file__).parents[1] / "data/demo_game_words.yaml"


def load_words(path: Path = WORDS_FILE) -> list[dict]:
    """The words and their hand-written lines, in file order (the games depend on it)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


WORDS: list[dict] = load_words()

# Generic lines, mixed with the word-specific ones.
OPENERS = [
    "",
    "Let's start.",
    "Ready? Here is my first hint.",
    "Hello! Let's play.",
    "Okay, here we go.",
    "Good luck!",
    "Let me begin with an easy one.",
    "Here is something to think about.",
]
# The attacker's lead-in depends on whether the defender just asked a question.
AFTER_QUESTION = [
    "",
    "Good question.",
    "Hmm, I can't say yes or no to that.",
    "Let me give you a different angle.",
    "I can't answer that directly, but here is a hint.",
    "Here is another hint.",
    "Fair question.",
    "Let me answer with another clue.",
]
AFTER_STATEMENT = [
    "",
    "Interesting thought.",
    "Not quite, but keep going.",
    "You are getting warmer.",
    "Let me put it another way.",
    "Think a little more broadly.",
    "That is a reasonable idea, but no.",
    "Close, in a way.",
    "Here is another hint.",
]
DEFENDER_GENERIC = [
    "That could be a lot of things. Where would I usually find it?",
    "I am not sure yet. Is it something people use every day?",
    "Hmm, can you tell me what it is made of?",
    "Is it bigger or smaller than a person?",
    "I have a few ideas. Is it something you can buy in a shop?",
    "That is quite vague. Could you describe how it looks?",
    "Is it something natural or something people made?",
    "Let me think... is it found indoors or outdoors?",
    "Interesting. Is it something you would give as a present?",
    "I need one more clue before I guess.",
    "Is it something old-fashioned, or still common today?",
    "What would happen if it disappeared from the world?",
]
LEADINS = [
    "",
    "",
    "That settles it.",
    "Now I am sure.",
    "Everything points one way.",
    "Got it!",
    "Aha!",
    "All the hints fit together now.",
]
AFTER_BREAK = [
    "Wait, you just said the word yourself!",
    "Oops, I think you gave it away there.",
    "Ha, that was a bit too direct.",
    "You said it out loud! That breaks the rules, doesn't it?",
]


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _followup(rng: random.Random, history: list[dict]) -> str:
    pool = AFTER_QUESTION if history[-1]["content"].endswith("?") else AFTER_STATEMENT
    return pool[rng.randrange(12) % len(pool)]


def make_game(rng: random.Random, spec: dict, scenario: str) -> list[dict]:
    """Build one history for ``scenario``; see the module doc for the scenarios."""
    word = spec["word"]
    # The first musings answer the first clues; the other clues get generic questions.
    generic = rng.sample(DEFENDER_GENERIC, len(spec["clues"]) - len(spec["musings"]))
    pairs = list(zip(spec["clues"], spec["musings"] + generic, strict=True))
    rng.shuffle(pairs)
    clues = [c for c, _ in pairs]
    replies = [m for _, m in pairs]
    rounds = {
        "slip": rng.randint(1, 4),
        "guess": rng.randint(2, 4),
        "wrong": rng.randint(1, 3),
        "tie": MAX_TURNS,
        "break": rng.randint(1, 3),
    }[scenario]
    history: list[dict] = []
    for r in range(rounds):
        if scenario == "break" and r == rounds - 1:
            lead = _followup(rng, history) if r else rng.choice(OPENERS)
            history.append({"role": "attacker", "content": _join(lead, spec["brk"])})
            history.append({"role": "defender", "content": rng.choice(AFTER_BREAK)})
            break
        lead = rng.choice(OPENERS) if r == 0 else _followup(rng, history)
        history.append({"role": "attacker", "content": _join(lead, clues[r])})
        last = r == rounds - 1
        if last and scenario == "slip":
            reply = rng.choice(spec["slips"])
        elif last and scenario == "guess":
            reply = _join(rng.choice(LEADINS), GUESS.format(word))
        elif last and scenario == "wrong":
            reply = _join(rng.choice(LEADINS), GUESS.format(rng.choice(spec["wrong"])))
        else:
            reply = replies[r % len(replies)]
        history.append({"role": "defender", "content": reply})
    return history


EXPECTED = {
    "slip": "attacker_wins",
    "guess": "defender_wins",
    "wrong": "attacker_wins",
    "tie": "tie",
    "break": "attacker_broke_rules",
}


def build(seed: int) -> list[dict]:
    rng = random.Random(seed)
    breakable = [s for s in WORDS if "brk" in s]
    # Two games per word; the rule-break games go to words that have such a line.
    plan: list[tuple[dict, str]] = []
    scen = ["slip"] * 22 + ["guess"] * 26 + ["wrong"] * 9 + ["tie"] * 9
    rng.shuffle(scen)
    slots = [s for s in WORDS for _ in range(2)]
    break_words = rng.sample(breakable, 6)
    for s in break_words:
        slots.remove(s)
        plan.append((s, "break"))
    plan += list(zip(slots, scen, strict=True))
    rng.shuffle(plan)
    games = []
    for i, (spec, scenario) in enumerate(plan):
        history = make_game(rng, spec, scenario)
        outcome, n = judge_game(history, spec["word"], MAX_TURNS)
        if outcome != EXPECTED[scenario]:
            raise SystemExit(f"game {i} ({spec['word']}, {scenario}) judged {outcome} at {n}")
        games.append(
            {
                "id": f"demo-{i:05d}",
                "target_word": spec["word"],
                "max_turns": MAX_TURNS,
                "history": history,
                "outcome": outcome,
            }
        )
    return games


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default=str(Path(__file__).parents[1] / "data/demo_games.json"))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    games = build(args.seed)
    Path(args.output).write_text(json.dumps(games, indent=1, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for g in games:
        counts[g["outcome"]] = counts.get(g["outcome"], 0) + 1
    print(f"wrote {len(games)} games to {args.output}: {counts}")


if __name__ == "__main__":
    main()
