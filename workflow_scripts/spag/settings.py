"""Settings declared once: dataclasses whose fields generate a step's flags and a rule's.

Every ``spag <step>`` that the workflow runs with settings from the config declares
them as a dataclass built from :func:`opt` / :func:`req` fields (a default and a help
text each). From that one declaration come

- the step's command-line flags, their defaults and help (:func:`add_arguments`),
- the settings object of a parsed command line (:func:`from_arguments`),
- the rule's flags from the validated config (:func:`config_options`), those at the
  step's default left out (:func:`step_flags`),
- the range checks of a constructed object (:func:`check_bounds`), and
- the config schema's properties of the section a dataclass declares
  (:func:`section_schema`): the schema names the class (``x-section:
  spag.generation.settings:SelfplaySettings``) and lists no key of its own there, so the
  plan-time checks and ``docs/config.md`` read the same declaration.

A field's metadata may carry ``choices`` (argparse choices; a registry's dict for
its names, read when the schema is made), ``env`` (the default
is read from this environment variable when set), ``key`` (the config key when
it differs from the field's name, as a tuple of keys from the config's root),
``flag`` (the flag's name when it differs from the field's, ``decay_weight`` for
``--decay-weight``) and ``type`` (what parses the flag's text when the field's type
does not, e.g. a count or a fraction). Bounds are ``ge``, ``gt``, ``le`` and ``lt``
(checked on the command line and at plan time); ``schema`` adds JSON Schema keywords the
type does not give (``minLength``, an array's ``items``); ``filled`` marks a setting
whose None the code fills (by the objective): the config gives a value or leaves the key
out, and the schema has no default for it. Training's settings add
``arg``: the ``TrainingArguments`` field a setting fills when the names differ
(``spag.training.arguments``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import operator
import os
import shlex
import types
import typing
from typing import Any

from spag.errors import SpagInputError

__all__ = [
    "Checked",
    "add_arguments",
    "check_bounds",
    "cli_flags",
    "config_options",
    "field_type",
    "from_arguments",
    "from_words",
    "typed_values",
    "load_section_class",
    "opt",
    "req",
    "section_schema",
    "setting_names",
    "step_flags",
]

# A bound's metadata key -> how it reads, how it compares, its JSON Schema keyword.
BOUNDS = {
    "ge": (">=", operator.ge, "minimum"),
    "gt": (">", operator.gt, "exclusiveMinimum"),
    "le": ("<=", operator.le, "maximum"),
    "lt": ("<", operator.lt, "exclusiveMaximum"),
}


def opt(default: Any, help: str, **meta: Any) -> Any:
    """A setting with a default (its one declaration)."""
    return dataclasses.field(default=default, metadata={"help": help, **meta})


class Checked:
    """Base of a settings dataclass: its numbers' bounds checked when it is made."""

    def __post_init__(self) -> None:
        check_bounds(self)
        # A settings class that also extends another dataclass (the Trainer's arguments)
        # runs that one's checks too.
        after = getattr(super(), "__post_init__", None)
        if after is not None:
            after()


def req(help: str, **meta: Any) -> Any:
    """A setting every caller gives (a step's files, mostly)."""
    return dataclasses.field(metadata={"help": help, **meta})


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    # Evaluating a class's string annotations is the cost (every Snakemake process and
    # step parses its settings this way): once per class.
    return typing.get_type_hints(cls)


def field_type(cls: type, f: dataclasses.Field) -> type:
    """The value type of a field (``int`` for ``int | None``; the element for a list)."""
    hint = _type_hints(cls)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = args[0]
    return hint


def _is_list(kind: Any) -> bool:
    return typing.get_origin(kind) in (list, tuple)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _flag(f: dataclasses.Field) -> str:
    return "--" + _flag_name(f).replace("_", "-")


