"""The configuration reference (``docs/config.md``), generated from the config schema.

The schema (``spag.config.load_schema``: ``spag/schemas/config.schema.yaml``, its
sections generated from the dataclasses that declare them) lists every key; this module
renders it as Markdown, one table per top-level section, so that
the reference cannot drift from what the validator accepts. Regenerate it with::

    python scripts/config_doc.py > docs/config.md

(a project tool, not part of the installed package: no pipeline step needs it).

Properties of one parent that share a definition (``$ref: "#/$defs/..."``) are
documented once, with a placeholder in the key path: the training stages
``imitation`` and ``spag`` as ``<stage>.*``, the rule families of ``resources``
as ``resources.<family>.*``. The two stages share ``$defs.training`` but not all
of its defaults: ``objective``, ``learning_rate`` and ``kl_coeff`` are filled per stage by
:func:`spag.config.validate_config`, and the reference shows both values.
"""

from __future__ import annotations

import html
import math
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

SCHEMA_PATH = "workflow_scripts/spag/schemas/config.schema.yaml"
REGENERATE = "python scripts/config_doc.py > docs/config.md"
HEADER_COLUMNS = ("key", "type", "default", "allowed", "description")
# Placeholder of the key path component that stands for every property sharing a definition.
PLACEHOLDERS = {"training": "stage", "resources": "family"}
# Heading of a group of top-level sections that share a definition.
GROUP_TITLES = {"training": "Training stages"}


