"""Play and training prompts (docs/design.md section 5), built from a YAML file of texts.

The shipped texts are ``data/prompts.yaml``. The package carries the same file
as ``spag/prompts.yaml`` (a symbolic link in the repository, a copy in an
installed wheel), so :func:`load_prompts` without a path works both from a
checkout and from an installed package. A config key may point to another
file with the same keys.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError

ROLES = ("attacker", "defender")
OTHER_ROLE = {"attacker": "defender", "defender": "attacker"}
LAYOUTS = ("rules_then_history", "history_then_rules", "plain")
GUESS_PHRASE = "I know the word! It is"


def default_prompts_path() -> Path:
    """The shipped prompts file (a link to the repository's ``data/prompts.yaml``)."""
    return Path(__file__).resolve().parent / "prompts.yaml"


def placeholders(text: str) -> set[str]:
    """The ``{name}`` fields a prompt text uses."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


class PromptsFile:
    """A game's prompts file: typed values read out of its YAML, naming the file and
    key on error (every game's prompts loader reads through it)."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data

    @classmethod
    def read(cls, path: str | os.PathLike) -> PromptsFile:
        """Read ``path``; a missing or unreadable file is a :class:`SpagInputError`."""
        import yaml

        p = Path(path)
        if not p.is_file():
            raise SpagInputError(f"prompts file not found: {p}")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            data = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise SpagInputError(f"{p}: not a readable YAML file: {exc}") from exc
        return cls(str(p), data)

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
            extra = placeholders(value) - allowed
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
# Only the attacker may be shown the target word.
_ALLOWED = {"attacker": frozenset({"target_word"}), "defender": frozenset()}


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
    _rules_cache: dict[tuple[int, int], str] = field(
        default_factory=dict, repr=False, compare=False
    )
    _combinations: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

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
        """A randomised prompt for ``role``'s next message; it ends with a cue line.

        ``rng`` is a ``random.Random`` or a numpy ``Generator``; one uniform number
        is drawn from it, so the same state gives the same prompt.
        """
        if not (hasattr(rng, "random") and callable(rng.random)):
            raise TypeError(f"rng must be a random.Random or numpy Generator, not {type(rng)}")
        return self.training_prompt_from(
            [m["role"] for m in history],
            [m["content"] for m in history],
            role,
            target_word,
            max_turns,
            float(rng.random()),
        )

    def training_prompt_from(
        self,
        roles: Sequence[str],
        contents: Sequence[str],
        role: str,
        target_word: str,
        max_turns: int,
        u: float,
    ) -> str:
        """Build a training prompt from parallel role/content lists.

        ``u`` in [0, 1) selects one combination of all the randomised pieces
        (separator, speaker labels, layout, rule text, instruction, titles),
        each combination equally likely.
        """
        _check_role(role)
        idx = int(u * self._n_combinations(role))
        idx, i_sep = divmod(idx, len(self.separators))
        idx, i_lab = divmod(idx, len(self.speaker_labels[role]))
        idx, i_lay = divmod(idx, len(self.layouts))
        idx, i_rul = divmod(idx, len(self.rules))
        idx, i_ins = divmod(idx, len(self.instructions[role]))
        idx, i_tit = divmod(idx, len(self.section_titles))
        idx, i_sta = divmod(idx, len(self.started))
        i_his = idx % len(self.history_titles)

        sep = self.separators[i_sep]
        mine, theirs = self.speaker_labels[role][i_lab]
        layout = self.layouts[i_lay]
        key = (i_rul, max_turns)
        rules = self._rules_cache.get(key)
        if rules is None:
            rules = self._rules_cache[key] = self.rules[i_rul].format(max_turns=max_turns)
        instruction = self.instructions[role][i_ins].format(target_word=target_word)
        label = {role: f"{sep}{mine}: ", OTHER_ROLE[role]: f"{sep}{theirs}: "}
        history = "".join([label[r] + c for r, c in zip(roles, contents, strict=True)])
        cue = f"{sep}{mine}:"
        if not history:
            instruction = f"{instruction} {self.started[i_sta]}"
        if layout == "rules_then_history":
            text = f"{sep}{self.section_titles[i_tit]}: {rules}\n\n{instruction}{history}{cue}"
        elif layout == "history_then_rules":
            text = f"{history}{sep}{self.section_titles[i_tit]}: {rules}\n\n{instruction}{cue}"
        elif history:
            text = f"{rules}\n\n{self.history_titles[i_his]}{history}\n\n{instruction}{cue}"
        else:
            text = f"{rules}\n\n{instruction}{cue}"
        return text.lstrip("\n")

    def _n_combinations(self, role: str) -> int:
        n = self._combinations.get(role)
        if n is None:
            n = (
                len(self.separators)
                * len(self.speaker_labels[role])
                * len(self.layouts)
                * len(self.rules)
                * len(self.instructions[role])
                * len(self.section_titles)
                * len(self.started)
                * len(self.history_titles)
            )
            self._combinations[role] = n
        return n


def _check_role(role: str) -> None:
    if role not in OTHER_ROLE:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")


def load_prompts(path: str | os.PathLike | None = None) -> Prompts:
    """Read and check a prompts file (default: the shipped ``data/prompts.yaml``)."""
    c = PromptsFile.read(path if path is not None else default_prompts_path())
    p = c.path

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
        play_instructions={r: c.text(f"play.instructions.{r}", _ALLOWED[r]) for r in ROLES},
        play_cue=c.text("play.cue"),
        rules=tuple(c.texts("training.rules", _MAX_TURNS)),
        instructions={r: tuple(c.texts(f"training.instructions.{r}", _ALLOWED[r])) for r in ROLES},
        started=tuple(c.texts("training.started")),
        history_titles=tuple(c.texts("training.history_titles")),
        section_titles=tuple(c.texts("training.section_titles")),
        separators=tuple(c.texts("training.separators")),
        speaker_labels={r: tuple(v) for r, v in labels.items()},
        layouts=tuple(layouts),
    )
