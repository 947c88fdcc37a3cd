"""Settings declared once: dataclasses whose fields generate a step's flags and a rule's.

Every ``spag <step>`` that the workflow runs with settings from the config declares
them as a dataclass built from :func:`opt` / :func:`req` fields (a default and a help
text each). From that one declaration come

- the step's command-line flags, their defaults and help (:func:`add_arguments`),
- the settings object of a parsed command line (:func:`from_arguments`),
- the rule's flags from the validated config (:func:`config_options`), and
- the check that the schema's defaults are the dataclass's: a dataclass that mirrors
  a config section is registered with :func:`section` (``@section("selfplay")``), and
  ``tests/test_settings.py`` compares every registered section with the schema.

A field's metadata may carry ``choices`` (argparse choices), ``env`` (the default
is read from this environment variable when set), ``key`` (the config key when
it differs from the field's name, as a tuple of keys from the config's root),
``flag`` (the flag's name when it differs from the field's, ``decay_weight`` for
``--decay-weight``) and ``type`` (what parses the flag's text when the field's type
does not, e.g. a count or a fraction). Training's settings add ``arg``: the
``TrainingArguments`` field a setting fills when the names differ
(``spag.training.arguments``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import types
import typing
from typing import Any

__all__ = [
    "add_arguments",
    "cli_flags",
    "config_options",
    "field_type",
    "from_arguments",
    "opt",
    "req",
    "section",
    "setting_names",
]

# Config section (keys from the root) -> the dataclass that declares its settings.
SECTIONS: dict[tuple[str, ...], type] = {}


def section(*path: str):
    """Register a dataclass as the declaration of the config section at ``path``."""

    def register(cls: type) -> type:
        cls.schema_section = path
        SECTIONS[path] = cls
        return cls

    return register


def opt(default: Any, help: str, **meta: Any) -> Any:
    """A setting with a default (its one declaration)."""
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def req(help: str, **meta: Any) -> Any:
    """A setting every caller gives (a step's files, mostly)."""
    return dataclasses.field(metadata={"help": help, **meta})


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def field_type(cls: type, f: dataclasses.Field) -> type:
    """The value type of a field (``int`` for ``int | None``; the element for a list)."""
    hint = typing.get_type_hints(cls)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = args[0]
    return hint


def _is_list(kind: Any) -> bool:
    return typing.get_origin(kind) in (list, tuple)


def add_arguments(
    parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()
) -> None:
    """One flag per field of ``cls`` (``--max-new-tokens`` for ``max_new_tokens``).

    A boolean that defaults to true gets ``--x/--no-x``; one that defaults to false a
    bare ``--x``; a list ``nargs="+"``. Fields named in ``skip`` get no flag.
    """
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + _flag_name(f).replace("_", "-")
        kind = field_type(cls, f)
        help_text = f.metadata["help"]
        if "flag" in f.metadata:
            # The parsed value keeps the field's name, as from_arguments reads it.
            parser_dest = {"dest": f.name}
        else:
            parser_dest = {}
        if kind is bool:
            if f.default is True or f.default is None:
                parser.add_argument(
                    flag,
                    action=argparse.BooleanOptionalAction,
                    default=f.default,
                    help=help_text,
                    **parser_dest,
                )
            else:
                parser.add_argument(flag, action="store_true", help=help_text, **parser_dest)
            continue
        extra: dict[str, Any] = dict(parser_dest)
        if parser_dest:
            extra["metavar"] = _flag_name(f).upper()
        if _is_list(kind):
            extra["nargs"] = "+"
            kind = typing.get_args(kind)[0]
        kind = f.metadata.get("type", kind)
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        if f.metadata.get("env"):
            default = os.environ.get(f.metadata["env"], default)
            help_text += f" (environment: {f.metadata['env']})"
        if f.metadata.get("choices"):
            extra["choices"] = f.metadata["choices"]
        if _required(f):
            parser.add_argument(flag, required=True, type=kind, help=help_text, **extra)
        else:
            shown = f" (default {default})" if default is not None else ""
            parser.add_argument(flag, type=kind, default=default, help=help_text + shown, **extra)


def _flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag", f.name)


def from_arguments(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """The ``cls`` of a parsed command line (fields without a flag from ``given``)."""
    values = {
        f.name: given[f.name] if f.name in given else getattr(args, f.name)
        for f in dataclasses.fields(cls)
        if f.init and (f.name in given or hasattr(args, f.name))
    }
    return cls(**values)


def setting_names(cls: type) -> list[str]:
    """The field names of a settings dataclass, in declaration order."""
    return [f.name for f in dataclasses.fields(cls)]


def config_options(
    cls: type, section: dict[str, Any], *, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A rule's options for ``cls`` from a validated config ``section``.

    Keys are flag names with ``_``; a default-on boolean turned off becomes
    ``no_<name>``. A field whose metadata has ``key`` (a path from the config's root)
    is read there from ``config``. Values equal to the default are passed too, so a
    job's command line shows every value it runs with.
    """
    options: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "key" in f.metadata:
            if config is None:
                continue
            value: Any = config
            for part in f.metadata["key"]:
                value = value[part]
        elif f.name in section:
            value = section[f.name]
        else:
            continue
        name = _flag_name(f)
        if field_type(cls, f) is bool and f.default is True and not value:
            options[f"no_{name}"] = True
        else:
            options[name] = value
    return options


def cli_flags(**options: Any) -> str:
    """Options rendered as a shell-quoted command line part (what a rule's shell gets).

    ``None``, ``False`` and ``[]`` leave the flag out; ``True`` is a bare flag; a list
    is one flag followed by its values.
    """
    parts = []
    for key, value in options.items():
        if value is None or value is False or value == []:
            continue
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)
