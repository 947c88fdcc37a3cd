"""What a set of games looks like, read from its episodes: decisive games per role,
echoes, distinct openings, cut replies.

    python perf/episode_profile.py EPISODES.parquet [...] [--game taboo]

One row per file (self-play episodes of an epoch, or evaluation games of a model):

- ``games``; ``<role> wins``: games won by each role by play (the judge's outcome);
  ``rule breaks``: games ended by a broken rule;
- ``echo``: games in which some reply contains the previous message whole (lower-cased,
  stripped, at least 8 characters): a player that repeats what it was told, which a
  rule-abiding attacker cannot beat and a defender cannot learn from;
- ``openings``: distinct first messages over the games (a model that opens every game
  the same way, whatever its secret, shows as few);
- ``cut``: replies that hit ``max_new_tokens`` before their end (``truncated_replies``
  over all messages), and the mean reply length in tokens.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow_scripts"))

MIN_ECHO = 8  # shorter messages ("ok", "yes") repeat by chance


def _echoes(history: list[dict]) -> bool:
    for before, reply in zip(history, history[1:], strict=False):
        said = before["content"].strip().lower()
        if len(said) >= MIN_ECHO and said in reply["content"].lower():
            return True
    return False


def profile(path: str | Path, game_name: str = "taboo") -> dict:
    """The figures of the module's table for one episodes file."""
    import pyarrow.parquet as pq

    from spag.game.base import load_game

    game = load_game(game_name)
    rows = pq.read_table(path).to_pylist()
    outcomes = Counter(
        r.get("outcome") or game.judge(r["history"], r["target_word"], r["max_turns"])[0]
        for r in rows
    )
    wins = {role: 0 for role in game.roles}
    breaks = 0
    for outcome, n in outcomes.items():
        winner = game.winner(outcome)
        if winner is not None:
            wins[winner] += n
        breaks += n * (game.rule_breaker(outcome) is not None)
    messages = sum(len(r["history"]) for r in rows)
    tokens = sum(sum(r.get("message_tokens") or []) for r in rows)
    firsts = {r["history"][0]["content"].strip() for r in rows if r["history"]}
    return {
        "games": len(rows),
        **{f"{role} wins": wins[role] for role in game.roles},
        "rule breaks": breaks,
        "echo": sum(_echoes(r["history"]) for r in rows),
        "openings": len(firsts),
        "messages": messages,
        "cut": sum(r.get("truncated_replies") or 0 for r in rows),
        "mean reply tokens": tokens / messages if messages else 0.0,
    }


def table(paths: list[tuple[str, str | Path]], game_name: str = "taboo") -> list[str]:
    """A Markdown table, one row per (label, episodes file)."""
    rows = [(label, profile(p, game_name)) for label, p in paths]
    if not rows:
        return []
    keys = list(rows[0][1])
    out = ["| games of | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, row in rows:
        n, msgs = row["games"], row["messages"]
        cells = []
        for k in keys:
            v = row[k]
            if k in ("echo", "openings", "rule breaks") or k.endswith(" wins"):
                cells.append(f"{v} ({v / n:.0%})" if n else "0")
            elif k == "cut":
                cells.append(f"{v} ({v / msgs:.0%})" if msgs else "0")
            elif isinstance(v, float):
                cells.append(f"{v:.1f}")
            else:
                cells.append(str(v))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("episodes", nargs="+", help="episodes Parquet files")
    ap.add_argument("--game", default="taboo")
    args = ap.parse_args()
    print("\n".join(table([(Path(p).stem, p) for p in args.episodes], args.game)))


if __name__ == "__main__":
    main()
