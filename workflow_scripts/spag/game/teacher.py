"""Teacher games: a strong player (an OpenAI-compatible endpoint or a model folder) plays
the demonstration games that M0 imitates, instead of a released games file.

This module owns the plan of a teacher run: which player is what, how many games
and at most how many endpoint requests they take (the cost guard), checked before
any job. The games themselves are played by ``spag play`` and judged like self-play;
as with released games, M0 imitates the winner of each decisive game (with a
partner, that may be the partner).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.generation.settings import SamplingSettings
from spag.settings import opt

# `data.imitation` names this to take its demonstrations from teacher games.
TEACHER = "teacher"


@dataclass(frozen=True, kw_only=True)
class TeacherSettings(SamplingSettings):
    """Teacher games (config ``data.teacher``): who plays them, how many, the cost guard,
    and how the teacher samples (every sampling knob, with defaults of its own)."""

    model: str | None = opt(
        None,
        'an OpenAI-compatible endpoint "openai:http://host:8000/v1?model=NAME" (&api=chat '
        "for /v1/chat/completions; timeout, retries, workers, key_env, top_k=off) or a "
        "local model folder (played with selfplay.backend)",
        schema={"minLength": 1},
    )
    partner: str | None = opt(
        None,
        "null: the teacher plays both roles; else the other player (endpoint or folder): "
        "per word, one game with the teacher attacking and one with it defending",
        schema={"minLength": 1},
    )
    words: str = opt(
        "train",
        '"train": the run\'s train target words; else a word-list file (one word a line)',
    )
    num_shards: int = opt(
        2, "one job per shard of the words; a failed shard is rerun alone", ge=1, le=1000
    )
    games_per_word: int = opt(1, "games per word when the teacher plays both roles", ge=1)
    # The teacher's own sampling defaults (an endpoint's: no top-k filter); the other
    # knobs are self-play's.
    temperature: float = opt(1.0, "the teacher's sampling temperature; 0: greedy", ge=0, greedy=0.0)
    top_k: int = opt(
        0,
        "sample from the k most likely tokens; 0: no limit (endpoints that refuse top_k: "
        "add &top_k=off to the spec)",
        ge=0,
        greedy=0,
    )
    max_requests: int = opt(
        20000,
        "cost guard: the run refuses to start when the teacher games could send more "
        "requests than this (games x turns the teacher speaks)",
        ge=1,
    )


@dataclass(frozen=True)
class TeacherPlan:
    words: int
    games: int
    # Worst case (every game to its last turn, before retries), per endpoint.
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def max_requests(self) -> int:
        return sum(self.requests.values())

    def describe(self, config: dict[str, Any]) -> str:
        cap = config["data"]["teacher"]["max_requests"]
        where = ", ".join(f"{n} to {name}" for name, n in self.requests.items()) or "none"
        return (
            f"teacher games: {self.games} games on {self.words} words, at most "
            f"{self.max_requests} requests before retries ({where}; cap "
            f"data.teacher.max_requests {cap})"
        )


def uses_teacher(config: dict[str, Any]) -> bool:
    """Whether M0 imitates teacher games (config ``data.imitation``)."""
    return config["data"]["imitation"] == TEACHER


def is_folder_player(value: str | None) -> bool:
    """A player given as a model folder (not an endpoint spec, not unset)."""
    from spag.generation.openai_backend import is_endpoint_spec

    return bool(value) and not is_endpoint_spec(value)


def teacher_plays_locally(config: dict[str, Any]) -> bool:
    """Whether a model folder plays in the teacher games (the teacher or its partner):
    those games run on the self-play engine, endpoints only wait on HTTP."""
    t = config["data"]["teacher"]
    return is_folder_player(t["model"]) or is_folder_player(t["partner"])


def _endpoint_name(value: str, key: str, built: Collection[str]) -> str | None:
    """The endpoint's name for an endpoint spec, None for a model folder (one that
    exists, or one the workflow builds, in ``built``); anything else is an error."""
    from spag.generation.openai_backend import is_endpoint_spec, parse_spec

    if is_endpoint_spec(value):
        try:
            spec = parse_spec(value)
        except SpagInputError as exc:
            raise SpagInputError(f"key '{key}': {exc}") from exc
        return f"{spec.model} at {spec.base_url}"
    if Path(value).as_posix().rstrip("/") in {Path(b).as_posix() for b in built}:
        return None
    if not (Path(value).expanduser() / "config.json").is_file():
        raise SpagInputError(
            f"key '{key}' is '{value}': neither an OpenAI-compatible endpoint "
            "('openai:http://host:port/v1?model=NAME') nor a model folder (no config.json)"
        )
    return None


def teacher_plan(
    config: dict[str, Any], num_words: int, built: Collection[str] = ()
) -> TeacherPlan:
    """Check the teacher settings of a validated config and count the work.

    ``num_words`` is the number of target words the teacher plays; ``built`` names
    model folders the workflow makes (accepted before they exist). Raises
    :class:`SpagInputError` naming the key when a player is neither an endpoint nor a
    model folder, when greedy games would repeat, or when the games could take more
    endpoint requests than the cap.
    """
    t = config["data"]["teacher"]
    if not t["model"]:
        raise SpagInputError(
            "key 'data.imitation' is 'teacher' but 'data.teacher.model' is not set: name an "
            "endpoint ('openai:http://host:port/v1?model=NAME') or a model folder"
        )
    turns = config["game"]["max_turns"]
    teacher = _endpoint_name(t["model"], "data.teacher.model", built)
    requests: dict[str, int] = {}
    if t["partner"]:
        partner = _endpoint_name(t["partner"], "data.teacher.partner", built)
        # Per word the teacher attacks once and defends once; each side speaks at
        # most max_turns times a game.
        games = 2 * num_words
        for name in (teacher, partner):
            if name is not None:
                requests[name] = requests.get(name, 0) + games * turns
    else:
        if t["temperature"] == 0 and t["games_per_word"] > 1:
            raise SpagInputError(
                "key 'data.teacher.games_per_word' is above 1 with temperature 0: greedy "
                "games of a word are all the same game"
            )
        games = num_words * t["games_per_word"]
        if teacher is not None:
            requests[teacher] = games * 2 * turns
    plan = TeacherPlan(num_words, games, requests)
    if plan.max_requests > t["max_requests"]:
        raise SpagInputError(
            f"teacher games could send {plan.max_requests} requests ({games} games, up to "
            f"{turns} turns a player), more than key 'data.teacher.max_requests' "
            f"({t['max_requests']}): raise it or play fewer words"
        )
    return plan
