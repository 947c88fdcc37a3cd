"""Training objectives by name (config ``imitation.objective`` / ``spag.objective``).

An objective is one class: the coefficients it reads, the paper's learning rate and
KL coefficient for it, and its loss on a batch's sequence log-probabilities (the
formulas are in :mod:`spag.training.losses`, docs/design.md section 4).
:data:`OBJECTIVES` registers them; the trainer, its batch sampler and the rules' flags
read the registry.

A coefficient is declared once, as a field of :class:`LossSettings` below (its name,
default, bounds and help): the stages' config keys (``spag.training.settings.StageSettings``),
``spag train``'s flag of the same name and the Trainer's arguments
(``spag.training.arguments.SpagTrainingArguments``) all inherit it, and ``loss`` reads
it from those arguments (``args.kl_coeff``), as TRL's losses read ``self.args``.

To add one: write its class here (``coefficients``, ``paper``, ``loss``,
``learns_from_instructions``, ``mixes_types``, ``needs_moves``) and register it in
:data:`OBJECTIVES`; the config accepts its name from then on (the schema's
``objective`` key lists the registry), and refuses a coefficient it does not read. A
new coefficient is one more field of :class:`LossSettings`.

- ``loss(args, lp, ref, batch)`` returns the loss and a
  :class:`spag.training.losses.LossStats` for the log, made by
  :func:`spag.training.losses.loss_stats` from the per-row log-probs it read, the
  batch's ``is_sft`` and its count of clipped game rows.
- ``mixes_types``: the loss divides the SFT and the game terms each by its own count in
  the micro-batch, so the length-grouped order keeps the mix of random batches (lengths
  grouped within each type).
- ``batch``: the per-sample columns (:func:`spag.training.collate.sample_columns`):
  ``reward``, ``weight``, ``is_sft``, ``episode`` (the game a sample came from, -1 for an
  instruction row: what a group-wise advantage needs; a game's samples may fall into
  several micro-batches) and ``ref_logprob``; with ``needs_moves``, also
  ``move_logprob``, ``ref_move_logprob``, ``legal_logmass``, ``has_move`` and
  ``has_legal`` (:class:`spag.training.packing.MoveLogprobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spag.settings import Checked, opt

if TYPE_CHECKING:  # torch only where a loss runs: the workflow reads the registry without it
    import torch

    from spag.training.losses import LossStats


class SftKl:
    """Imitation (the research code's SFTwithKL): ``-lp + b * exp(lp) * (lp - ref)``."""

    coefficients = ("kl_coeff",)
    # The paper's values: the defaults of the stage's learning_rate and kl_coeff.
    paper = {"learning_rate": 5e-6, "kl_coeff": 0.1}
    # Every row alike: batches need not keep the SFT/game mix.
    mixes_types = False
    needs_moves = False

    def learns_from_instructions(self, args: Any) -> bool:
        """Whether instruction rows move the model (a control arm trains on them alone)."""
        return True

    def loss(
        self, args: Any, lp: torch.Tensor, ref: torch.Tensor, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, LossStats]:
        from spag.training.losses import sft_with_kl_loss

        return sft_with_kl_loss(
            lp, ref, batch["weight"].float(), batch["is_sft"], kl_coeff=args.kl_coeff
        )


class OfflinePO:
    """SPAG (the research code's OfflinePO): the clipped importance-weighted game term
    with a KL penalty in the advantage, plus ``sft_coeff`` x the SFT term."""

    coefficients = ("kl_coeff", "sft_coeff", "clip_eps")
    paper = {"learning_rate": 2e-6, "kl_coeff": 0.2}
    # Each term is divided by its own count in the micro-batch: batches keep the mix.
    mixes_types = True
    needs_moves = False

    def learns_from_instructions(self, args: Any) -> bool:
        return args.sft_coeff > 0

    def loss(
        self, args: Any, lp: torch.Tensor, ref: torch.Tensor, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, LossStats]:
        from spag.training.losses import offline_po_loss

        return offline_po_loss(
            lp,
            ref,
            batch["reward"].float(),
            batch["weight"].float(),
            batch["is_sft"],
            kl_coeff=args.kl_coeff,
            sft_coeff=args.sft_coeff,
            clip_eps=args.clip_eps,
        )


class LegalPO:
    """SPAG's objective with the policy over the legal moves, for games whose moves form a
    closed set (``Game.move_set``): a game row's clipped term on its move's log-prob
    renormalised over the moves legal there, so a negative advantage moves probability
    between legal moves and not out of them; ``legal_mass_coeff`` x the log of the legal
    moves' mass keeps the replies on them (docs/design.md section 4)."""

    coefficients = ("kl_coeff", "sft_coeff", "clip_eps", "legal_mass_coeff")
    paper = {"learning_rate": 2e-6, "kl_coeff": 0.2}  # offline_po's
    mixes_types = True
    # Its batches carry each game row's legal moves (packed rows with their branches).
    needs_moves = True

    def learns_from_instructions(self, args: Any) -> bool:
        return args.sft_coeff > 0

    def loss(
        self, args: Any, lp: torch.Tensor, ref: torch.Tensor, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, LossStats]:
        from spag.training.losses import legal_po_loss

        return legal_po_loss(
            lp,
            ref,
            batch["move_logprob"],
            batch["ref_move_logprob"].float(),
            batch["legal_logmass"],
            batch["has_move"],
            batch["has_legal"],
            batch["reward"].float(),
            batch["weight"].float(),
            batch["is_sft"],
            **{k: getattr(args, k) for k in self.coefficients},
        )


OBJECTIVES: dict[str, Any] = {
    "sft_kl": SftKl(),
    "offline_po": OfflinePO(),
    "legal_po": LegalPO(),
}
# The paper's objective of each stage (config ``<stage>.objective`` by default).
STAGE_OBJECTIVE = {"imitation": "sft_kl", "spag": "offline_po"}


def coefficients(name: str) -> tuple[str, ...]:
    """The coefficients (stage keys) the objective ``name`` reads."""
    return OBJECTIVES[name].coefficients


def paper_defaults(name: str) -> dict[str, float]:
    """The paper's learning rate and KL coefficient for the objective ``name``: the
    defaults of a stage's ``learning_rate`` and ``kl_coeff`` keys."""
    return dict(OBJECTIVES[name].paper)


@dataclass(kw_only=True)
class LossSettings(Checked):
    """The loss of a training stage: the objective and the coefficients the objectives
    read (the paper's values). A stage's config keys and the Trainer's arguments inherit
    these fields; an objective reads its own (``coefficients``) from the arguments."""

    kl_coeff: float | None = opt(
        None, "KL coefficient; default: the objective's", ge=0, filled="objective"
    )
    sft_coeff: float = opt(
        0.5, "weight of the SFT term, for the objectives that have one (offline_po, legal_po)", ge=0
    )
    clip_eps: float = opt(
        0.2, "ratio clip range, for the objectives that clip (offline_po, legal_po)", gt=0
    )
    legal_mass_coeff: float = opt(
        1.0,
        "legal_po: weight of -log(the legal moves' mass) at each game sample's decision, "
        "the term that keeps replies on the moves",
        ge=0,
    )
    objective: str | None = opt(
        None,
        "the loss: a name registered in spag/training/objectives.py OBJECTIVES; default: "
        "the paper's for the stage (imitation: sft_kl, spag: offline_po)",
        choices=OBJECTIVES,
        filled="stage",
    )
