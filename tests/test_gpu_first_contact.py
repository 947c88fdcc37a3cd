"""The GPU check (perf/gpu_first_contact.sh) at its toy sizes on the CPU, so it cannot rot
between the rare runs on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("env", "models", "generation", "selfplay", "invariance", "scoring", "training", "shape7b")
# shape7b's sub-steps, in order (its CPU Adam build runs beside them).
SHAPE7B = ("build", "generate", "score", "lora", "full", "offload")


def test_flop_share_counts_the_passes(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "perf"))
    with monkeypatch.context() as m:
        m.setattr(os, "environ", os.environ.copy())  # the module sets HF_HUB_OFFLINE
        from gpu_first_contact import flop_share

    # 2N a token forward, 6N full training, 4N LoRA, 2N more with checkpointing.
    assert flop_share(10, 3, 2, peak=1) == 2 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="full", peak=1) == 6 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="lora", checkpointing=True, peak=1) == 6 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="full", checkpointing=True, peak=1) == 8 * 10 * 3 / 2


def test_the_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GFC_WORK": str(tmp_path / "work")}
    env["GFC_STEPS"] = " ".join(STEPS)  # selfplay and shape7b run only where named
    subprocess.run(
        ["bash", str(REPO / "perf/gpu_first_contact.sh"), str(out), "--cpu"],
        check=True, env=env, timeout=900,
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    done = {r["step"]: r for r in rows if r["what"] == "done"}
    assert [s for s in done if s != "shape7b_cpu_adam"] == [
        *STEPS[:-1],
        *(f"shape7b_{s}" for s in SHAPE7B),
    ]
    assert "shape7b_cpu_adam" in done
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]

    def measured(step: str, what: str) -> list[dict]:
        return [r for r in rows if r["step"] == step and r["what"] == what]

    assert [r["batch"] for r in measured("generation", "batch")] == [1, 2, 4]
    assert all(r["tokens_per_s"] > 0 for r in measured("generation", "batch"))
    # Self-play-shaped decoding at the largest batch and at batch 1 (no earlier checkout
    # here: the current code only).
    played = [r for r in measured("selfplay", "selfplay") if "side" in r]
    assert sorted((r["batch"], r["side"]) for r in played) == [(1, "after"), (4, "after")]
    assert all(r["generated_tokens"] > 0 and 0 < r["token_share"] <= 1 for r in played)
    # fp32 on the CPU: a game's replies do not depend on its batch.
    assert all(r["differing_replies"] == 0 for r in measured("invariance", "batch_1_vs_n"))
    agreement = {r["dtype"]: r for r in measured("scoring", "against_cpu_fp32")}
    assert agreement["float32"]["max_abs"] == 0.0
    assert 0 < agreement["bfloat16"]["max_abs"] < 0.1
    pairings = {r["name"]: r for r in measured("training", "pairing")}
    assert set(pairings) == {"fp32", "zero3_fp32", "autocast_bf16_fp32_scores", "lora_bf16"}
    assert all(p["estimate_bytes"] > 0 for p in pairings.values())
    # Scores in training's own precision: the first step's ratio is 1 up to rounding.
    for name in ("fp32", "zero3_fp32", "lora_bf16"):
        first = pairings[name]["first_step"]
        assert abs(float(first["ratio_mean"]) - 1) < 1e-5 and abs(float(first["kl"])) < 1e-5
    assert all(len(p["step_seconds"]) == 2 for p in pairings.values())

    # shape7b at toy sizes: a Llama built in bf16 and saved, CPU Adam ready for the
    # offload pairing, self-play at the slots the sizing picks, packed scoring.
    built = measured("shape7b_build", "built")[0]
    assert built["save_seconds"] > 0 and built["parameters"] > 0 and built["bytes"] > 0
    assert Path(measured("shape7b_cpu_adam", "cpu_adam")[0]["library"]).exists()
    calls = measured("shape7b_generate", "call")
    assert len(calls) == 2  # one turn: the attacker's message, the defender's
    played = measured("shape7b_generate", "selfplay")[0]
    assert played["batch_chosen"] == min(played["fit_rows"], played["batch_size"])
    assert all(c["sizing"]["rows"] <= played["batch_size"] for c in calls)
    assert played["tokens_per_s"] > 0 and 0 < played["token_share"] <= 1
    assert 0 < played["flop_share"] < 1 and played["estimate_bytes"] > 0
    scored = measured("shape7b_score", "score_file")[0]
    assert scored["tokens"] > 0 and scored["longest"] <= scored["max_length"]
    assert scored["tokens_per_s"] > 0 and 0 < scored["flop_share"] < 1
    # Training at the micro-batch 2: LoRA, full under ZeRO-3, ZeRO-3 with CPU offload.
    trained = {}
    for name in SHAPE7B[3:]:
        [row] = measured(f"shape7b_{name}", "pairing")
        trained[name] = row
        steps = 3 if name == "lora" else 2  # LoRA's third step profiled
        assert len(row["step_seconds"]) == steps and all(t > 0 for t in row["step_seconds"])
        assert len(measured(f"shape7b_{name}", "step")) == steps  # recorded as they ended
        assert all(t > 0 for t in row["step_tokens"]) and row["tokens_per_s"] > 0
        assert 0 < row["flop_share"] < 1 and row["estimate_bytes"] > 0
        # Scored in training's precision (float32 here): the ratio is 1, the KL 0.
        first = row["first_step"]
        assert abs(float(first["ratio_mean"]) - 1) < 1e-5 and abs(float(first["kl"])) < 1e-5
    assert trained["offload"]["estimate_host_bytes"] > 0
    assert trained["lora"]["flops_counted"] == {"passes": "lora", "checkpointing": True}
    # The profiled step: its top operations by time and its trace.
    assert "Self CPU" in (out / "profile_lora.txt").read_text()
    assert (out / "trace_lora.json.gz").stat().st_size > 0
