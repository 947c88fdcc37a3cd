"""The settings of one training run and of reference scoring, declared once.

``StageSettings`` holds the hyper-parameters a user sets per stage (config keys
``imitation.*`` and ``spag.*``; the schema's ``$defs.training`` lists the same keys
with the same defaults, checked by a test). ``TrainConfig`` adds what a job is given
(files, objective, run-wide keys). ``spag train``'s flags, their defaults and help are
generated from ``TrainConfig`` (:func:`spag.settings.add_arguments`), the rules' flags
from the validated config (:func:`stage_arguments`), and the Trainer's arguments from
the settings by name (:func:`argument_values`, metadata ``arg``), so no default is
written twice. ``ScoringSettings`` (config ``scoring``) and ``ScoreRefConfig`` do the
same for ``spag score-ref`` (:func:`score_arguments`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from spag.errors import SpagInputError
from spag.game.settings import GameSettings
from spag.models.rendering import PROMPT_FORMATS
from spag.models.settings import ModelLoading
from spag.ops import (
    DEVICES,
    ENV_PROJECT,
    ENV_REPORT_TO,
    ENV_RUN_NAME,
    ENV_TRACKING_DIR,
    family_device,
)
from spag.ops import TRACKING_DIR as DEFAULT_TRACKING_DIR
from spag.settings import Checked, config_options, opt, req
from spag.training.lora import LoraSettings
from spag.training.objectives import OBJECTIVES, LossSettings, coefficients, paper_defaults

# Every objective's coefficients: a stage passes only its own objective's.
COEFFICIENTS = {key for name in OBJECTIVES for key in coefficients(name)}
# transformers' SchedulerType values.
SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)


@dataclass(kw_only=True)
class StageOptimization(Checked):
    """How a training stage runs its updates: the optimizer, the schedule, the batch
    size, the precision, checkpoints and the loss log."""

    learning_rate: float | None = opt(
        None, "peak learning rate; default: the objective's", gt=0, filled="objective"
    )
    num_train_epochs: float = opt(1.0, "passes over the samples", gt=0)
    max_steps: int = opt(-1, "optimizer steps; -1: as many as the epochs give")
    per_device_batch_size: int = opt(
        2, "samples per device and step", ge=1, arg="per_device_train_batch_size"
    )
    gradient_accumulation_steps: int = opt(8, "micro-batches per optimizer step", ge=1)
    max_length: int = opt(2048, "tokens per sample (left-truncated, BOS kept)", ge=8)
    lr_scheduler: str = opt(
        "cosine", "transformers' scheduler (SchedulerType)", choices=SCHEDULERS,
        arg="lr_scheduler_type",
    )  # fmt: skip
    # A warmup_steps value below 1 is a ratio of the total steps.
    warmup_ratio: float = opt(
        0.03, "warm-up as a fraction of the steps", ge=0, lt=1, arg="warmup_steps"
    )
    weight_decay: float = opt(0.0, "AdamW weight decay", ge=0)
    bf16: bool = opt(False, "bfloat16 mixed precision")
    tf32: bool = opt(False, "TF32 matrix products (CUDA only)", arg=None)
    activation_checkpointing: bool = opt(False, "recompute activations in the backward pass")
    deepspeed: str | None = opt(
        None,
        "zero3_offload, zero3 (bf16 gradients accumulated in bf16, as the research code), "
        "zero3_fp32_grads or zero3_offload_fp32_grads (accumulated and averaged in fp32), "
        "a JSON path, or null",
        arg=None,
    )
    save_steps: int = opt(100, "trainer checkpoint every K steps (for resume)", ge=1)
    logging_steps: int = opt(1, "loss log row every K steps", ge=1)


@dataclass(kw_only=True)
class BatchOrder(Checked):
    """The order of a stage's samples; the Trainer's arguments inherit it too (the
    trainer's batch sampler reads it from them)."""

    group_by_length: bool = opt(True, "batches of similar length (the SFT/game mix kept)")


@dataclass(kw_only=True)
class StageMemory(Checked):
    """What saves memory in a stage: packed rows without padding, a low-rank adapter
    instead of full fine-tuning."""

    padding_free: bool = opt(
        True,
        "pack a micro-batch in one row, attention per sample: no padding slots (false: "
        "right-padded batches)",
    )
    peft: LoraSettings | None = opt(
        None,
        "a low-rank adapter (peft's LoraConfig names), trained on the frozen model and "
        "merged into the stage's model folder (its adapter/ kept); null: full "
        "fine-tuning, the paper's method",
    )


# Bases' fields are ordered from the last base on: the stage's keys, and so its flags,
# keep the order of earlier runs' command lines (a reordered command line would rerun
# every training job through Snakemake's params trigger).
@dataclass(kw_only=True)
class StageSettings(LossSettings, StageMemory, BatchOrder, StageOptimization):
    """Hyper-parameters of one training stage (config ``imitation`` / ``spag``, both of
    the schema's ``$defs.training``): its updates, its samples' order, its memory savers
    and its loss."""


@dataclass(kw_only=True)
class TrainConfig(StageSettings):
    """One ``spag train`` job: its files, the run-wide keys and the stage's settings
    (its objective among them)."""

    model: str = req("init model folder")
    samples: str = req("scored samples Parquet (with ref_logprob)")
    output: str = req("model folder to write")
    checkpoint_dir: str = req("trainer checkpoints (resume from here)", arg="output_dir")
    loss_log: str = req("per-step loss table (TSV) to write")
    ref_model: str | None = opt(None, "model the samples were scored under (default: --model)")
    # Run-wide keys of the config (``key``: where the rules read them).
    seed: int = opt(42, "run seed", key=("seed",))
    prompt_format: str = opt(
        GameSettings.prompt_format,
        "raw or chat: how queries are rendered (as in play)",
        choices=PROMPT_FORMATS,
        key=("game", "prompt_format"),
    )
    trust_remote_code: bool = opt(
        ModelLoading.trust_remote_code,
        "let transformers run the model's own code",
        key=("base_model", "trust_remote_code"),
    )
    save_total_limit: int = opt(2, "trainer checkpoints kept")
    keep_checkpoints: bool = opt(False, "keep trainer checkpoints after the model is written")
    device: str = opt(
        ModelLoading.device,
        "cuda (stop at once without working CUDA), cpu, or auto",
        choices=DEVICES,
    )
    # Trackers (config `tracking`, spag.ops.tracking): not part of what a checkpoint belongs
    # to. The workflow sets them through the environment variables named by `env`.
    report_to: str = opt(
        "none",
        "trackers, comma-separated: tensorboard, wandb, trackio, mlflow",
        env=ENV_REPORT_TO,
        arg=None,
    )
    tracking_dir: str = opt(
        DEFAULT_TRACKING_DIR, "folder of the trackers' offline files", env=ENV_TRACKING_DIR
    )
    project: str | None = opt(
        None, "tracker project (default: the current folder's name)", env=ENV_PROJECT, arg=None
    )
    run_name: str | None = opt(
        None, "the run's name in trackers (stages are logged under it)", env=ENV_RUN_NAME, arg=None
    )
    stage: str = opt("train", "this stage's name in trackers (imitation, epoch1, ...)")

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SpagInputError(
                f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        # The learning rate and KL coefficient the objective implies where they are unset.
        for key, value in paper_defaults(self.objective).items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        super().__post_init__()


def argument_values(cfg: TrainConfig, names: set[str]) -> dict[str, Any]:
    """The settings of ``cfg`` that are fields of the Trainer's arguments, under their names.

    A setting's metadata ``arg`` names its ``TrainingArguments`` field where the names
    differ; ``arg=None`` marks a setting the run sets up itself (it means something else
    there, e.g. ``deepspeed``: a name here, a resolved file there).
    """
    values = {}
    for f in dataclasses.fields(cfg):
        name = f.metadata.get("arg", f.name)
        if name in names:
            values[name] = getattr(cfg, f.name)
    return values


def stage_arguments(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """``spag train`` options of a pipeline stage from the validated config.

    Keys are flag names with ``_`` (``learning_rate``); a true default-on boolean
    turned off becomes ``no_<name>``. Settings equal to the default are passed too,
    so the job's command line shows every value it trains with.
    """
    objective = config[stage]["objective"]
    options: dict[str, Any] = {"objective": objective}
    for key, value in config_options(StageSettings, config[stage]).items():
        if key in COEFFICIENTS and key not in coefficients(objective):
            continue  # another objective's coefficient
        options[key] = value
    # The run-wide keys (fields with a ``key``); every other field is absent from {}.
    options.update(config_options(TrainConfig, {}, config=config))
    # The rule family's GPUs decide: never a silent CPU run of a GPU job.
    options["device"] = family_device(config, "train")
    # formatted with the rule's wildcards (params strings are)
    options["stage"] = "imitation" if stage == "imitation" else "epoch{epoch}"
    return options


@dataclass(kw_only=True)
class ScoringSettings(Checked):
    """How ``spag score-ref`` runs the reference model (config ``scoring``)."""

    batch_size: int = opt(16, "samples per forward pass", ge=1)
    dtype: str = opt("float32", "reference model dtype", choices=("float32", "bfloat16", "float16"))


@dataclass(kw_only=True)
class ScoreRefConfig(ScoringSettings):
    """One ``spag score-ref`` job: its files, the scoring keys and training's encoding."""

    model: str = req("reference model folder")
    samples: str = req("samples Parquet (docs/design.md section 6)")
    output: str = req("scored samples Parquet to write")
    # Training's values: the scores are only valid for the same encoding and path.
    max_length: int = opt(StageSettings.max_length, "same value as training's")
    prompt_format: str = opt(
        GameSettings.prompt_format, "same value as training's", choices=PROMPT_FORMATS
    )
    trust_remote_code: bool = opt(
        TrainConfig.trust_remote_code, "let transformers run the model's own code"
    )
    padding_free: bool = opt(
        StageSettings.padding_free,
        "score packed rows, attention per sample: training's path with padding_free "
        "(the same value as training's)",
    )
    device: str = opt(
        TrainConfig.device,
        "cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
        choices=DEVICES,
    )


def score_arguments(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """``spag score-ref`` options for the samples of a training ``stage`` (its length and
    path), from the validated config; keys as in :func:`stage_arguments`."""
    options = config_options(ScoringSettings, config["scoring"])
    options["max_length"] = config[stage]["max_length"]
    options["no_padding_free"] = not config[stage]["padding_free"]
    options["prompt_format"] = config["game"]["prompt_format"]
    options["trust_remote_code"] = config["base_model"]["trust_remote_code"]
    options["device"] = family_device(config, "score")
    return options
