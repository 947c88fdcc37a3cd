"""A tiny end-to-end run (a copy of the session's shared one, conftest's ``tiny_run``):
a shard that fails, the rerun of exactly that shard, the rebuild of one removed shard
with nothing else redone, the plan after a removed intermediate file, the control arm."""

from __future__ import annotations

import csv
import json
import shutil

import pyarrow.parquet as pq
import pytest
from workflow_utils import (
    REPO,
    TINY_OVERLAY,
    copy_run,
    failing_shards_env,
    job_counts,
    snakemake,
)

from spag.cli import main

pytestmark = pytest.mark.e2e

# What one shard's rebuild must redo, and nothing more.
DOWNSTREAM_OF_SHARD = {
    "selfplay": 1,
    "merge_episodes": 1,
    "assign_rewards": 1,
    "score_ref": 1,
    "train_spag": 1,
    "eval_play": 1,
    "eval_merge": 1,
    "eval_games": 1,
    "eval_reasoning": 1,
    "eval_hints": 1,
    "eval_inference": 1,
    "epoch_summary": 1,
    "spag_epoch1": 1,
}


def _fingerprint(path):
    return path.stat().st_mtime_ns


def test_tiny_run_failed_shard_and_rerun(tiny_run, tmp_path):
    wd = copy_run(tiny_run, tmp_path / "run")
    shard0 = wd / "results/epoch1/selfplay/shard_000.parquet"
    shard1 = wd / "results/epoch1/selfplay/shard_001.parquet"
    m0_model = wd / "results/imitation/model/config.json"
    m0_reasoning = wd / "results/eval/reasoning/imitation.json"
    shard0_bytes = shard0.read_bytes()

    # 1. Both shards and one of M0's evaluations are lost; shard 1 fails on purpose;
    #    --keep-going lets everything else that can, finish: shard 0 is rebuilt
    #    byte-identical (seeded, CPU), M0's evaluation again, M0 itself is not redone.
    for path in (shard0, shard1, m0_reasoning):
        path.unlink()
    untouched = {m0_model: _fingerprint(m0_model)}
    res = snakemake(wd, "spag_epoch1", "--keep-going", env=failing_shards_env(1))
    assert res.returncode != 0
    assert shard0.is_file() and not shard1.exists(), res.stderr[-3000:]
    assert shard0.read_bytes() == shard0_bytes
    assert m0_reasoning.is_file()
    assert {p: _fingerprint(p) for p in untouched} == untouched

    # 2. The next run plans exactly that shard and what depends on it.
    res = snakemake(wd, "spag_epoch1", "-n")
    assert res.returncode == 0, res.stderr
    assert dict(job_counts(res.stdout + res.stderr)) == DOWNSTREAM_OF_SHARD
    planned = _planned_outputs(res.stdout)
    assert "selfplay/shard_001" in planned and "selfplay/shard_000.parquet" not in planned

    untouched = {p: _fingerprint(p) for p in (shard0, m0_model)}
    res = snakemake(wd, "spag_epoch1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p: _fingerprint(p) for p in untouched} == untouched

    # 3. The products follow the data contracts.
    episodes = pq.read_table(wd / "results/epoch1/episodes.parquet")
    assert {"episode_id", "target_word", "max_turns", "history", "outcome", "num_messages"} <= set(
        episodes.column_names
    )
    assert episodes.num_rows == TINY_OVERLAY["words"]["num_train"]
    scored = pq.read_table(wd / "results/epoch1/scored.parquet")
    assert scored.column_names[:8] == [
        "type", "role", "episode_id", "turn", "query", "target", "reward", "weight",
    ]  # fmt: skip
    assert "ref_logprob" in scored.column_names
    assert "sft" in set(scored.column("type").to_pylist())
    model = wd / "results/epoch1/model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert (wd / "results/epoch1/summary.tsv").is_file()

    # 4. A removed shard that had not failed plans the same: itself and its downstream,
    #    nothing else (its rebuild, byte-identical with nothing else redone: step 1).
    aside = tmp_path / "shard_000.parquet"
    shard0.rename(aside)
    res = snakemake(wd, "spag_epoch1", "-n")
    aside.rename(shard0)
    assert res.returncode == 0, res.stderr
    assert dict(job_counts(res.stdout + res.stderr)) == DOWNSTREAM_OF_SHARD
    planned = _planned_outputs(res.stdout)
    assert "selfplay/shard_000" in planned and "selfplay/shard_001.parquet" not in planned

    control = tmp_path / "control"
    shutil.copytree(wd, control, symlinks=True)

    # 5. The epoch's target means what it says: a removed intermediate (the episodes)
    #    is planned again with its dependents, the shards are not.
    (wd / "results/epoch1/episodes.parquet").unlink()
    res = snakemake(wd, "spag_epoch1", "-n")
    assert res.returncode == 0, res.stderr
    expected = {k: v for k, v in DOWNSTREAM_OF_SHARD.items() if k != "selfplay"}
    assert dict(job_counts(res.stdout + res.stderr)) == expected

    # 6. The control arm of the same run: one switch; the same games, samples and steps
    #    with the game samples weighing 0; M0 and the self-play games are not redone.
    res = snakemake(control, "spag_epoch1", config={"rewards": {"control": True}})
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res.stdout + res.stderr)
    assert counts["assign_rewards"] == 1 and "selfplay" not in counts
    assert "train_imitation" not in counts
    spag_samples = pq.read_table(wd / "results/epoch1/samples.parquet").to_pandas()
    control_samples = pq.read_table(control / "results/epoch1/samples.parquet").to_pandas()
    # The switch reached the step (the weights themselves: tests/test_rewards.py; this
    # tiny model's games are rarely decisive, so its epoch may have no game samples).
    log = (control / "results/logs/epoch1/assign_rewards.log").read_text()
    assert "weighing 0: control arm" in log
    assert (control_samples.loc[control_samples["type"] == "game", "weight"] == 0).all()
    same = spag_samples.drop(columns="weight")
    assert same.equals(control_samples.drop(columns="weight"))
    steps = [len(csv_rows(arm / "results/epoch1/loss.tsv")) for arm in (wd, control)]
    assert steps[0] == steps[1] > 0
    (summary,) = csv_rows(control / "results/epoch1/summary.tsv")
    assert summary["roles_untrained"] == "attacker defender"
    out = tmp_path / "arms.tsv"
    assert main(["compare-arms", "--spag", str(wd), "--control", str(control),
                 "--game", "taboo", "--output", str(out)]) == 0  # fmt: skip
    rows = csv_rows(out)
    assert {r["model"] for r in rows} == {"epoch1"}
    assert {"win_rate", "broke_rules_rate", "hints_mrr_best", "inference_mrr_best"} <= {
        r["metric"] for r in rows
    }
    wins = next(r for r in rows if r["metric"] == "win_rate" and r["group"] == "all")
    assert int(wins["pairs"]) == 2 * TINY_OVERLAY["words"]["num_test"]
    # Reasoning is paired item by item too: an interval around the difference.
    (reasoning,) = [r for r in rows if r["metric"].startswith("reasoning_")]
    assert float(reasoning["lo"]) <= float(reasoning["diff"]) <= float(reasoning["hi"])