def check_bounds(obj: Any) -> None:
    """Each number of ``obj`` within its field's bounds, else a :class:`SpagInputError`
    naming the flag (``--top-p must be in (0, 1], got 0``); None means unset."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        bounds = {k: f.metadata[k] for k in BOUNDS if k in f.metadata}
        if not bounds or value is None or isinstance(value, (bool, str)):
            continue
        if all(BOUNDS[k][1](value, bound) for k, bound in bounds.items()):
            continue
        raise SpagInputError(f"{_flag(f)} must be {_range_text(bounds)}, got {value}")


def _range_text(bounds: dict[str, Any]) -> str:
    low = [k for k in ("ge", "gt") if k in bounds]
    high = [k for k in ("le", "lt") if k in bounds]
    if low and high:
        lo, hi = low[0], high[0]
        return (
            f"in {'[' if lo == 'ge' else '('}{bounds[lo]:g}, {bounds[hi]:g}"
            f"{']' if hi == 'le' else ')'}"
        )
    return " and ".join(f"{BOUNDS[k][0]} {bounds[k]:g}" for k in bounds)


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _json_types(hint: Any) -> list[str]:
    if typing.get_origin(hint) in (list, tuple):
        return ["array"]
    if dataclasses.is_dataclass(hint) or typing.get_origin(hint) is dict:
        return ["object"]
    return [_JSON_TYPES[hint]]


def field_schema(cls: type, f: dataclasses.Field) -> dict[str, Any]:
    """The JSON Schema of one setting: type (or ``enum`` from ``choices``), bounds,
    ``schema`` keywords, default and description, all from its declaration."""
    hint = _type_hints(cls)[f.name]
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    nullable = union and type(None) in typing.get_args(hint) and "filled" not in f.metadata
    node: dict[str, Any] = {}
    if f.metadata.get("choices"):
        node["enum"] = [*f.metadata["choices"], *([None] if nullable else [])]
    else:
        names = [t for kind in kinds for t in _json_types(kind)] + (["null"] if nullable else [])
        node["type"] = names[0] if len(names) == 1 else names
        if names[0] == "array":
            node["items"] = {"type": _json_types(typing.get_args(kinds[0])[0])[0]}
        elif names[0] == "object" and dataclasses.is_dataclass(kinds[0]):
            # A group of settings declared by its own dataclass (a mapping in the config).
            declared = section_schema(kinds[0])
            node.update(additionalProperties=False, properties=declared["properties"])
    for key, (_, _, keyword) in BOUNDS.items():
        if key in f.metadata:
            node[keyword] = f.metadata[key]
    node.update(f.metadata.get("schema", {}))
    default = _default(f)
    if "filled" not in f.metadata:
        node["default"] = list(default) if isinstance(default, tuple) else default
    node["description"] = f.metadata["help"]
    return node


def section_schema(cls: type) -> dict[str, Any]:
    """The config section ``cls`` declares, as JSON Schema (fields with ``key`` belong to
    other sections)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "default": {},
        "properties": {
            f.name: field_schema(cls, f) for f in dataclasses.fields(cls) if "key" not in f.metadata
        },
    }


def load_section_class(ref: str) -> type:
    """The class a schema's ``x-section: module:Class`` names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


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
        flag = _flag(f)
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
        if dataclasses.is_dataclass(kind):
            # A group of settings: KEY=VALUE words, made into ``kind`` by from_arguments.
            fields = ", ".join(g.name for g in dataclasses.fields(kind))
            help_text += f" (KEY=VALUE words, KEY one of {fields}; lists comma-separated)"
            extra.update(nargs="+", metavar="KEY=VALUE")
            kind = str
        elif _is_list(kind):
            extra["nargs"] = "+"
            kind = typing.get_args(kind)[0]
        kind = f.metadata.get("type", kind)
        default = _default(f)
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
    for f in dataclasses.fields(cls):
        kind = field_type(cls, f)
        if dataclasses.is_dataclass(kind) and isinstance(values.get(f.name), list):
            values[f.name] = kind(**from_words(kind, values[f.name], _flag(f)))
    return cls(**values)


def typed_values(cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """``values`` (a config mapping, whose numbers may arrive as text through Snakemake's
    ``--config``) as the types of ``cls``'s fields: a list becomes a tuple of the
    element type; a value that is not one is a :class:`SpagInputError` naming
    ``where.<key>``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key, value in values.items():
        kind = field_type(cls, fields[key])
        try:
            if _is_list(kind):
                item = typing.get_args(kind)[0]
                items = value if isinstance(value, (list, tuple)) else [value]
                out[key] = tuple(_typed(item, v) for v in items)
            else:
                out[key] = _typed(kind, value)
        except (TypeError, ValueError):
            raise SpagInputError(f"{where}.{key}: {value!r} is not a {_name(kind)}") from None
    return out


