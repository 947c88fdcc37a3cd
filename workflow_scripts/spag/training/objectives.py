"""Training objectives by name (config ``imitation.objective`` / ``spag.objective``).

An objective is one dataclass: its coefficients as fields (each also a per-stage
config key and a ``spag train`` flag of the same name), the paper's learning rate
for it, and its loss on a batch's sequence log-probabilities (the formulas are in
:mod:`spag.training.losses`, docs/design.md section 4). :data:`OBJECTIVES` registers
them; the trainer, its batch sampler and the rules' flags read the registry.

To add one: write its dataclass here (fields with the paper's defaults, ``loss``,
``learns_from_instructions``) and
register it in :data:`OBJECTIVES`; the config accepts its name from then on (the
schema's ``objective`` key lists the registry). ``loss`` gets the batch's per-sample
columns (:func:`spag.training.collate.sample_columns`): ``reward``, ``weight``,
``is_sft``, ``episode`` (the game a sample came from, -1 for an instruction row: what
a group-wise advantage needs; a game's samples may fall into several micro-batches)
and ``ref_logprob``. A new coefficient is also a stage
key (``spag.training.settings.StageSettings``, the schema's ``$defs.training``) and a
field of ``spag.training.arguments.SpagTrainingArguments``, which the trainer reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # torch only where a loss runs: the workflow reads the registry without it
    import torch

Stats = dict[str, "torch.Tensor"]


@dataclass(frozen=True, kw_only=True)
class SftKl:
    """Imitation (the research code's SFTwithKL): ``-lp + b * exp(lp) * (lp - ref)``."""

    kl_coeff: float = 0.1
    learning_rate: ClassVar[float] = 5e-6
    # Every row alike: batches need not keep the SFT/game mix.
    mixes_types: ClassVar[bool] = False

    def learns_from_instructions(self) -> bool:
        """Whether instruction rows move the model (a control arm trains on them alone)."""
        return True

    def loss(
        self, lp: torch.Tensor, ref: torch.Tensor, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, Stats]:
        import torch

        from spag.training.losses import sft_with_kl_loss

        loss, stats = sft_with_kl_loss(lp, ref, batch["weight"].float(), self.kl_coeff)
        # Counted for the log only.
        is_sft = batch["is_sft"].bool()
        stats["n_sft"] = is_sft.sum().to(torch.float32)
        stats["n_game"] = (~is_sft).sum().to(torch.float32)
        stats["clipped"] = torch.zeros_like(stats["count"])
        return loss, stats


@dataclass(frozen=True, kw_only=True)
class OfflinePO:
    """SPAG (the research code's OfflinePO): the clipped importance-weighted game term
    with a KL penalty in the advantage, plus ``sft_coeff`` x the SFT term."""

    kl_coeff: float = 0.2
    sft_coeff: float = 0.5
    clip_eps: float = 0.2
    learning_rate: ClassVar[float] = 2e-6
    # Each term is divided by its own count in the micro-batch: batches keep the mix.
    mixes_types: ClassVar[bool] = True

    def learns_from_instructions(self) -> bool:
        return self.sft_coeff > 0

    def loss(
        self, lp: torch.Tensor, ref: torch.Tensor, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, Stats]:
        from spag.training.losses import offline_po_loss

        return offline_po_loss(
            lp,
            ref,
            batch["reward"].float(),
            batch["weight"].float(),
            batch["is_sft"],
            self.kl_coeff,
            self.sft_coeff,
            self.clip_eps,
        )


OBJECTIVES: dict[str, type] = {"sft_kl": SftKl, "offline_po": OfflinePO}
# The paper's objective of each stage (config ``<stage>.objective`` by default).
STAGE_OBJECTIVE = {"imitation": "sft_kl", "spag": "offline_po"}


def coefficients(name: str) -> tuple[str, ...]:
    """The coefficient names (fields) of the objective ``name``."""
    return tuple(f.name for f in dataclasses.fields(OBJECTIVES[name]))


def paper_defaults(name: str) -> dict[str, float]:
    """The paper's learning rate and KL coefficient for the objective ``name``: the
    defaults of a stage's ``learning_rate`` and ``kl_coeff`` keys."""
    cls = OBJECTIVES[name]
    return {"learning_rate": cls.learning_rate, "kl_coeff": cls.kl_coeff}


def build_objective(name: str, settings: Any) -> Any:
    """The objective ``name`` with its coefficients read from ``settings`` by name."""
    cls = OBJECTIVES[name]
    return cls(**{f: getattr(settings, f) for f in coefficients(name)})
