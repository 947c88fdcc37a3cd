"""A training stage with a low-rank adapter (``peft``) on the tiny model: the adapter
trains on the frozen model, and the stage writes the full model with the adapter merged
(what every later step reads) and the adapter beside it."""

from __future__ import annotations

import csv
import json

import pytest
from test_training_run import MAX_LENGTH, _train_args, scored  # noqa: F401 - the module's scored samples
from training_samples import sample_rows, write_samples

from spag.cli import main
from spag.config import validate_config
from spag.errors import SpagInputError

pytest.importorskip("peft")

ADAPTER = ["--peft", "r=4", "lora_alpha=8", "target_modules=q_proj,v_proj"]


def test_an_adapter_trains_and_the_stage_writes_the_merged_model(scored, tiny_model_dir, tmp_path):  # noqa: F811
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    rc = main(_train_args(tiny_model_dir, scored, tmp_path, "--objective", "offline_po",
                          "--max-steps", "3", *ADAPTER))  # fmt: skip
    assert rc == 0
    out = tmp_path / "model"
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (out / "adapter" / name).is_file(), name
    adapter_config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and sorted(adapter_config["target_modules"]) == [
        "q_proj",
        "v_proj",
    ]

    # Only the adapted projections moved; every other weight is the base model's, bit for bit.
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = load_file(out / "model.safetensors")
    assert set(merged) == set(base)
    moved = {k for k in base if not torch.equal(base[k], merged[k])}
    assert moved and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in moved), moved

    # The merged model computes what the base model with the adapter computes.
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        full = AutoModelForCausalLM.from_pretrained(out, use_safetensors=True)(ids).logits
        base_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, use_safetensors=True)
        adapted = PeftModel.from_pretrained(base_model, str(out / "adapter"))(ids).logits
    assert torch.allclose(full, adapted, atol=1e-5)

    # A rerun of the stage (the global random state moved on since) trains the same
    # adapter: its random initial A matrices are seeded.
    torch.manual_seed(12345)
    again = tmp_path / "again"
    rc = main(_train_args(tiny_model_dir, scored, again, "--objective", "offline_po",
                          "--max-steps", "3", *ADAPTER))  # fmt: skip
    assert rc == 0
    first, second = (load_file(p / "model" / "adapter" / "adapter_model.safetensors")
                     for p in (tmp_path, again))  # fmt: skip
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)

    with (tmp_path / "loss.tsv").open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    # The adapter starts as a no-op (B = 0): step 1's policy is the reference.
    assert abs(float(rows[0]["ratio_max"]) - 1.0) <= 1e-5
    info = json.loads((out / "spag_training.json").read_text())
    assert info["peft"]["r"] == 4 and info["peft"]["target_modules"] == ["q_proj", "v_proj"]


def test_an_adapter_in_bf16_trains_on_a_bf16_base_without_deepspeed(tiny_model_dir, tmp_path):
    """With ``bf16`` an adapter's frozen base is loaded in bfloat16 (no master weights to
    keep) and the adapter trains in float32 under autocast: the reference scored in
    bfloat16 is the step's own forward, and the merged model is written in bfloat16."""
    import torch
    from safetensors.torch import load_file

    from spag.training.scoring import score_file

    samples = write_samples(tmp_path / "samples.parquet", sample_rows(16))
    scored_bf16 = tmp_path / "scored.parquet"
    score_file(tiny_model_dir, samples, scored_bf16, batch_size=4, max_length=MAX_LENGTH,
               dtype="bfloat16")  # fmt: skip
    rc = main(_train_args(tiny_model_dir, scored_bf16, tmp_path, "--objective", "offline_po",
                          "--max-steps", "2", "--bf16", *ADAPTER))  # fmt: skip
    assert rc == 0
    adapter = load_file(tmp_path / "model" / "adapter" / "adapter_model.safetensors")
    assert adapter and {t.dtype for t in adapter.values()} == {torch.float32}
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = load_file(tmp_path / "model" / "model.safetensors")
    assert {t.dtype for t in merged.values()} == {torch.bfloat16}
    kept = [k for k in base if not k.endswith(("q_proj.weight", "v_proj.weight"))]
    assert all(torch.equal(merged[k], base[k].to(torch.bfloat16)) for k in kept)
    with (tmp_path / "loss.tsv").open() as fh:
        first = next(csv.DictReader(fh, delimiter="\t"))
    # B = 0 at step 1: the policy is the scored model (float32 weights under autocast
    # would not be: see tests/test_config_inputs.py).
    assert abs(float(first["ratio_min"]) - 1) < 1e-5 and abs(float(first["ratio_max"]) - 1) < 1e-5


def test_a_target_module_the_model_has_not_is_named(scored, tiny_model_dir, tmp_path, capsys):  # noqa: F811
    args = _train_args(tiny_model_dir, scored, tmp_path, "--objective", "sft_kl",
                       "--max-steps", "1", "--peft", "target_modules=q_proj,qkv_proj")  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--peft.target_modules: qkv_proj not in the model" in err and "q_proj" in err
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize(
    ("peft", "key"),
    [({"r": 0}, "spag.peft.r"), ({"lora_alpha": 0}, "spag.peft.lora_alpha"),
     ({"target_modules": []}, "spag.peft.target_modules"), ({"rank": 8}, "spag.peft.rank")],
)  # fmt: skip
def test_bad_adapter_settings_are_refused_at_plan_time(peft, key):
    with pytest.raises(SpagInputError, match=rf"key '{key}'|unknown key '{key}'"):
        validate_config({"spag": {"peft": peft}})


def test_the_adapter_reaches_the_train_rule_and_only_where_set():
    from spag.settings import step_flags
    from spag.training.settings import TrainConfig, stage_arguments

    config = validate_config({"spag": {"peft": {"r": 8}}})
    assert config["spag"]["peft"]["lora_alpha"] == 32  # the rest at its defaults
    flags = step_flags(TrainConfig, **stage_arguments(config, "spag"))
    assert "--peft r=8 lora_alpha=32 lora_dropout=0.0 target_modules=q_proj,k_proj," in flags
    assert "--peft" not in step_flags(TrainConfig, **stage_arguments(config, "imitation"))


def test_a_lora_checkpoint_folder_is_resumed_by_its_run_and_no_other(tmp_path):
    """A run's fingerprint equals its record read back (the adapter's settings hold
    tuples, which JSON reads back as lists), and full fine-tuning and LoRA never share
    checkpoints."""
    from spag.training.checkpoints import RUN_FILE, prepare_checkpoint_dir, run_fingerprint
    from spag.training.lora import LoraSettings
    from spag.training.settings import TrainConfig

    samples = tmp_path / "samples.parquet"
    samples.write_bytes(b"rows")
    files = dict(model="m", samples=str(samples), output="o", loss_log="l.tsv",
                 checkpoint_dir=str(tmp_path / "ckpt"), objective="offline_po")  # fmt: skip
    lora = TrainConfig(**files, peft=LoraSettings(r=4))
    full = TrainConfig(**files)
    fingerprint = run_fingerprint(lora, "model-id", 1)
    assert prepare_checkpoint_dir(lora, fingerprint, is_main=True) is None
    assert json.loads((tmp_path / "ckpt" / RUN_FILE).read_text()) == fingerprint
    assert run_fingerprint(lora, "model-id", 1) == fingerprint
    assert run_fingerprint(full, "model-id", 1) != fingerprint
