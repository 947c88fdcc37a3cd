"""The package's shape (docs/design.md, "Package layout"): the research core and
operations apart, and no import cycle between modules.

Read from the sources with ``ast``, so a lazy import inside a function counts as a
dependency too: two modules that need each other are one module in two files, even
where importing them lazily keeps ``import`` working.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workflow_scripts" / "spag"
CORE = ("game", "training", "generation", "evaluation", "data", "models", "judge")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, module: str, *, top_level: bool) -> set[str]:
    """Modules of ``spag`` that ``tree`` imports (``from spag.x import y`` counts
    ``spag.x.y`` where that is a module, else ``spag.x``)."""
    nodes = tree.body if top_level else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If) and top_level:
            continue  # `if TYPE_CHECKING:` imports
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("spag"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                package = module.split(".")[: -node.level or None]
                base = ".".join([*package, node.module])
            if not base.startswith("spag"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return found


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _graph(*, top_level: bool) -> dict[str, set[str]]:
    return {
        name: {m for m in _imports(tree, name, top_level=top_level) if m in MODULES} - {name}
        for name, tree in TREES.items()
    }


def _half(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle_between_modules():
    graph = _graph(top_level=False)
    # A package's __init__ imports its own modules; that is not a cycle through it.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("half", CORE)
def test_the_research_core_does_not_reach_into_operations(half):
    """The core may use what ``spag.ops`` exports, never its modules, and never the
    step commands, the CLI, the config loader or the report."""
    graph = _graph(top_level=False)
    reached = {
        (name, m)
        for name, deps in graph.items()
        if _half(name) == half
        for m in deps
        if m.startswith(("spag.ops.", "spag.commands", "spag.cli", "spag.report"))
    }
    assert not reached, f"core modules importing operations' internals: {sorted(reached)}"


def test_operations_do_not_call_the_steps():
    graph = _graph(top_level=False)
    reached = {
        (name, m)
        for name, deps in graph.items()
        if _half(name) == "ops"
        for m in deps
        if m.startswith(("spag.commands", "spag.cli"))
    }
    assert not reached, sorted(reached)


def test_the_graph_reads_real_imports():
    """The checks above would pass on an empty graph: the parser must see known edges."""
    top = _graph(top_level=True)
    assert {"spag.game.base", "spag.generation.settings"} <= top["spag.game.selfplay"]
    assert "spag.game.taboo" in top["spag.judge"]
    lazy = _graph(top_level=False)
    assert "spag.ops.journal" in lazy["spag.commands.play"]
