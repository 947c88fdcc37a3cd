"""Helpers shared by the self-play tests: word files, a scripted backend, CLI runs."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from spag.generation.base import Reply

WORDS = ["apple", "river", "candle", "garden", "pencil", "window", "bridge", "forest"]


def ensure_words_module() -> None:
    """Use spag.words when present; otherwise a minimal stand-in with the same contract."""
    if "spag.words" in sys.modules or importlib.util.find_spec("spag.words") is not None:
        return
    from spag.errors import SpagInputError

    mod = types.ModuleType("spag.words")

    def read_word_list(path):
        words = []
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or not line.strip().isalpha():
                raise SpagInputError(f"{path}: line {n}: not a word: {line!r}")
            words.append(line.strip())
        return words

    def shard_words(words, shard_index, num_shards):
        if not 0 <= shard_index < num_shards:
            raise SpagInputError(f"shard index {shard_index} out of range 0..{num_shards - 1}")
        return list(words[shard_index::num_shards])

    mod.read_word_list = read_word_list
    mod.shard_words = shard_words
    sys.modules["spag.words"] = mod


# Run the CLI in a child process, with the same stand-in if spag.words is missing.
CHILD_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from play_helpers import ensure_words_module
ensure_words_module()
from spag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def child_command(args: list[str]) -> list[str]:
    script = CHILD_SCRIPT.format(tests=str(Path(__file__).resolve().parent))
    return [sys.executable, "-c", script, *args]


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

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, greedy, seed):
        self.calls.append(
            {"n": len(prompts), "prompts": list(prompts), "greedy": greedy, "seed": seed}
        )
        out = []
        for i, p in enumerate(prompts):
            text = self.answer(i, p)
            out.append(Reply(text=text, num_tokens=max(2, len(text.split())), finished_by_eos=True))
        return out
