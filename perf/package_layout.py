"""Lines and modules of the package by half: research core, operations, and the steps'
plumbing around them (docs/design.md, "Package layout").

    python perf/package_layout.py [--root CHECKOUT] [--ops-names DIR]

``--root`` reads another checkout (an earlier revision in a ``git worktree``). Before
``spag/ops`` existed operations sat among the core's modules: ``--ops-names`` counts a
module of the older tree (outside ``commands/``) as operations where a module of that
name lives in ``DIR``'s ``spag/ops`` (this checkout's, by default). Lines are physical lines of ``.py`` files.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CORE = ("game", "training", "generation", "evaluation", "data", "models", "judge.py")


def half(path: Path, package: Path, ops_names: set[str]) -> str:
    top = path.relative_to(package).parts[0]
    if top == "ops" or (top != "commands" and path.stem in ops_names):
        return "operations"
    if top in CORE:
        return "research core"
    return "around (cli, config, settings, commands, report)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--ops-names", type=Path, default=HERE)
    args = parser.parse_args()
    package = args.root / "workflow_scripts" / "spag"
    ops_dir = args.ops_names / "workflow_scripts" / "spag" / "ops"
    ops_names = {p.stem for p in ops_dir.glob("*.py")} - {"__init__"}
    lines: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        h = half(path, package, ops_names)
        lines[h] += len(path.read_text().splitlines())
        modules[h] += 1
    readme = len((args.root / "README.md").read_text().splitlines())
    print("| part | modules | lines |\n|---|---|---|")
    for h in sorted(lines):
        print(f"| {h} | {modules[h]} | {lines[h]:,} |")
    print(f"| package | {sum(modules.values())} | {sum(lines.values()):,} |")
    print(f"| README.md | | {readme} |")


if __name__ == "__main__":
    main()
