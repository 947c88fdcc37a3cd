"""Play and training prompts (DESIGN section 5), built from a YAML file of texts.

The shipped texts are ``data/prompts.yaml``. The package carries the same file
as ``spag/prompts.yaml`` (a symbolic link in the repository, a copy in an
installed wheel), so :func:`load_prompts` without a path works both from a
checkout and from an installed package. A config key may point to another
file with the same keys.
"""

from __future__ import annotations

import os
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError

ROLES = ("attacker", "defender")
OTHER_ROLE = {"attacker": "defender", "defender": "attacker"}
LAYOUTS = ("rules_then_history", "history_then_rules", "plain")
GUESS_PHRASE = "I know the word! It is"


def default_prompts_path() -> Path:
    """The shipped prompts file (package copy of ``data/prompts.yaml``)."""
    here = Path(__file__).resolve().parent
    packaged = here / "prompts.yaml"
    if packaged.is_file():
        return packaged
    return here.parents[1] / "data" / "prompts.yaml"


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


class _Checker:
    """Reads typed values out of the parsed YAML, naming the file and key on error."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data

    def get(self, key: str) -> Any:
        node = self.data
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise SpagInputError(f"{self.path}: missing key '{key}'")
            node = node[part]
        return node

    def text(self, key: str, allowed: frozenset[str] = frozenset(), value: Any = None) -> str:
        value = self.get(key) if value is None else value
        if not isinstance(value, str):
            raise SpagInputError(f"{self.path}: key '{key}' must be a string")
        try:
            extra = _fields(value) - allowed
        except ValueError as exc:
            raise SpagInputError(f"{self.path}: key '{key}': bad placeholder: {exc}") from exc
        if extra:
            raise SpagInputError(
                f"{self.path}: key '{key}' uses unknown placeholder(s) {sorted(extra)}; "
                f"allowed: {sorted(allowed) or 'none'}"
            )
        return value

    def texts(self, key: str, allowed: frozenset[str] = frozenset()) -> list[str]:
        values = self.get(key)
        if not isinstance(values, list) or not values:
            raise SpagInputError(f"{self.path}: key '{key}' must be a non-empty list of strings")
        return [self.text(f"{key}[{i}]", allowed, v) for i, v in enumerate(values)]


_MAX_TURNS = frozenset({"max_turns"})
_TARGET = frozenset({"target_word"})


@dataclass(frozen=True)
class Prompts:
    """The prompt texts of one prompts file, ready to render."""

    path: str
    play_rules: str
    play_history_title: str
    play_started: str
    play_instructions: Mapping[str, str]
    play_cue: str
    rules: Sequence[str]
    instructions: Mapping[str, Sequence[str]]
    started: Sequence[str]
    history_titles: Sequence[str]
    section_titles: Sequence[str]
    separators: Sequence[str]
    # role -> list of (label of that role, label of the other role)
    speaker_labels: Mapping[str, Sequence[tuple[str, str]]]
    layouts: Sequence[str]

    def play_prompt(
        self,
        history: Sequence[Mapping[str, str]],
        role: str,
        target_word: str,
        max_turns: int,
    ) -> str:
        """The fixed prompt for ``role``'s next message; it ends with a cue line."""
        _check_role(role)
        parts = [self.play_rules.format(max_turns=max_turns), "\n\n"]
        if history:
            parts.append(self.play_history_title)
            for m in history:
                parts.append(f"\n  - {m['role']}: {m['content']}")
        else:
            parts.append(self.play_started)
        parts.append("\n\n")
        parts.append(self.play_instructions[role].format(target_word=target_word))
        parts.append("\n\n")
        parts.append(self.play_cue)
        return "".join(parts)

    def training_prompt(
        self,
        history: Sequence[Mapping[str, str]],
        role: str,
        target_word: str,
        max_turns: int,
        rng: Any,
    ) -> str:
        """A randomised prompt for ``role``'s next message (see :meth:`training_prompt_from`)."""
        return self.training_prompt_from(
            [m["role"] for m in history],
            [m["content"] for m in history],
            role,
            target_word,
            max_turns,
            _chooser(rng),
        )

    def training_prompt_from(
        self,
        roles: Sequence[str],
        contents: Sequence[str],
        role: str,
        target_word: str,
        max_turns: int,
        choose: Callable[[Sequence[Any]], Any],
    ) -> str:
        """Build a training prompt from parallel role/content lists.

        ``choose(seq)`` picks one element; the choices are drawn in a fixed order,
        so the same random state gives the same prompt.
        """
        _check_role(role)
        sep = choose(self.separators)
        mine, theirs = choose(self.speaker_labels[role])
        layout = choose(self.layouts)
        rules = choose(self.rules).format(max_turns=max_turns)
        instruction = choose(self.instructions[role]).format(target_word=target_word)
        title = choose(self.section_titles)
        label = {role: mine, OTHER_ROLE[role]: theirs}
        history = "".join(
            f"{sep}{label.get(r, r)}: {c}" for r, c in zip(roles, contents, strict=True)
        )
        cue = f"{sep}{mine}:"
        if not history:
            instruction = f"{instruction} {choose(self.started)}"
        if layout == "rules_then_history":
            text = f"{sep}{title}: {rules}\n\n{instruction}{history}{cue}"
        elif layout == "history_then_rules":
            text = f"{history}{sep}{title}: {rules}\n\n{instruction}{cue}"
        else:
            if history:
                text = f"{rules}\n\n{choose(self.history_titles)}{history}\n\n{instruction}{cue}"
            else:
                text = f"{rules}\n\n{instruction}{cue}"
        return text.lstrip("\n")


