"""Run the workflow in a scratch copy, as a user would in their own checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "config.yaml", "rules", "data", "profiles", "report", "envs")

# A run small enough for a test: 1 epoch, 2 shards, a dozen words, short replies.
TINY_OVERLAY = {
    "epochs": 1,
    "base_model": {"tiny": {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64}},
    "words": {"num_train": 8, "num_test": 4},
    "selfplay": {"num_shards": 2, "max_new_tokens": 8, "batch_size": 16},
    "game": {"max_turns": 3},
    "imitation": {"num_train_epochs": 1, "max_steps": 4, "per_device_batch_size": 4},
    "spag": {"max_steps": 2, "per_device_batch_size": 4},
    "evaluation": {"max_new_tokens": 8, "reasoning": {"limit": 4}},
}


def make_workdir(root: Path, overlay: dict | None = None) -> Path:
    """Copy the workflow into ``root`` and write ``overlay`` as its extra config file."""
    root.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, root / name)
    (root / "overlay.yaml").write_text(yaml.safe_dump(overlay or {}))
    return root


def copy_run(src: Path, dest: Path) -> Path:
    """A copy of a finished run folder that a test may change: files, Snakemake's
    records and modification times kept, so the copy plans exactly as the original."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def snakemake(
    workdir: Path,
    *args: str,
    config: dict | None = None,
    env: dict | None = None,
    timeout: int = 900,
) -> subprocess.CompletedProcess:
    """Run snakemake in ``workdir`` with its overlay and, if given, one more config layer."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **(env or {}))
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    # Targets first: --configfile and --config take several values.
    configfiles = ["overlay.yaml"]
    if config is not None:
        (workdir / "extra.yaml").write_text(yaml.safe_dump(config))
        configfiles.append("extra.yaml")
    cmd = [os.path.join(bindir, "snakemake"), *args, "--configfile", *configfiles]
    return subprocess.run(
        cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )


def deep_merge(base: dict, layer: dict) -> dict:
    """``base`` with ``layer`` on top, as Snakemake layers config files: mappings merge
    key by key, any other value replaces."""
    out = dict(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


FAULTS_DIR = Path(__file__).resolve().parent / "faults"


def failing_shards_env(*shards: int) -> dict[str, str]:
    """Environment that makes `spag play` fail for these shard indices (tests/faults)."""
    path = os.pathsep.join(p for p in (str(FAULTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "SPAG_TEST_FAIL_SHARDS": ",".join(map(str, shards))}


def slow_step_env(step: str, seconds: float) -> dict[str, str]:
    """Environment that makes `spag <step>` sleep before it runs (tests/faults)."""
    path = os.pathsep.join(p for p in (str(FAULTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "SPAG_TEST_SLOW_STEP": f"{step}:{seconds}"}


_JOB_ROW = re.compile(r"^(\w+)\s+(\d+)$")


def job_counts(output: str) -> Counter:
    """Parse the 'Job stats' table that Snakemake prints for a (dry) run."""
    counts: Counter = Counter()
    in_table = False
    for line in output.splitlines():
        if line.startswith("Job stats:"):
            in_table, counts = True, Counter()
            continue
        if in_table:
            m = _JOB_ROW.match(line.strip())
            if m and m.group(1) != "total":
                counts[m.group(1)] = int(m.group(2))
            elif line.strip().startswith("total"):
                in_table = False
    return counts