# ------------------------------------------------------------ schema helpers
def resolve(schema: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` with a local ``$ref`` replaced by its target (the node's own keys win)."""
    ref = node.get("$ref")
    if ref is None:
        return dict(node)
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise ValueError(f"only local references are supported, got $ref {ref!r}")
    target: Any = schema
    for part in ref[2:].split("/"):
        target = target[part.replace("~1", "/").replace("~0", "~")]
    merged = resolve(schema, target)
    merged.update((k, v) for k, v in node.items() if k != "$ref")
    return merged


def ref_name(node: Mapping[str, Any]) -> str | None:
    """The name of the ``$defs`` entry ``node`` refers to, if it refers to one."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return ref.removeprefix("#/$defs/")
    return None


def _is_object(node: Mapping[str, Any]) -> bool:
    return "properties" in node


def _groups(properties: Mapping[str, Any]) -> list[tuple[str | None, list[str]]]:
    """Properties in schema order; those sharing one ``$defs`` entry (2 or more) grouped.

    Each item is ``(definition name, member names)``, or ``(None, [name])`` for a
    property documented on its own. A group sits where its first member is.
    """
    shared: dict[str, list[str]] = {}
    for name, node in properties.items():
        ref = ref_name(node)
        if ref is not None:
            shared.setdefault(ref, []).append(name)
    out: list[tuple[str | None, list[str]]] = []
    done: set[str] = set()
    for name, node in properties.items():
        ref = ref_name(node)
        if ref is not None and len(shared[ref]) > 1:
            if ref not in done:
                done.add(ref)
                out.append((ref, shared[ref]))
        else:
            out.append((None, [name]))
    return out


def stage_defaults() -> dict[str, dict[str, Any]]:
    """Defaults that the code fills per training stage (``imitation``/``spag``), by key:
    the stage's objective (``spag.training.objectives.STAGE_OBJECTIVE``) and what it
    implies (``spag.training.objectives.paper_defaults``)."""
    from spag.training.objectives import STAGE_OBJECTIVE, paper_defaults

    return {
        stage: {"objective": objective, **paper_defaults(objective)}
        for stage, objective in STAGE_OBJECTIVE.items()
    }


# ------------------------------------------------------------ cell formatting
def format_value(value: Any) -> str:
    """A value as it would be written in the YAML config (flow style for lists and maps)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        text = repr(value)
        # 5e-06 -> 5e-6, as people write it
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", text).replace("e+", "e")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _code(text: str) -> str:
    """An inline code span for a table cell (a ``|`` must be escaped even there)."""
    text = text.replace("|", "\\|")
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _prose(text: str) -> str:
    """Free text for a table cell: one line, HTML-like text and ``|`` escaped."""
    text = " ".join(str(text).split())
    return html.escape(text, quote=False).replace("|", "\\|")


def format_type(node: Mapping[str, Any]) -> str:
    kind = node.get("type")
    if kind is None and "enum" in node:
        names = sorted({_json_type(v) for v in node["enum"]})
        kind = names[0] if len(names) == 1 else names
    if kind is None:
        return "any"
    kinds = kind if isinstance(kind, list) else [kind]
    parts = []
    for k in kinds:
        if k == "array" and isinstance(node.get("items"), Mapping):
            parts.append(f"list of {format_type(node['items'])}")
        else:
            parts.append(str(k))
    return " or ".join(parts)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def format_allowed(node: Mapping[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append(", ".join(_code(format_value(v)) for v in node["enum"]))
    bounds = (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    )
    for key, sign in bounds:
        if key in node:
            parts.append(f"{sign} {format_value(node[key])}")
    if node.get("minLength") == 1:
        parts.append("not empty")
    elif "minLength" in node:
        parts.append(f"at least {node['minLength']} characters")
    if "maxLength" in node:
        parts.append(f"at most {node['maxLength']} characters")
    if "pattern" in node:
        parts.append(f"matches {_code(node['pattern'])}")
    return "; ".join(parts)


# ------------------------------------------------------------ rows and sections
class _Row:
    def __init__(self, path: str, node: Mapping[str, Any], default: str) -> None:
        self.path = path
        self.node = node
        self.default = default

    def cells(self) -> list[str]:
        return [
            _code(self.path),
            _prose(format_type(self.node)),
            self.default,
            format_allowed(self.node),
            _prose(self.node.get("description", "")),
        ]


def _default_cell(node: Mapping[str, Any], per_stage: Mapping[str, Any] | None) -> str:
    """The schema's default; else the values the code fills per stage; else ``none``."""
    if "default" in node:
        return _code(format_value(node["default"]))
    if per_stage:
        values = ", ".join(f"{stage} {_code(format_value(v))}" for stage, v in per_stage.items())
        return f"per stage: {values}"
    return "none"


def _rows(
    schema: Mapping[str, Any],
    node: Mapping[str, Any],
    prefix: str,
    per_stage: Mapping[str, Mapping[str, Any]] | None = None,
) -> Iterator[_Row | str]:
    """Table rows of the properties under ``node`` (key paths start with ``prefix``).

    A group of properties sharing a definition yields a note line (a ``str``) naming
    its members, then the definition's rows under a placeholder.
    """
    properties = node.get("properties", {})
    for ref, members in _groups(properties):
        if ref is not None:
            yield _group_note(schema, properties, ref, members, prefix)
            sub = resolve(schema, properties[members[0]])
            place = f"{prefix}<{PLACEHOLDERS.get(ref, 'name')}>"
            yield from _rows(schema, sub, place + ".", _per_stage_values(members))
            continue
        name = members[0]
        child = resolve(schema, properties[name])
        path = prefix + name
        if _is_object(child):
            if child.get("description"):
                yield _Row(path, child, _default_cell(child, None))
            yield from _rows(schema, child, path + ".", per_stage)
            continue
        stage_values = {s: v[name] for s, v in (per_stage or {}).items() if name in v}
        yield _Row(path, child, _default_cell(child, stage_values))


def _per_stage_values(members: list[str]) -> dict[str, dict[str, Any]] | None:
    defaults = stage_defaults()
    values = {m: defaults[m] for m in members if m in defaults}
    return values or None


def _group_note(
    schema: Mapping[str, Any],
    properties: Mapping[str, Any],
    ref: str,
    members: list[str],
    prefix: str,
) -> str:
    place = f"{prefix}<{PLACEHOLDERS.get(ref, 'name')}>"
    names = ", ".join(_code(prefix + m) for m in members)
    defaults = {format_value(properties[m].get("default")) for m in members}
    note = f"{_code(place)} stands for each of {names}; they share one definition"
    if len(defaults) == 1 and all("default" in properties[m] for m in members):
        note += f" and each defaults to {_code(defaults.pop())} (every key at its default)"
    desc = resolve(schema, properties[members[0]]).get("description")
    if desc:
        note += f". {_prose(desc)}"
    return note + "."


def _table(rows: list[_Row | str]) -> list[str]:
    notes = [r for r in rows if isinstance(r, str)]
    entries = [r for r in rows if isinstance(r, _Row)]
    lines: list[str] = []
    for note in notes:
        lines += [note, ""]
    lines.append("| " + " | ".join(HEADER_COLUMNS) + " |")
    lines.append("|" + "---|" * len(HEADER_COLUMNS))
    lines += ["| " + " | ".join(row.cells()) + " |" for row in entries]
    return lines


def render_config_reference(schema: dict) -> str:
    """Markdown reference of every configuration key of ``schema`` (the config schema)."""
    out = [
        "# Configuration reference",
        "",
        f"Generated from `{SCHEMA_PATH}`; do not edit by hand. Regenerate it with",
        f"`{REGENERATE}` (a test fails while it is out of date).",
        "",
    ]
    if schema.get("description"):
        out += [" ".join(str(schema["description"]).split()), ""]
    out += [
        "Columns: the key path as written in a config file (`selfplay.top_k` is `top_k`",
        "under `selfplay:`), its type, its default when the key is left out, the values",
        "or range the validator accepts, and what it does. The embedded default",
        "`config.yaml` sets some keys to other values than these defaults;",
        "`configs/*.yaml` are complete examples.",
        "",
    ]
    properties = schema.get("properties", {})
    top_level: list[_Row | str] = []

    def flush() -> None:
        if top_level:
            out.extend(["## Top-level keys", "", *_table(top_level), ""])
            top_level.clear()

    for ref, members in _groups(properties):
        if ref is not None:
            flush()
            title = GROUP_TITLES.get(ref, ref)
            names = ", ".join(f"`{m}`" for m in members)
            sub = resolve(schema, properties[members[0]])
            place = f"<{PLACEHOLDERS.get(ref, 'name')}>."
            per_stage = _per_stage_values(members)
            rows = [_group_note(schema, properties, ref, members, "")]
            rows += list(_rows(schema, sub, place, per_stage))
            if per_stage:
                rows.append(
                    "A default shown per stage is not in the schema: the code fills it in"
                    " for each stage when the configuration is validated (`spag.config`)."
                )
            out += [f"## {title}: {names}", "", *_table(rows), ""]
            continue
        name = members[0]
        node = resolve(schema, properties[name])
        if not _is_object(node):
            top_level.append(_Row(name, node, _default_cell(node, None)))
            continue
        flush()
        out += [f"## `{name}`", ""]
        if node.get("description"):
            out += [_prose(node["description"]), ""]
        out += [*_table(list(_rows(schema, node, name + "."))), ""]
    flush()
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the reference to standard output: ``python scripts/config_doc.py > docs/config.md``."""
    from spag.config import load_schema

    args = sys.argv[1:] if argv is None else argv
    if args:
        print(f"usage: {REGENERATE}", file=sys.stderr)
        return 2
    sys.stdout.write(render_config_reference(load_schema()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