def _planned_outputs(dry_run_stdout: str) -> str:
    return "\n".join(line for line in dry_run_stdout.splitlines() if "output:" in line)


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_a_finished_run_switched_to_role_baselines_plans_its_rewards_again(tiny_run, tmp_path):
    """rewards.scheme: rae on a finished run of another scheme: the epoch's rewards and
    what reads them are planned again; the games and M0 are not."""
    wd = copy_run(tiny_run, tmp_path / "run")
    res = snakemake(wd, "spag_epoch1", "-n", config={"rewards": {"scheme": "rae"}})
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res.stdout + res.stderr)
    assert counts["assign_rewards"] == 1 and counts["train_spag"] == 1, counts
    assert not {"selfplay", "train_imitation", "score_imitation"} & set(counts), counts


def test_an_edit_of_the_algorithm_reruns_what_it_changes(tiny_run, tmp_path):
    """rerun_on_algorithm_edits: an edit of the reward schemes' module plans the rewards
    and what reads them again, not self-play nor M0; an edit of a backend plans nothing.
    The run is marked as built under the key (``--touch``), and the edits are made to
    a copy of the package."""
    wd = copy_run(tiny_run, tmp_path / "run")
    package = tmp_path / "package"
    shutil.copytree(REPO / "workflow_scripts" / "spag", package / "spag")
    env = {"PYTHONPATH": str(package)}
    on = {"rerun_on_algorithm_edits": True}
    res = snakemake(wd, "spag_epoch1", "--touch", config=on, env=env)
    assert res.returncode == 0, res.stderr[-3000:]

    def plan():
        res = snakemake(wd, "spag_epoch1", "-n", config=on, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        return job_counts(res.stdout + res.stderr)

    assert not plan()
    rewards = package / "spag" / "game" / "rewards.py"
    rewards.write_text(rewards.read_text().replace("def winners(", "# edited\ndef winners(", 1))
    counts = plan()
    assert counts["assign_rewards"] == counts["train_spag"] == counts["eval_play"] == 1, counts
    assert not {"selfplay", "merge_episodes", "imitation_samples", "train_imitation"} & set(
        counts
    ), counts
    shutil.copy2(REPO / "workflow_scripts" / "spag" / "game" / "rewards.py", rewards)
    backend = package / "spag" / "generation" / "hf_backend.py"
    backend.write_text(backend.read_text() + "# edited\n")
    assert not plan()


def test_a_lora_epoch_on_a_copy_of_the_run(tiny_run, tmp_path):
    """The SPAG stage with an adapter: M1's training and what reads M1 are redone, nothing
    before it; M1 is a full model folder (the adapter merged, and kept in adapter/) that
    every later step reads as after full fine-tuning."""
    wd = copy_run(tiny_run, tmp_path / "run")
    res = snakemake(wd, "spag_epoch1", config={"spag": {"peft": {"r": 4, "lora_alpha": 8}}})
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res.stdout + res.stderr)
    assert counts["train_spag"] == 1 and counts["eval_play"] == 1, counts
    for before in ("selfplay", "assign_rewards", "score_ref", "train_imitation"):
        assert before not in counts, counts
    model = wd / "results/epoch1/model"
    assert (model / "model.safetensors").is_file()
    assert (model / "adapter" / "adapter_model.safetensors").is_file()
    info = json.loads((model / "spag_training.json").read_text())
    assert info["peft"]["r"] == 4 and info["peft"]["lora_alpha"] == 8
    (summary,) = csv_rows(wd / "results/epoch1/summary.tsv")
    assert summary["epoch"] == "1"
