"""Reference scoring and plain single-process training on the tiny model."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
from tracker_readers import mlflow_history, trackio_logs, wandb_run
from training_samples import sample_rows, write_samples

from spag.cli import main
from spag.training.scoring import META_IDENTITY, model_identity, score_file

MAX_LENGTH = 96


@pytest.fixture(scope="module")
def scored(tiny_model_dir, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("scored")
    rows = sample_rows(24)
    rows[5]["target"] = ""  # an empty target: counted skip, null score
    samples = write_samples(d / "samples.parquet", rows)
    out = d / "scored.parquet"
    score_file(tiny_model_dir, samples, out, batch_size=5, max_length=MAX_LENGTH, dtype="float32")
    return out


def _train_args(model, samples, out: Path, *extra: str) -> list[str]:
    return [
        "train", "--model", str(model), "--samples", str(samples),
        "--output", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
        "--loss-log", str(out / "loss.tsv"), "--max-length", str(MAX_LENGTH),
        "--per-device-batch-size", "2", "--gradient-accumulation-steps", "2",
        "--learning-rate", "1e-3", "--save-steps", "50", *extra,
    ]  # fmt: skip


def _loss_rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_score_ref_records_identity_and_scores_every_encodable_row(scored, tiny_model_dir):
    table = pq.read_table(scored)
    assert table.schema.metadata[META_IDENTITY].decode() == model_identity(tiny_model_dir)
    scores = table.column("ref_logprob").to_pylist()
    assert scores[5] is None  # the empty target
    assert all(s is not None and s < 0 for i, s in enumerate(scores) if i != 5)
    assert table.num_rows == 24


def test_offline_po_trains_and_writes_a_loadable_model(scored, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rc = main(
        _train_args(
            tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "3"
        )
    )
    assert rc == 0
    out = tmp_path / "model"
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    assert (out / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()
    model = AutoModelForCausalLM.from_pretrained(out, use_safetensors=True)
    assert model.config.use_cache is True  # the saved model generates with its KV cache
    tok = AutoTokenizer.from_pretrained(out)
    assert model.get_input_embeddings().weight.shape[0] == len(tok)  # vocabulary not resized
    assert model_identity(out) != model_identity(tiny_model_dir)  # the weights moved
    rows = _loss_rows(tmp_path / "loss.tsv")
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    # Step 1 runs before any update: policy == reference, so the ratio is 1 (fp32).
    first = rows[0]
    for key in ("ratio_min", "ratio_mean", "ratio_max"):
        assert abs(float(first[key]) - 1.0) <= 1e-5, (key, first[key])
    assert abs(float(first["kl"])) <= 1e-5
    assert float(rows[-1]["ratio_max"]) != pytest.approx(1.0, abs=1e-5)  # later steps move
    assert all(float(r["pad_frac"]) <= 0.5 for r in rows)
    assert not list((tmp_path / "ckpt").glob("checkpoint-*"))  # cleaned after success
    info = json.loads((out / "spag_training.json").read_text())
    assert info["objective"] == "offline_po" and info["global_step"] == 3


def test_sft_kl_one_step_with_explicit_reference(scored, tiny_model_dir, tmp_path):
    rc = main(
        _train_args(
            tiny_model_dir, scored, tmp_path, "--objective", "sft_kl", "--max-steps", "1",
            "--ref-model", str(tiny_model_dir), "--no-group-by-length", "--activation-checkpointing",
        )
    )  # fmt: skip
    assert rc == 0
    (row,) = _loss_rows(tmp_path / "loss.tsv")
    assert abs(float(row["ratio_max"]) - 1.0) <= 1e-5
    assert float(row["n_sft"]) + float(row["n_game"]) == 4  # 2 samples x 2 micro-batches


def test_scores_under_another_model_are_refused(scored, tiny_model_dir, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    weights = load_file(other / "model.safetensors")
    weights = {k: v + 0.01 * torch.ones_like(v) for k, v in weights.items()}
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    rc = main(_train_args(other, scored, tmp_path, "--objective", "offline_po", "--max-steps", "1"))
    assert rc == 2
    assert "computed under another model" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def test_bad_inputs_give_clear_errors(scored, tiny_model_dir, tmp_path, capsys):
    unscored = write_samples(tmp_path / "unscored.parquet", sample_rows(4))
    assert main(_train_args(tiny_model_dir, unscored, tmp_path, "--objective", "sft_kl")) == 2
    assert "missing column 'ref_logprob'" in capsys.readouterr().err
    args = _train_args(tiny_model_dir, scored, tmp_path, "--objective", "sft_kl")
    args[args.index("--max-length") + 1] = "64"
    assert main(args) == 2
    assert "max_length 96, training uses 64" in capsys.readouterr().err
    assert main(["score-ref", "--model", str(tmp_path / "none"), "--samples", str(unscored),
                 "--output", str(tmp_path / "x.parquet")]) == 2  # fmt: skip
    assert f"model folder not found: {tmp_path / 'none'}" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_shipped_deepspeed_configs():
    from spag.errors import SpagInputError
    from spag.training.run import resolve_deepspeed

    offload = json.loads(Path(resolve_deepspeed("zero3_offload")).read_text())
    plain = json.loads(Path(resolve_deepspeed("zero3")).read_text())
    for cfg in (offload, plain):
        zero = cfg["zero_optimization"]
        assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
        assert cfg["train_micro_batch_size_per_gpu"] == "auto"
        assert "scheduler" not in cfg  # the Trainer's cosine schedule applies
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert offload["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert "offload_param" not in plain["zero_optimization"]
    assert resolve_deepspeed("none") is None
    with pytest.raises(SpagInputError, match="zero3_offload"):
        resolve_deepspeed("zero2")


@pytest.mark.parametrize("base", ["zero3", "zero3_offload"])
def test_fp32_gradient_configs_are_their_base_with_fp32_accumulation(base):
    from deepspeed.runtime.config import DeepSpeedConfig

    from spag.training.run import resolve_deepspeed

    config = json.loads(Path(resolve_deepspeed(f"{base}_fp32_grads")).read_text())
    assert config.pop("data_types") == {"grad_accum_dtype": "fp32"}
    assert config == json.loads(Path(resolve_deepspeed(base)).read_text())
    # DeepSpeed reads it so (ZeRO-3 takes its accumulation dtype from here), the Trainer's
    # "auto" values filled in as it would.
    filled = json.loads(
        Path(resolve_deepspeed(f"{base}_fp32_grads")).read_text().replace('"auto"', "null")
    )
    filled.update(
        bf16={"enabled": True}, fp16={"enabled": False}, train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=4, train_batch_size=8, gradient_clipping=1.0,
    )  # fmt: skip
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size"):
        filled["zero_optimization"].pop(key)
    filled["zero_optimization"].pop("stage3_param_persistence_threshold")
    if "optimizer" in filled:
        filled["optimizer"]["params"] = {"lr": 1e-5}
    read = DeepSpeedConfig(filled)
    assert read.grad_accum_dtype == "fp32" and read.zero_optimization_stage == 3


def test_trimmed_logits_give_the_same_logprobs(tiny_model_dir):
    import torch

    from spag.training.collate import SampleCollator, encode_pairs, pad_token_id
    from spag.training.scoring import load_model_and_tokenizer, model_sequence_logprobs

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    rows = sample_rows(6, seed=9)
    encoded, _ = encode_pairs(tok, [r["query"] for r in rows], [r["target"] for r in rows], 96)
    feats = [
        {"input_ids": ids, "target_start": start, "reward": 0.0, "weight": 1.0, "is_sft": False}
        for ids, start in encoded
    ]
    batch = SampleCollator(pad_token_id(tok))(feats)
    args = (batch["input_ids"], batch["attention_mask"], batch["labels"])
    with torch.no_grad():
        full = model_sequence_logprobs(model, *args, trim_logits=False)
        trimmed = model_sequence_logprobs(model, *args, trim_logits=True)
    assert torch.allclose(full, trimmed, atol=1e-5)


def test_side_columns_stay_float32_under_a_bf16_engine(tiny_model_dir, tmp_path):
    """Under DeepSpeed the Trainer casts every floating input to the engine's dtype (bf16
    on GPUs). reward, weight and ref_logprob must reach the loss in float32: scored in
    bf16 on training's path, the step-0 ratio is then exactly 1 (with the cast, not)."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer

    from spag.data.tables import read_parquet
    from spag.training.arguments import SpagTrainingArguments
    from spag.training.collate import build_features
    from spag.training.packing import PackedCollator, use_packed_attention
    from spag.training.trainer import SpagTrainer

    samples = write_samples(tmp_path / "samples.parquet", sample_rows(8, seed=7))
    scored = tmp_path / "scored.parquet"
    score_file(tiny_model_dir, samples, scored, batch_size=8, max_length=MAX_LENGTH,
               dtype="bfloat16")  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    use_packed_attention(model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    features, _ = build_features(read_parquet(scored), tokenizer, MAX_LENGTH, scored, with_ref=True)
    args = SpagTrainingArguments(
        output_dir=str(tmp_path / "o"), use_cpu=True, report_to="none", objective="offline_po",
        kl_coeff=0.2, sft_coeff=0.5, clip_eps=0.2, group_by_length=True,
    )  # fmt: skip
    trainer = SpagTrainer(model=model, args=args)
    # The Trainer's own cast, as under a bf16 DeepSpeed engine.
    trainer.is_deepspeed_enabled = True
    plugin = SimpleNamespace(hf_ds_config=SimpleNamespace(dtype=lambda: torch.bfloat16))
    trainer.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin))
    batch = PackedCollator()(features)

    inputs = trainer._prepare_inputs(batch)
    for key in ("reward", "weight", "ref_logprob"):
        assert inputs[key].dtype == torch.float32, key
    model.eval()
    with torch.no_grad():
        trainer.compute_loss(model, inputs)
    assert trainer._stats["ratio_min"].item() == 1.0
    assert trainer._stats["ratio_max"].item() == 1.0

    # What the Trainer alone does: ref_logprob rounded to bf16, the ratio is off.
    trainer._reset_stats()
    cast = Trainer._prepare_inputs(trainer, batch)
    assert cast["ref_logprob"].dtype == torch.bfloat16
    with torch.no_grad():
        trainer.compute_loss(model, cast)
    assert trainer._stats["ratio_max"].item() - trainer._stats["ratio_min"].item() > 1e-4


