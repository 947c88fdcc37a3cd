"""Settings declared in more than one class: the fields of the settings dataclasses.

    python perf/settings_fields.py [ROOT]

Reads every class under ROOT (default ``workflow_scripts``) whose name ends in
``Settings``, ``Config`` or ``Arguments``, or that declares a field with ``opt(...)`` or
``req(...)`` (the settings bases a step inherits, whatever their names), and counts its
annotated fields as written in its body (inherited ones are not declarations;
``ClassVar`` ones are not fields). Prints
the number of names, of declarations, of names declared in two or more classes, each
such name with its classes, and the lines that mention ``declared_as``.
"""

from __future__ import annotations

import argparse
import ast
import collections
from pathlib import Path

SUFFIXES = ("Settings", "Config", "Arguments")


def declarations(root: Path) -> dict[str, list[str]]:
    """Field name -> the classes that declare it, in file order."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            fields = [
                stmt
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and "ClassVar" not in ast.unparse(stmt.annotation)
            ]
            if node.name.endswith(SUFFIXES) or any(map(_is_setting, fields)):
                for stmt in fields:
                    found[stmt.target.id].append(node.name)
    return found


def _is_setting(stmt: ast.AnnAssign) -> bool:
    """A field declared with the settings helpers (``opt``, ``req``)."""
    value = stmt.value
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("opt", "req")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="workflow_scripts", help="package folder")
    root = Path(parser.parse_args().root)
    found = declarations(root)
    twice = {name: classes for name, classes in found.items() if len(classes) > 1}
    total = sum(map(len, found.values()))
    print(f"{len(found)} names, {total} declarations, {len(twice)} declared in 2+ classes")
    for name, classes in sorted(twice.items()):
        print(f"  {name}: {', '.join(classes)}")
    mentions = [
        f"{p}:{i}"
        for p in sorted(root.rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "declared_as" in line
    ]
    print(f"declared_as: {len(mentions)} lines", *mentions, sep="\n  " if mentions else "")


if __name__ == "__main__":
    main()
