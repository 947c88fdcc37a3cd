"""The algorithm's source as a rerun trigger (config ``rerun_on_algorithm_edits``).

Code is not among the workflow's rerun triggers (``profiles/default``): a faster backend
or a reformatted file must not redo days of GPU work. A researcher who edits the
algorithm in place turns this on: the source a job's results depend on then joins its
rule's params, so that Snakemake's params trigger reruns that job and what follows it.
The parts, each the module that defines the chosen piece and the modules of the research
core's game and training code (``spag.game``, ``spag.training``, ``spag.judge``) it
imports, at any depth, imports inside functions included:

- ``game``: the game's module (its rules, judge, prompt rendering; the prompts file is
  an input of those rules already): self-play, evaluation games, merging and judging;
- ``rewards``: the chosen scheme's module, with ``game``: reward assignment;
- ``imitation``: the imitation samples' module, with ``game``;
- ``objective``: the stage's objective's module and the losses it calls: training.

A backend, the trackers, the settings machinery or the docs are in no part: an edit
there reruns nothing. Nor are the Parquet contracts and word lists (``spag.data``) or
model loading and prompt rendering (``spag.models``): an edit there changes a contract
of every step, a rerun to decide by hand (``snakemake -R``). Off by default, so that a
run continued under newer code plans nothing; turning it on reruns each of those jobs
once (``snakemake --touch`` adopts the current source without rerunning).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from pathlib import Path
from typing import Any

# The research core's modules a part may reach through its imports.
CORE = ("spag.game", "spag.training", "spag.judge")
PARTS = ("game", "rewards", "imitation", "objective")


def _is_core(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in CORE)


def _imports(path: Path, package: str) -> set[str]:
    """The module names ``path`` imports anywhere (relative ones resolved in ``package``),
    with each ``from X import Y`` also as ``X.Y`` (a submodule, where Y is one)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


# The spag package's folder: its modules are found as files, without importing them.
PACKAGE = Path(__file__).resolve().parents[1]


def _module_file(name: str) -> Path | None:
    """The source file of module ``name``: a spag module by its path in the package (no
    import, so no parent package runs), another (a game registered from elsewhere) by
    the import system."""
    if name == "spag" or name.startswith("spag."):
        base = PACKAGE.joinpath(*name.split(".")[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


@functools.cache
def module_closure(module: str) -> tuple[tuple[str, Path], ...]:
    """``module`` and the research core's modules it imports, at any depth, as (name,
    file) pairs sorted by name."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        # ``from X import Y`` names X.Y too: a submodule where Y is one, else no file.
        todo += [m for m in _imports(path, package) if _is_core(m) and m not in seen]
    return tuple(sorted(seen.items()))


def part_modules(config: dict[str, Any], part: str, stage: str | None = None) -> list[str]:
    """The modules a part starts from under the validated ``config`` (``stage``: the
    training stage whose objective is meant)."""
    from spag.game.base import GAMES

    if part == "game":
        return [GAMES[config["game"]["name"]].partition(":")[0]]
    if part == "rewards":
        from spag.game.rewards import REWARD_SCHEMES

        scheme = REWARD_SCHEMES[config["rewards"]["scheme"]]
        return [scheme.pick.__module__, *part_modules(config, "game")]
    if part == "imitation":
        return ["spag.game.imitation", *part_modules(config, "game")]
    if part == "objective":
        from spag.training.objectives import OBJECTIVES

        return [type(OBJECTIVES[config[stage]["objective"]]).__module__]
    raise ValueError(f"unknown part {part!r} (known: {', '.join(PARTS)})")


def part_files(
    config: dict[str, Any], part: str, stage: str | None = None
) -> list[tuple[str, Path]]:
    """The modules of a part, (name, file) sorted by name: :func:`part_modules` and
    their closures."""
    return sorted({pair for m in part_modules(config, part, stage) for pair in module_closure(m)})


def algorithm_params(config: dict[str, Any], part: str, stage: str | None = None) -> dict[str, str]:
    """A rule's params for the part of the algorithm its jobs run: ``{"algorithm": digest}``
    under ``rerun_on_algorithm_edits``, else none (the rule's params stay as they were)."""
    if not config["rerun_on_algorithm_edits"]:
        return {}
    digest = hashlib.sha256()
    for name, path in part_files(config, part, stage):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return {"algorithm": f"{part}:{digest.hexdigest()[:16]}"}