def test_a_diverging_run_stops_with_its_step_before_a_checkpoint(
    scored, tiny_model_dir, tmp_path, capsys
):
    """A learning rate that blows the weights up: the next step's gradient norm is not
    finite; training stops there with exit code 1, and no checkpoint holds that step."""
    args = _train_args(
        tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "6",
        "--learning-rate", "1e30", "--save-steps", "1", "--keep-checkpoints",
    )  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err
    m = re.search(
        r"spag train: error: training step (\d+): the (gradient norm|loss) is (nan|inf)", err
    )
    assert m, err[-2000:]
    step = int(m.group(1))
    assert 1 < step <= 6
    marked = {p.parent.name for p in (tmp_path / "ckpt").glob("*/spag_checkpoint_complete")}
    assert marked == {f"checkpoint-{s}" for s in range(1, step)}
    assert not (tmp_path / "model").exists() and not (tmp_path / "loss.tsv").exists()


def test_training_logs_to_tensorboard_under_the_stage_name(scored, tiny_model_dir, tmp_path):
    """The Trainer's TensorBoard integration, pointed at the tracking folder: the event
    files read back with the loss and the project's own terms at every logged step."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = _train_args(
        tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "3",
        "--report-to", "tensorboard", "--tracking-dir", str(tmp_path / "tracking"),
        "--project", "proj", "--run-name", "run-1234abcd", "--stage", "epoch2",
    )  # fmt: skip
    with mock.patch.dict(os.environ):  # the trackers' variables stay this test's
        assert main(args) == 0
    logdir = tmp_path / "tracking" / "tensorboard" / "run-1234abcd" / "epoch2"
    assert list(logdir.glob("events.out.tfevents.*")), list(tmp_path.rglob("*tfevents*"))
    events = EventAccumulator(str(logdir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("train/loss", "train/kl", "train/ratio_mean", "train/clipped_frac", "train/n_game"):
        assert tag in tags, sorted(tags)
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]
    losses = [float(r["loss"]) for r in _loss_rows(tmp_path / "loss.tsv")]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx(losses, rel=1e-5)


def _spag_process(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``spag`` as the workflow runs it: its own process (trackers finish at its exit),
    none of the caller's tracker variables."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_", "TENSORBOARD_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "spag", *args], env={**clean, **env}, cwd=cwd,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_every_tracker_holds_the_training_loss(scored, tiny_model_dir, tmp_path):
    """W&B offline, MLflow and trackio through the Trainer's integrations, in one real
    ``spag train`` process: each holds ``loss.tsv``'s loss at its steps and the
    project's own terms, under the stage's name in the run's project (and W&B group)."""
    tracking = tmp_path / "tracking"
    args = _train_args(
        tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "3",
        "--report-to", "wandb,mlflow,trackio", "--tracking-dir", str(tracking),
        "--project", "proj", "--run-name", "run-1234abcd", "--stage", "epoch2",
    )  # fmt: skip
    done = _spag_process(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(r["loss"]) for r in _loss_rows(tmp_path / "loss.tsv")]
    kls = [float(r["kl"]) for r in _loss_rows(tmp_path / "loss.tsv")]
    assert len(losses) == 3
    expected = [(step, pytest.approx(v, rel=1e-6)) for step, v in enumerate(losses, start=1)]

    wb = wandb_run(tracking / "wandb")
    assert (wb["name"], wb["project"], wb["group"]) == (
        "run-1234abcd-epoch2",
        "proj",
        "run-1234abcd",
    )
    history = wb["history"]
    global_step = dict(history["train/global_step"])  # W&B's own step -> the Trainer's
    logged = [(global_step[s], v) for s, v in history["train/loss"]]
    assert logged == expected
    assert [v for _, v in history["train/kl"]] == pytest.approx(kls, rel=1e-6, abs=1e-9)
    assert {"train/ratio_mean", "train/clipped_frac", "train/n_game", "train/n_sft"} <= set(history)

    ml = mlflow_history(f"sqlite:///{tracking / 'mlflow.db'}", "proj", "loss")
    assert list(ml) == ["run-1234abcd-epoch2"]
    assert ml["run-1234abcd-epoch2"] == expected

    rows = trackio_logs(tracking / "trackio", "proj")["run-1234abcd-epoch2"]
    logged = [(r["train/global_step"], r["train/loss"]) for r in rows if "train/loss" in r]
    assert logged == expected
    # nothing of theirs outside the tracking folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt", "loss.tsv", "model", "model.job.json", "tracking"
    ]  # fmt: skip


