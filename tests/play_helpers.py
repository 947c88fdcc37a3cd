"""Helpers shared by the self-play tests: word files, a scripted backend, CLI runs."""

from __future__ import annotations

import sys
from pathlib import Path

from spag.generation.base import Reply

WORDS = ["apple", "river", "candle", "garden", "pencil", "window", "bridge", "forest"]


def child_command(args: list[str]) -> list[str]:
    """``spag ARGS`` run in a child process with this interpreter."""
    return [sys.executable, "-m", "spag", *args]


def write_words(path: Path, words: list[str]) -> Path:
    path.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
    return path


class ScriptedBackend:
    """A backend that answers from a function of (prompt index, prompt) and logs its calls."""

    name = "scripted"

    def __init__(self, answer, label: str = "policy") -> None:
        self.answer = answer
        self.label = label
        self.calls: list[dict] = []

    def generate(self, prompts, sampling, *, seed, game_ids=None):
        self.calls.append(
            {
                "n": len(prompts),
                "prompts": list(prompts),
                "greedy": sampling.greedy,
                "seed": seed,
                "keys": game_ids,
            }
        )
        out = []
        for i, p in enumerate(prompts):
            text = self.answer(i, p)
            out.append(Reply(text=text, num_tokens=max(2, len(text.split())), finished_by_eos=True))
        return out
