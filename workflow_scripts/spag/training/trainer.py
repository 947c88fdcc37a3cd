"""The ``Trainer`` subclass that optimises SFTwithKL or OfflinePO, and the loss log.

The batch carries ``ref_logprob`` (precomputed by the scoring step), so no reference
model is held in memory. Per-step statistics (KL estimate, importance-ratio mean, min
and max) are gathered over micro-batches and ranks and logged with the loss.
Batches are grouped by length; for OfflinePO within each sample type, so that every
batch keeps the SFT/game mix of a random batch (each loss term is over its own count).
"""

from __future__ import annotations

import csv
import math
import os
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from spag.errors import SpagRunError
from spag.training.checkpoints import write_complete_marker
from spag.training.collate import LengthGroupedSampler
from spag.training.losses import LossStats
from spag.training.objectives import OBJECTIVES
from spag.training.packing import packed_logprobs
from spag.training.scoring import model_sequence_logprobs

# Per-sample columns the loss reads in float32 whatever the model's dtype: under
# DeepSpeed the Trainer casts every floating input to the engine's dtype, and a
# reference log-prob rounded to bf16 makes the step-0 ratio differ from 1.
FLOAT32_COLUMNS = ("reward", "weight", "ref_logprob", "ref_move_logprob")
LOSS_LOG_COLUMNS = [
    "step",
    "epoch",
    "loss",
    "kl",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "clipped_frac",
    "n_game",
    "n_sft",
    "learning_rate",
    "grad_norm",
    "tokens_per_s",
    "pad_frac",
]