def test_a_failing_tracker_leaves_training_going(scored, tiny_model_dir, tmp_path):
    """W&B told to go online with no key and no server: one warning, and the stage
    trains, saves and logs to the tracker that works."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracking = tmp_path / "tracking"
    args = _train_args(
        tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "3",
        "--report-to", "wandb,tensorboard", "--tracking-dir", str(tracking),
        "--run-name", "run", "--stage", "epoch1",
    )  # fmt: skip
    done = _spag_process(
        args, tmp_path, WANDB_MODE="online", WANDB_BASE_URL="http://127.0.0.1:9",
        WANDB_INIT_TIMEOUT="20", HOME=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tracking: wandb failed at on_train_begin" in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "model" / "config.json").is_file()
    assert len(_loss_rows(tmp_path / "loss.tsv")) == 3
    events = EventAccumulator(str(tracking / "tensorboard" / "run" / "epoch1"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]


def test_an_unknown_tracker_is_refused_naming_the_flag(scored, tiny_model_dir, tmp_path, capsys):
    args = _train_args(
        tiny_model_dir, scored, tmp_path, "--objective", "offline_po", "--max-steps", "1",
        "--report-to", "tensorboard,comet",
    )  # fmt: skip
    assert main(args) == 2
    assert "--report-to: unknown tracker(s) comet" in capsys.readouterr().err
