"""docs/config.md is the configuration schema rendered: current, and complete."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from spag.config import load_schema, validate_config

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "config.md"


def _load_script(name: str):
    # scripts/ is not a package: the renderer is a project tool run by path.
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


config_doc = _load_script("config_doc")
REGENERATE = config_doc.REGENERATE
format_value = config_doc.format_value
main = config_doc.main
render_config_reference = config_doc.render_config_reference
STAGES = ("imitation", "spag")


@pytest.fixture(scope="module")
def doc() -> str:
    if not DOC.is_file():
        pytest.fail(f"{DOC} is missing; generate it with: {REGENERATE}")
    return DOC.read_text(encoding="utf-8")


def _deref(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    return schema["$defs"][ref.removeprefix("#/$defs/")]


def _key_paths(schema: Mapping[str, Any], node: Mapping[str, Any], prefix=()) -> Iterator[tuple]:
    """Every key of the schema as a tuple of names (objects and their keys), refs followed."""
    for name, sub in node.get("properties", {}).items():
        path = (*prefix, name)
        yield path
        yield from _key_paths(schema, _deref(schema, sub), path)


def _table_keys(doc: str) -> list[str]:
    """The key paths of the reference's table rows (first cell, a code span)."""
    return re.findall(r"^\| `([^`]+)` \|", doc, flags=re.MULTILINE)


def test_config_md_is_the_rendered_schema(doc):
    expected = render_config_reference(load_schema())
    if doc != expected:
        have, want = doc.splitlines(), expected.splitlines()
        line = next(
            (i for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b),
            min(len(have), len(want)),
        )
        pytest.fail(
            "docs/config.md differs from the config schema (first difference at line "
            f"{line + 1}); regenerate it with: {REGENERATE}",
            pytrace=False,
        )


def test_every_schema_key_is_documented(doc):
    schema = load_schema()
    rows = _table_keys(doc)
    assert rows, "no table rows found in docs/config.md"
    backticked = set(re.findall(r"`([^`]+)`", doc))
    missing = []
    for path in _key_paths(schema, schema):
        # A key is in a row whose path matches it name by name, where a shared
        # definition's members may appear as a placeholder (`resources.<family>.gpus`);
        # each member is then named in the text.
        pattern = r"\.".join(f"(?:{re.escape(p)}|<[a-z_]+>)" for p in path)
        leaf_row = any(re.fullmatch(pattern, r) for r in rows)
        prefix_row = any(re.match(pattern + r"\.", r) for r in rows)
        named = all(any(p in b.split(".") for b in backticked) for p in path)
        if not ((leaf_row or prefix_row) and named):
            missing.append(".".join(path))
    assert not missing, f"schema keys missing from docs/config.md: {missing}; run {REGENERATE}"


def test_every_documented_key_is_in_the_schema(doc):
    schema = load_schema()
    known = {".".join(p) for p in _key_paths(schema, schema)}
    for row in _table_keys(doc):
        concrete = re.sub(r"<[a-z_]+>", "*", row)
        pattern = re.escape(concrete).replace(r"\*", r"[^.]+")
        assert any(re.fullmatch(pattern, k) for k in known), f"{row}: not a schema key"


def test_stage_defaults_are_the_ones_the_config_gets():
    filled = validate_config({})
    text = render_config_reference(load_schema())
    training = load_schema()["$defs"]["training"]["properties"]
    per_stage = [key for key, node in training.items() if "default" not in node]
    assert per_stage, "expected keys whose default differs by stage"
    for key in per_stage:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `<stage>.{key}` |")]
        for stage in STAGES:
            if key in filled[stage]:
                assert f"{stage} `{format_value(filled[stage][key])}`" in row, (key, stage)


def test_main_prints_the_reference(capsys):
    assert main([]) == 0
    assert capsys.readouterr().out == render_config_reference(load_schema())
