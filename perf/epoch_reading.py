"""What a reader follows to read one SPAG epoch, from the rules to the loss: the rule
files of an epoch, the `spag` steps they call, and every project module those import,
at module level or inside functions (a step imports its command module when it runs).

    python perf/epoch_reading.py [--root CHECKOUT] [--list]

Only the project's own files count (`rules/`, the `Snakefile`, `workflow_scripts/spag`);
libraries do not. Lines are physical lines. ``--root`` reads another checkout (an earlier
revision in a ``git worktree``), so that before and after are measured the same way.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
# The rule files one epoch's jobs come from (self-play, merge, rewards, scoring, training)
# and those they include for paths, checks and flags.
RULES = ("Snakefile", "rules/paths.smk", "rules/setup.smk", "rules/resources.smk",
         "rules/selfplay.smk", "rules/spag.smk")  # fmt: skip
# The steps those rules call.
STEPS = ("play", "merge-episodes", "assign-rewards", "score-ref", "train")


def _imports(source: str, package: str | None) -> set[str]:
    """Project modules named by the import statements of ``source`` (a module of
    ``package``, for relative imports), wherever they stand in the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and package:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            # `from spag.game import taboo` names a module too.
            names |= {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # Registries name modules imported on use ("spag.generation.hf_backend").
            if re.fullmatch(r"spag(\.\w+)+", node.value):
                names.add(node.value)
    return {n for n in names if n == "spag" or n.startswith("spag.")}


def _smk_python(text: str) -> str:
    """The import statements of a Snakemake file (the rest is not Python)."""
    pattern = r"^[ \t]*(?:from[ \t]+\S+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]+)|import[ \t]+[^\n]+)"
    return "\n".join(m.strip() for m in re.findall(pattern, text, re.M))


def closure(root: Path) -> dict[Path, int]:
    """Every file read to follow one epoch, with its lines."""
    package_dir = root / "workflow_scripts"

    def module_file(name: str) -> Path | None:
        path = package_dir.joinpath(*name.split("."))
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    cli = (package_dir / "spag/cli.py").read_text()
    commands = dict(re.findall(r'"([a-z-]+)": \("(\w+)",', cli))
    todo = [f"spag.commands.{commands[s]}" for s in STEPS] + ["spag.cli"]
    files: dict[Path, int] = {}
    for rel in RULES:
        text = (root / rel).read_text()
        files[root / rel] = len(text.splitlines())
        todo += sorted(_imports(_smk_python(text), None))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        if path is None:
            continue
        text = path.read_text()
        files[path] = len(text.splitlines())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += sorted(_imports(text, package)) + parents
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--list", action="store_true", help="each file with its lines")
    args = parser.parse_args()
    files = closure(args.root.resolve())
    if args.list:
        for path, lines in sorted(files.items()):
            print(f"{lines:6d}  {path.relative_to(args.root.resolve())}")
    print(f"{len(files)} files, {sum(files.values()):,} lines")


if __name__ == "__main__":
    main()