def _name(kind: Any) -> str:
    if _is_list(kind):
        return f"list of {_name(typing.get_args(kind)[0])}"
    return getattr(kind, "__name__", str(kind))


def _typed(kind: Any, value: Any) -> Any:
    """``value`` as a ``kind`` (text read as it; an int for a float), else an error."""
    if value is None or not isinstance(kind, type):
        return value
    if isinstance(value, bool) or kind is bool:
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if kind is bool and isinstance(value, bool):
            return value
        raise TypeError(value)
    if kind in (int, float) and isinstance(value, (str, int, float)):
        number = kind(value)
        if kind is int and isinstance(value, float) and value != number:
            raise ValueError(value)
        return number
    if not isinstance(value, kind):
        raise TypeError(value)
    return value


def from_words(cls: type, words: list[str], flag: str) -> dict[str, Any]:
    """The values of a group of settings ``cls`` from ``KEY=VALUE`` words (what
    :func:`cli_flags` writes for a mapping), typed by its fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for word in words:
        key, sep, text = word.partition("=")
        if not sep or key not in fields:
            raise SpagInputError(
                f"{flag}: {word!r} is not KEY=VALUE with KEY one of {', '.join(fields)}"
            )
        kind = field_type(cls, fields[key])
        try:
            if _is_list(kind):
                item = typing.get_args(kind)[0]
                values[key] = tuple(_typed(item, t) for t in text.split(",") if t)
            else:
                values[key] = _typed(kind, text)
        except (TypeError, ValueError):
            raise SpagInputError(f"{flag}: {key}={text!r} is not a {_name(kind)}") from None
    return values


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


def step_flags(cls: type, **options: Any) -> str:
    """A rule's command line part for the step whose settings ``cls`` declares: each
    option at the step's own default is left out (the step then runs with that same
    value), so that a knob added at its default leaves every existing job's command
    line, and so Snakemake's params trigger, as it was."""
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if _required(f) or f.metadata.get("env"):
            continue
        name, default = _flag_name(f), _default(f)
        defaults[name] = default
        if field_type(cls, f) is bool and default is True:
            defaults[f"no_{name}"] = False
    kept = {k: v for k, v in options.items() if k not in defaults or not _same(v, defaults[k])}
    return cli_flags(**kept)


def off_default(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (by field name) without those at ``cls``'s own default: what a new
    setting added at its default leaves as it was (a journal's key, a command line)."""
    defaults = {f.name: _default(f) for f in dataclasses.fields(cls) if not _required(f)}
    return {k: v for k, v in values.items() if k not in defaults or not _same(v, defaults[k])}


def _same(value: Any, default: Any) -> bool:
    """Equal as the step would hold them (2 and 2.0 alike; 1 and True not)."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    return value == default


def cli_flags(**options: Any) -> str:
    """Options rendered as a shell-quoted command line part (what a rule's shell gets).

    ``None``, ``False`` and ``[]`` leave the flag out; ``True`` is a bare flag; a list
    is one flag followed by its values; a mapping one flag and its ``KEY=VALUE`` words
    (its ``None`` items left out).
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
        elif isinstance(value, dict):
            # KEY=VALUE words, a list's items joined by commas: no braces, which a rule's
            # params would take for wildcards.
            # A None item is left out: the step reads its field's default (None).
            words = [f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                     for k, v in value.items() if v is not None]  # fmt: skip
            parts.append(" ".join([flag, *map(shlex.quote, words)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)