def _check_role(role: str) -> None:
    if role not in OTHER_ROLE:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")


def _chooser(rng: Any) -> Callable[[Sequence[Any]], Any]:
    """A ``choose(seq)`` function over a ``random.Random`` or a numpy ``Generator``."""
    if hasattr(rng, "integers"):
        return lambda seq: seq[int(rng.integers(len(seq)))]
    if hasattr(rng, "randrange"):
        return lambda seq: seq[rng.randrange(len(seq))]
    raise TypeError(f"rng must be a random.Random or numpy Generator, not {type(rng).__name__}")


def load_prompts(path: str | os.PathLike | None = None) -> Prompts:
    """Read and check a prompts file (default: the shipped ``data/prompts.yaml``)."""
    import yaml

    p = Path(path) if path is not None else default_prompts_path()
    if not p.is_file():
        raise SpagInputError(f"prompts file not found: {p}")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpagInputError(f"{p}: not a readable YAML file: {exc}") from exc
    c = _Checker(str(p), data)

    labels: dict[str, list[tuple[str, str]]] = {r: [] for r in ROLES}
    raw_labels = c.get("training.speaker_labels")
    if not isinstance(raw_labels, list) or not raw_labels:
        raise SpagInputError(f"{p}: key 'training.speaker_labels' must be a non-empty list")
    for i, pair in enumerate(raw_labels):
        key = f"training.speaker_labels[{i}]"
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(x, str) for x in pair)
        ):
            raise SpagInputError(f"{p}: key '{key}' must be a pair [next speaker, other speaker]")
        for r in ROLES:
            names = {"role": r, "other": OTHER_ROLE[r]}
            try:
                labels[r].append((pair[0].format(**names), pair[1].format(**names)))
            except (KeyError, ValueError, IndexError) as exc:
                raise SpagInputError(
                    f"{p}: key '{key}': only {{role}} and {{other}} may be used ({exc})"
                ) from exc

    layouts = c.texts("training.layouts")
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        raise SpagInputError(
            f"{p}: key 'training.layouts' has unknown layout(s) {unknown}; known: {list(LAYOUTS)}"
        )

    return Prompts(
        path=str(p),
        play_rules=c.text("play.rules", _MAX_TURNS),
        play_history_title=c.text("play.history_title"),
        play_started=c.text("play.started"),
        play_instructions={r: c.text(f"play.instructions.{r}", _TARGET) for r in ROLES},
        play_cue=c.text("play.cue"),
        rules=tuple(c.texts("training.rules", _MAX_TURNS)),
        instructions={r: tuple(c.texts(f"training.instructions.{r}", _TARGET)) for r in ROLES},
        started=tuple(c.texts("training.started")),
        history_titles=tuple(c.texts("training.history_titles")),
        section_titles=tuple(c.texts("training.section_titles")),
        separators=tuple(c.texts("training.separators")),
        speaker_labels={r: tuple(v) for r, v in labels.items()},
        layouts=tuple(layouts),
    )
