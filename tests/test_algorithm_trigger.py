"""rerun_on_algorithm_edits: which source files make up each part of the algorithm (the
e2e test in test_workflow_e2e.py shows what an edit reruns)."""

from __future__ import annotations

import subprocess
import sys

from spag.ops.algorithm import algorithm_params, module_closure

CONFIG = {
    "rerun_on_algorithm_edits": True,
    "game": {"name": "taboo"},
    "rewards": {"scheme": "winners"},
    "spag": {"objective": "offline_po"},
}


def _names(module: str) -> list[str]:
    return [name for name, _ in module_closure(module)]


def test_each_part_is_its_module_and_the_core_modules_it_imports():
    assert _names("spag.game.taboo") == ["spag.game.base", "spag.game.taboo"]
    rewards = _names("spag.game.rewards")
    assert "spag.game.samples" in rewards and "spag.game.imitation" not in rewards
    # The losses are imported inside the objectives' functions: found all the same.
    assert _names("spag.training.objectives") == [
        "spag.training.losses",
        "spag.training.objectives",
    ]
    for module in ("spag.game.taboo", "spag.game.rewards", "spag.training.objectives"):
        assert not any(n.startswith(("spag.generation", "spag.ops")) for n in _names(module))


def test_off_adds_no_params_and_on_one_digest_per_part():
    assert algorithm_params({**CONFIG, "rerun_on_algorithm_edits": False}, "game") == {}
    digests = {p: algorithm_params(CONFIG, p, "spag")["algorithm"] for p in ("game", "rewards")}
    assert digests["game"].startswith("game:") and digests["rewards"].startswith("rewards:")
    assert algorithm_params(CONFIG, "objective", "spag") == algorithm_params(
        CONFIG, "objective", "spag"
    )


def test_the_closure_imports_nothing():
    """Planning with the key on reads files: torch (imported by the losses) stays out."""
    code = (
        "import sys; from spag.ops.algorithm import module_closure;"
        "module_closure('spag.training.objectives'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