class SpagTrainer(Trainer):
    """Trainer computing the docs/design.md section 4 losses from policy log-probs and
    ``ref_logprob``; its settings (objective, coefficients, batch order) are ``self.args``,
    a :class:`spag.training.arguments.SpagTrainingArguments`."""

    def __init__(self, *args, lengths: list[int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        # Sample lengths for the length-grouped order (default: the dataset's).
        self.lengths = lengths
        # Tokens learned from, every rank's, as of the last logged step.
        self.tokens_trained = 0
        # Our loss is a per-micro-batch mean: let the Trainer divide it by the
        # accumulation steps, as for any loss that does not count tokens itself.
        self.model_accepts_loss_kwargs = False
        self.loss_is_scaled_for_ga = False
        # The loss by name; it reads its coefficients from the arguments.
        self.objective = OBJECTIVES[self.args.objective]
        self._reset_stats()
        self.add_callback(_StatsClock(self))

    # ---- data order ----
    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if not self.args.group_by_length:
            return super()._get_train_sampler(dataset)
        lengths = self.lengths if self.lengths is not None else dataset.lengths
        is_sft = None
        if self.objective.mixes_types:
            # The loss divides each term by its count in the micro-batch: batches must keep
            # the SFT/game mix of random batches, so lengths are grouped within each type.
            is_sft = dataset.is_sft
        return LengthGroupedSampler(
            lengths, self.args.per_device_train_batch_size, seed=self.args.seed, is_sft=is_sft
        )

    def _prepare_inputs(self, inputs):
        inputs = dict(inputs)
        side = {k: inputs.pop(k) for k in FLOAT32_COLUMNS if k in inputs}
        inputs = super()._prepare_inputs(inputs)
        for key, value in side.items():
            inputs[key] = value.to(device=self.args.device, dtype=torch.float32)
        return inputs

    # ---- loss ----
    def policy_logprobs(self, model, inputs) -> torch.Tensor:
        """Sequence log-probs of the batch's samples under ``model`` (packed or padded);
        with moves' branches in the batch, their log-probs go into ``inputs`` (the
        objective's ``move_logprob``, ``legal_logmass``, ``has_move``, ``has_legal``)."""
        if "cu_seq_lens_q" in inputs:
            lp, moves = packed_logprobs(model, inputs)
            if moves is not None:
                inputs["move_logprob"] = moves.move
                inputs["legal_logmass"] = moves.legal
                inputs["has_move"] = moves.has_move
                inputs["has_legal"] = moves.has_legal
            return lp
        return model_sequence_logprobs(
            model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The loss in float32 (both log-prob paths return it; the side columns stay it).
        lp = self.policy_logprobs(model, inputs).float()
        if self.objective.needs_moves and "move_logprob" not in inputs:
            _no_moves(inputs)
        ref = inputs["ref_logprob"].float()
        loss, loss_stats = self.objective.loss(self.args, lp, ref, inputs)
        stats: dict[str, torch.Tensor] = dict(loss_stats)
        if "attention_mask" in inputs:
            mask = inputs["attention_mask"]
            stats["tokens"] = mask.sum().to(torch.float32)
            stats["positions"] = torch.tensor(float(mask.numel()), device=mask.device)
        else:  # packed: every position is a token
            ids = inputs["input_ids"]
            stats["tokens"] = torch.tensor(float(ids.numel()), device=ids.device)
            stats["positions"] = stats["tokens"].clone()
        self._accumulate(stats)
        return (loss, {"logprobs": lp}) if return_outputs else loss

    # ---- statistics ----
    def _reset_stats(self) -> None:
        self._stats: dict[str, torch.Tensor] = {}
        self._stats_since = time.perf_counter()

    def _accumulate(self, stats: dict[str, torch.Tensor]) -> None:
        for key, value in stats.items():
            value = value.detach().float()
            if key not in self._stats:
                self._stats[key] = value.clone()
            elif key == "ratio_min":
                self._stats[key] = torch.minimum(self._stats[key], value)
            elif key == "ratio_max":
                self._stats[key] = torch.maximum(self._stats[key], value)
            else:
                self._stats[key] = self._stats[key] + value

    def _reduced_stats(self) -> dict[str, float]:
        # Every sum an objective's LossStats holds, and the tokens the trainer counts.
        keys = [k for k in LossStats.__annotations__ if k not in ("ratio_min", "ratio_max")]
        keys += ["tokens", "positions"]
        if not self._stats:
            return {}
        device = self._stats["count"].device
        sums = torch.stack([self._stats[k] for k in keys]).to(device)
        lo = self._stats["ratio_min"].clone()
        hi = self._stats["ratio_max"].clone()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # Every rank reaches log() at the same step, so these collectives match up.
            torch.distributed.all_reduce(sums)
            torch.distributed.all_reduce(lo, op=torch.distributed.ReduceOp.MIN)
            torch.distributed.all_reduce(hi, op=torch.distributed.ReduceOp.MAX)
        s = dict(zip(keys, sums.tolist(), strict=True))
        self.tokens_trained += int(s["tokens"])
        elapsed = max(time.perf_counter() - self._stats_since, 1e-9)
        count = max(s["count"], 1.0)
        return {
            "kl": s["kl_sum"] / count,
            "ratio_mean": s["ratio_sum"] / count,
            "ratio_min": float(lo),
            "ratio_max": float(hi),
            "clipped_frac": s["clipped"] / max(s["n_game"], 1.0),
            "n_game": s["n_game"],
            "n_sft": s["n_sft"],
            "tokens_per_s": s["tokens"] / elapsed,
            "pad_frac": 1.0 - s["tokens"] / max(s["positions"], 1.0),
        }

    # ---- divergence ----
    def _get_grad_norm(self, model, grad_norm=None):
        # Checked before the optimizer step (under DeepSpeed, right after it) and before
        # any checkpoint of this step: a non-finite update never reaches a checkpoint.
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        _require_finite("gradient norm", grad_norm, self.state.global_step + 1)
        return grad_norm

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            _require_finite("loss", logs["loss"], self.state.global_step)
            logs.update(self._reduced_stats())
            self._reset_stats()
        super().log(logs, start_time)

    # ---- checkpoints ----
    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        # A marker written after every rank has finished tells a complete checkpoint
        # from one cut short by a kill (resume only trusts marked ones).
        if self.args.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
        if self.args.should_save:
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            write_complete_marker(folder, self.state.global_step)


def _no_moves(inputs: dict) -> None:
    """A micro-batch without a single game row with legal moves (all instruction rows):
    the objective's move columns are empty there."""
    n = inputs["reward"].shape[0]
    zeros = torch.zeros(n, dtype=torch.float32, device=inputs["reward"].device)
    inputs["move_logprob"] = zeros
    inputs["legal_logmass"] = zeros
    inputs["has_move"] = zeros.bool()
    inputs["has_legal"] = zeros.bool()
    inputs.setdefault("ref_move_logprob", zeros)


def _require_finite(name: str, value, step: int) -> None:
    if value is None:
        return
    number = float(value.item() if isinstance(value, torch.Tensor) else value)
    if not math.isfinite(number):
        raise SpagRunError(
            f"training step {step}: the {name} is {number}; stopped before it reaches a "
            "checkpoint (lower the learning rate, or check the samples' rewards)"
        )


class _StatsClock(TrainerCallback):
    """Start the throughput clock when training starts, not when the trainer is built."""

    def __init__(self, trainer: SpagTrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._reset_stats()


class LossLogCallback(TrainerCallback):
    """Append one TSV row per logged step (main process only)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        row = {
            "step": state.global_step,
            "epoch": logs.get("epoch", state.epoch),
            "learning_rate": logs.get("learning_rate"),
            **{k: logs.get(k) for k in LOSS_LOG_COLUMNS if k in logs},
        }
        new = not self.path.exists() or self.path.stat().st_size == 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
            if new:
                writer.writerow(LOSS_LOG_COLUMNS)
            writer.writerow([_fmt(row.get(c)) for c in LOSS_LOG_COLUMNS])


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.10g}"
    return str(value)
