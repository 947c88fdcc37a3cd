"""The GPU check (perf/gpu_first_contact.sh) at its toy sizes on the CPU, so it cannot rot
between the rare runs on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("env", "models", "generation", "selfplay", "invariance", "scoring", "training")


def test_the_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GFC_WORK": str(tmp_path / "work")}
    env["GFC_STEPS"] = " ".join(STEPS)  # selfplay runs only where named
    subprocess.run(
        ["bash", str(REPO / "perf/gpu_first_contact.sh"), str(out), "--cpu"],
        check=True, env=env, timeout=900,
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    done = {r["step"]: r for r in rows if r["what"] == "done"}
    assert list(done) == list(STEPS)
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
