"""The Trainer's arguments of a ``spag train`` run: transformers' ``TrainingArguments``
with the loss's settings, as TRL's trainers extend them (``DPOConfig`` and the like).

They are built from the run's settings (:class:`spag.training.settings.TrainConfig`)
field by name: a setting whose ``TrainingArguments`` field has another name declares
it once, as its ``arg`` metadata (``per_device_batch_size`` fills
``per_device_train_batch_size``). What depends on the machine (the device, the
resolved DeepSpeed file, TF32, the trackers) is set up by :mod:`spag.training.run`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from transformers import TrainingArguments

from spag.settings import opt
from spag.training.objectives import OBJECTIVES, LossSettings
from spag.training.settings import BatchOrder, TrainConfig, argument_values


# Ours first: their fields follow TrainingArguments' (bases' fields are ordered from the
# last base on) and their __post_init__ (the bounds) runs before its.
@dataclass(kw_only=True)
class SpagTrainingArguments(LossSettings, BatchOrder, TrainingArguments):
    """``TrainingArguments`` plus what :class:`spag.training.trainer.SpagTrainer` reads
    from ``self.args``, inherited from their one declaration: the loss's settings
    (docs/design.md section 4, :class:`spag.training.objectives.LossSettings`: the
    objective reads its coefficients from here, ``args.kl_coeff``) and the samples' order
    (:class:`spag.training.settings.BatchOrder`); the stage's other settings fill
    ``TrainingArguments``' own fields by name."""

    # The sample columns (reward, weight, ref_logprob, ...) are the loss's, not the model's.
    remove_unused_columns: bool = opt(False, "keep the sample columns for the loss")
    # A job's log is its loss log and the Trainer's log lines, not a progress bar.
    disable_tqdm: bool = opt(True, "no progress bars")

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}")
        if self.activation_checkpointing and self.activation_checkpointing_kwargs is None:
            # The non-reentrant variant, the one torch recommends.
            self.activation_checkpointing_kwargs = {"use_reentrant": False}
        super().__post_init__()

    @classmethod
    def from_settings(cls, cfg: TrainConfig, **setup: Any) -> SpagTrainingArguments:
        """The arguments of the run ``cfg``; ``setup`` gives the fields the run sets up."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**argument_values(cfg, names), **setup)
