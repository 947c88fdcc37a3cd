"""The real pretrained model through one whole epoch of the workflow, on CPU:
SmolLM2-135M-Instruct converted from its packaged GGUF, chat prompts, top-k sampling."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO
from workflow_utils import make_workdir, snakemake

pytestmark = pytest.mark.e2e

# configs/smollm2-135m.yaml cut down to a few words, short replies and a few steps.
OVERLAY = yaml.safe_load((REPO / "configs" / "smollm2-135m.yaml").read_text())
OVERLAY.update(epochs=1)
OVERLAY["words"].update(num_train=4, num_test=3)
OVERLAY["game"].update(max_turns=2)
OVERLAY["selfplay"].update(num_shards=1, max_new_tokens=8, kv_reuse_gib=1)
OVERLAY["imitation"].update(max_steps=2, per_device_batch_size=4, max_length=384)
OVERLAY["spag"].update(max_steps=1, per_device_batch_size=4, max_length=384)
OVERLAY["data"]["sft_max_rows"] = 8
# The first eight demonstration games (both roles win among them) are imitation samples
# enough for M0's two steps; all 72 cost about 2.5 minutes of reference scoring here.
DEMOS = "data/demo_games_first8.json"
OVERLAY["data"]["imitation"] = DEMOS
OVERLAY["evaluation"].update(max_new_tokens=8)
OVERLAY["evaluation"]["reasoning"]["limit"] = 4
# Graded hints read every demonstration game per model: about 10 of this test's 13.5
# minutes with SmolLM2 on 2 cores. The tiny e2e run covers those rules; tests/test_hints.py
# scores SmolLM2 as the listener.
OVERLAY["evaluation"]["hints"] = {"listener": None}
# Sampled evaluation games are the greedy games' rules with sampling: the tiny e2e run
# and tests/test_play.py cover them.
OVERLAY["evaluation"]["sampled_games_per_secret"] = 0


def test_real_model_epoch_in_chat_format(tmp_path):
    wd = make_workdir(tmp_path / "run", OVERLAY)
    demos = json.loads((REPO / "data" / "demo_games.json").read_text())[:8]
    assert {"attacker_wins", "defender_wins"} <= {g["outcome"] for g in demos}
    (wd / DEMOS).write_text(json.dumps(demos))
    res = snakemake(wd, "spag_epoch1", timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    base = wd / "results" / "base_model"
    assert json.loads((base / "config.json").read_text())["model_type"] == "llama"
    assert (base / "gguf_source.json").is_file()

    episodes = pq.read_table(wd / "results/epoch1/episodes.parquet").to_pylist()
    assert len(episodes) == 4
    samples = pq.read_table(wd / "results/imitation/samples.parquet").to_pylist()
    assert {s["role"] for s in samples if s["type"] == "game"} == {"attacker", "defender"}
    # Replies are text: no chat-template markers leak into the games.
    for g in episodes:
        for m in g["history"]:
            assert "<|im_start|>" not in m["content"] and "<|im_end|>" not in m["content"]
    scored = pq.read_table(wd / "results/epoch1/scored.parquet")
    meta = scored.schema.metadata
    assert meta[b"spag.ref_prompt_format"] == b"chat"
    model = wd / "results/epoch1/model"
    assert (model / "model.safetensors").is_file()
    settings = json.loads((model / "spag_training.json").read_text())
    assert settings["prompt_format"] == "chat"
    log = (wd / "results/logs/epoch1/selfplay/shard_000.log").read_text()
    assert "top-k 50" in log
    games = (wd / "results/epoch1/eval/games.tsv").read_text().splitlines()
    header = games[0].split("\t")
    assert "win_rate_lo" in header and len(games) == 4  # attacker, defender, all
    for name in ("base", "imitation"):
        assert (wd / f"results/eval/games/{name}.tsv").is_file()
    record = json.loads((wd / "results/eval/reasoning/epoch1.json").read_text())
    assert record["apply_chat_template"] is True
