"""Every script under perf/ still runs: its --help (or its smallest shape), every name it
imports from the package exists, and the studies' tables recompute exactly from their
committed run folders."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "perf").rglob("*.py"))
WITH_HELP = [p for p in SCRIPTS if "argparse" in p.read_text()]
STUDIES = [p for p in SCRIPTS if p.name == "summarize.py"]


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


def _run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_every_script_is_covered_here():
    others = {_name(p) for p in SCRIPTS} - {_name(p) for p in WITH_HELP + STUDIES}
    assert others == {"perf/compare_runs.py", "perf/cut_rate.py"}


@pytest.mark.parametrize("script", WITH_HELP, ids=_name)
def test_help(script):
    res = _run(script, "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("usage:"), res.stdout[:500]


@pytest.mark.parametrize("script", SCRIPTS, ids=_name)
def test_names_imported_from_the_package_exist(script):
    """Imports inside functions too: a script's --help does not run them."""
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "spag":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"
                ), f"{_name(script)}:{node.lineno}: {node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "spag":
                    importlib.import_module(alias.name)


@pytest.mark.parametrize("script", STUDIES, ids=lambda p: _name(p.parent))
def test_study_tables_recompute_from_the_committed_runs(script):
    res = _run(script)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == (script.parent / "tables.md").read_text()


def test_compare_runs_tells_identical_from_different(tmp_path):
    for side, value in (("a", "1"), ("b", "1"), ("c", "2")):
        (tmp_path / side / "results").mkdir(parents=True)
        (tmp_path / side / "results" / "x.tsv").write_text(f"k\tv\nx\t{value}\n")
    same = _run("perf/compare_runs.py", tmp_path / "a", tmp_path / "b")
    assert same.returncode == 0, same.stdout + same.stderr
    different = _run("perf/compare_runs.py", tmp_path / "a", tmp_path / "c")
    assert different.returncode == 1 and "x.tsv" in different.stdout, different.stdout


def test_cut_rate_reads_episodes(tmp_path):
    history = [{"role": "attacker", "content": "a"}, {"role": "defender", "content": "b"}]
    table = pa.table(
        {
            "history": [history],
            "message_tokens": [[30, 100]],
            "truncated_replies": [0],
            "policy_role": [None],
        }
    )
    pq.write_table(table, tmp_path / "episodes.parquet")
    res = _run("perf/cut_rate.py", tmp_path / "episodes.parquet")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "| self-play | defender | 1 | 100 | 100% | 100% | 100% | 100% | 100% | 0% |" in (
        res.stdout
    )
