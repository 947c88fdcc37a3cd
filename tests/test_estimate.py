"""An epoch's cost before it runs (spag.ops.estimate, ``spag estimate``, the preflight's
closing table): throughputs measured or scaled by hand, the paper config's tokens by
hand, and no figure, said, where nothing was measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from model_configs import LLAMA2_7B

from spag.cli import main
from spag.config import read_config_files, validate_config
from spag.ops.estimate import (
    MEASURE,
    Measured,
    ModelSize,
    card_family,
    epoch_shape,
    load_throughputs,
    throughput,
)

REPO = Path(__file__).resolve().parents[1]
PAPER = [str(REPO / "config.yaml"), str(REPO / "configs/paper-llama2-7b.yaml")]
SEVEN_B = ModelSize(6_738_415_616, 32)
TABLE = [
    Measured("H200", 1_000_000_000, 16, "train_full", False, 1000.0, "s", "a"),
    Measured("H200", 1_000_000_000, 16, "train_full", False, 3000.0, "s", "b"),
    Measured("H200", 1_000_000_000, 16, "decode", False, 4000.0, "s", "c"),
    Measured("H100-80GB", 1_000_000_000, 16, "train_lora", True, 500.0, "s", "d"),
]


def test_a_measured_pair_is_its_mean_and_others_are_scaled_by_hand():
    same = throughput(TABLE, "H200", ModelSize(1_000_000_000, 16), "train_full")
    assert same.tokens_per_s == 2000.0 and same.measured
    assert same.basis.startswith("measured 1,000-3,000 tokens/s (2 runs): H200, 1.00B")
    # 6N a token at 1B -> 8N (checkpointing) at 6.74B: x 6e9 / (8 x 6.738e9).
    scaled = throughput(TABLE, "H200", SEVEN_B, "train_full", checkpointing=True)
    assert scaled.tokens_per_s == pytest.approx(2000 * 6e9 / (8 * 6_738_415_616))
    assert not scaled.measured and "by FLOPs a token (1.00B -> 6.74B, checkpointing" in scaled.basis
    # To an A100 by the bf16 peaks, 312 / 989 TFLOP/s.
    a100 = throughput(TABLE, "A100-80GB", ModelSize(1_000_000_000, 16), "train_full")
    assert a100.tokens_per_s == pytest.approx(2000 * 312 / 989)
    assert "x0.315 by bf16 peak (H200 -> A100-80GB, no A100-80GB measurement)" in a100.basis
    # Decoding was bound by the host: by layers (16 -> 32), not by the card.
    decode = throughput(TABLE, "H100-80GB", SEVEN_B, "decode")
    assert decode.tokens_per_s == pytest.approx(2000.0)
    assert "x0.5 by layers (16 -> 32" in decode.basis and "not scaled by card" in decode.basis
    # The card's own row wins over another card's.
    lora = throughput(TABLE, "H100-80GB", ModelSize(1_000_000_000, 16), "train_lora", True)
    assert lora.tokens_per_s == 500.0 and lora.measured


def test_no_figure_is_guessed():
    card = throughput(TABLE, "MI300X", SEVEN_B, "train_full")
    assert card.tokens_per_s is None
    assert "no figures for card MI300X" in card.basis and MEASURE["train_full"] in card.basis
    work = throughput(TABLE, "H200", SEVEN_B, "train_full_offload")
    assert work.tokens_per_s is None and "no measurement of train_full_offload" in work.basis
    far = throughput(TABLE, "H200", ModelSize(70_000_000_000, 80), "train_full")
    assert far.tokens_per_s is None and "within 10x of 70.00B" in far.basis


def test_the_committed_table_reads_and_names_its_sources():
    rows = load_throughputs()
    assert rows and {r.work for r in rows} <= set(MEASURE)
    for r in rows:
        assert (REPO / r.source.split(" ")[0]).is_dir(), r.source


@pytest.mark.parametrize(
    ("name", "memory", "card"),
    [("NVIDIA H100 80GB HBM3", 79.6, "H100-80GB"), ("NVIDIA H200", 139.8, "H200"),
     ("NVIDIA A100-SXM4-40GB", 39.4, "A100-40GB"), ("NVIDIA A100-SXM4-80GB", 79.2, "A100-80GB"),
     ("NVIDIA L40S", 44.5, None)],
)  # fmt: skip
def test_gpu_names_map_to_datasheet_rows(name, memory, card):
    assert card_family(name, memory) == card


def _estimate(folder, args: list[str]) -> int:
    """``spag estimate`` run from ``folder`` (no run there: the committed throughputs)."""
    return main(["estimate", "--directory", str(folder), "--configfile", *args])


def _paper_config(*extra: str) -> dict:
    config, given = read_config_files([*PAPER, *extra])
    return validate_config(config, given=given)


def test_the_paper_epochs_tokens_by_hand():
    shape = epoch_shape(_paper_config())
    # 50,000 words, one game each, 2 x 5 messages of at most 256 tokens; the winner's
    # messages (at most 5) become samples.
    assert (shape.games, shape.messages, shape.reply_tokens) == (50_000, 10, 256)
    assert shape.game_samples == 250_000
    assert shape.sample_tokens == pytest.approx(shape.prompt_tokens + 5.5 * 256)
    assert shape.sft_rows is None  # the paper's Alpaca file is not shipped
    assert 100 < shape.prompt_tokens < 1000
    shorter = epoch_shape(_paper_config(), reply_tokens=64)
    assert shorter.sample_tokens == pytest.approx(shape.prompt_tokens + 5.5 * 64)


def test_the_command_on_the_paper_config(tmp_path, capsys):
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    zero3 = tmp_path / "zero3.yaml"
    zero3.write_text("spag: {deepspeed: zero3}\n")
    assert _estimate(tmp_path, [*PAPER, str(zero3), "--model", str(model),
                 "--card", "H100-80GB", "--gpus-per-node", "8"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "one epoch: 6.74B parameters" in out and "1 node(s) x 8 H100-80GB" in out
    lines = out.splitlines()
    play = next(line for line in lines if line.lstrip().startswith("selfplay      32"))
    assert "decode 128.0M" in play  # 50,000 x 10 x 256
    train = next(line for line in lines if line.lstrip().startswith("train_spag"))
    assert "train_full 408.0M" in train.replace(",", "")
    measured = [r for r in load_throughputs() if r.work == "train_full"]
    tps = sum(r.tokens_per_s for r in measured) / len(measured)
    tps *= 6 * measured[0].parameters / (8 * 6_738_415_616)  # to 7B with checkpointing
    tokens = 250_000 * epoch_shape(_paper_config(str(zero3))).sample_tokens  # one pass
    gpu_hours = tokens / tps / 3600
    *_, gpu_h, wall_h = train.split()
    assert float(gpu_h) == pytest.approx(gpu_hours, abs=0.06)
    assert float(wall_h) == pytest.approx(gpu_hours / 8, abs=0.006)  # 8 GPUs, one job
    assert "epoch (selfplay -> score_ref -> train_spag):" in out
    assert "the research code's sampling (one game at a time on each GPU)" in out
    assert "decode_batch1" in out


def test_the_paper_config_as_given_says_what_is_unmeasured(tmp_path, capsys):
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    assert _estimate(tmp_path, [*PAPER, "--model", str(model),
                 "--card", "MI300X"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--card MI300X: no datasheet row (H200, H100-80GB" in err and "nvidia-smi" in err
    assert _estimate(tmp_path, [*PAPER, "--model", str(model),
                 "--card", "H100-80GB"]) == 0  # fmt: skip
    out = capsys.readouterr().out  # ZeRO-3 with CPU offload, never timed
    assert "no measurement of train_full_offload on any card" in out
    assert "epoch: no total (train_full_offload without a figure)" in out


def test_bad_input_is_named(tmp_path, capsys):
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    bad = tmp_path / "bad.yaml"
    bad.write_text("selfplay: {max_new_tokens: 0}\n")
    assert _estimate(tmp_path, [*PAPER, str(bad), "--model", str(model),
                 "--card", "H200"]) == 2  # fmt: skip
    assert "selfplay.max_new_tokens" in capsys.readouterr().err
    assert _estimate(tmp_path, [*PAPER, "--model", str(model), "--card", "H200",
                 "--reply-tokens", "300"]) == 2  # fmt: skip
    assert "--reply-tokens 300 must be above 0 and at most selfplay.max_new_tokens (256)" in (
        capsys.readouterr().err
    )
    # The paper's hub model is not downloaded here: no guess at its size.
    assert _estimate(tmp_path, [*PAPER, "--card", "H200"]) == 2
    assert "give --model" in capsys.readouterr().err


def test_the_preflight_ends_with_the_estimate_on_the_gpus_found(tmp_path):
    from spag.ops.preflight import estimate_section

    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA2_7B))
    config = _paper_config()
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6}] * 8
    text = estimate_section([{"family": "train", "rows": [], "gpus": gpus}], config, str(folder))
    assert text.startswith("one epoch: 6.74B parameters") and "1 node(s) x 8 H100-80GB" in text
    none = estimate_section([{"family": "train", "rows": [], "gpus": []}], config, str(folder))
    assert "found no GPU" in none and "spag estimate --card NAME" in none
