"""The settings of one training run, declared once.

``StageSettings`` holds the hyper-parameters a user sets per stage (config keys
``imitation.*`` and ``spag.*``; the schema's ``$defs.training`` lists the same keys
with the same defaults, checked by a test). ``TrainConfig`` adds what a job is given
(files, method, run-wide keys). ``spag train``'s flags, their defaults and help are
generated from ``TrainConfig`` (:func:`add_arguments`), and the rules' flags from the
validated config (:func:`stage_arguments`), so no default is written twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from spag.device import DEVICES, family_device
from spag.game.rendering import PROMPT_FORMATS
from spag.tracking import DEFAULT_DIR as DEFAULT_TRACKING_DIR
from spag.tracking import ENV_PROJECT, ENV_REPORT_TO, ENV_RUN_NAME, ENV_TRACKING_DIR

# Which loss each pipeline stage trains with (docs/design.md section 4).
STAGE_METHOD = {"imitation": "sft_kl", "spag": "offline_po"}
# The paper's settings that differ between the two losses.
METHOD_DEFAULTS: dict[str, dict[str, float]] = {
    "sft_kl": {"learning_rate": 5e-6, "kl_coeff": 0.1},
    "offline_po": {"learning_rate": 2e-6, "kl_coeff": 0.2},
}


def _opt(default: Any, help: str, **meta: Any) -> Any:
    return field(default=default, metadata={"help": help, **meta})


def _req(help: str, **meta: Any) -> Any:
    return field(metadata={"help": help, **meta})


@dataclass(kw_only=True)
class StageSettings:
    """Hyper-parameters of one training stage (config ``imitation`` / ``spag``)."""

    learning_rate: float | None = _opt(None, "peak learning rate (default: by method)")
    num_train_epochs: float = _opt(1.0, "passes over the samples")
    max_steps: int = _opt(-1, "optimizer steps; -1: as many as the epochs give")
    per_device_batch_size: int = _opt(2, "samples per device and step")
    gradient_accumulation_steps: int = _opt(8, "micro-batches per optimizer step")
    max_length: int = _opt(2048, "tokens per sample (left-truncated, BOS kept)")
    lr_scheduler: str = _opt("cosine", "transformers scheduler name")
    warmup_ratio: float = _opt(0.03, "warm-up as a fraction of the steps, in [0, 1)")
    weight_decay: float = _opt(0.0, "AdamW weight decay")
    bf16: bool = _opt(False, "bfloat16 mixed precision")
    tf32: bool = _opt(False, "TF32 matrix products (CUDA only)")
    gradient_checkpointing: bool = _opt(False, "recompute activations in the backward pass")
    deepspeed: str | None = _opt(None, "zero3_offload | zero3 | a JSON config path | none")
    save_steps: int = _opt(100, "trainer checkpoint every K steps (for resume)")
    logging_steps: int = _opt(1, "loss log row every K steps")
    group_by_length: bool = _opt(True, "batches of similar length (the SFT/game mix kept)")
    padding_free: bool = _opt(
        True, "a micro-batch's samples packed in one row, attention per sample (no padding)"
    )
    kl_coeff: float | None = _opt(None, "KL coefficient (default: by method)")
    sft_coeff: float = _opt(0.5, "weight of the SFT term (offline_po only)")
    clip_eps: float = _opt(0.2, "ratio clip range (offline_po only)")


@dataclass(kw_only=True)
class TrainConfig(StageSettings):
    """One ``spag train`` job: its files and method, the run-wide keys and the stage's settings."""

    method: str = _req("loss", choices=tuple(METHOD_DEFAULTS))
    model: str = _req("init model folder")
    samples: str = _req("scored samples Parquet (with ref_logprob)")
    output: str = _req("model folder to write")
    checkpoint_dir: str = _req("trainer checkpoints (resume from here)")
    loss_log: str = _req("per-step loss table (TSV) to write")
    ref_model: str | None = _opt(None, "model the samples were scored under (default: --model)")
    seed: int = _opt(42, "run seed")
    prompt_format: str = _opt(
        "raw", "raw or chat: how queries are rendered (as in play)", choices=PROMPT_FORMATS
    )
    trust_remote_code: bool = _opt(False, "let transformers run the model's own code")
    save_total_limit: int = _opt(2, "trainer checkpoints kept")
    keep_checkpoints: bool = _opt(False, "keep trainer checkpoints after the model is written")
    device: str = _opt(
        "auto", "cuda (stop at once without working CUDA), cpu, or auto", choices=DEVICES
    )
    # Trackers (config `tracking`, spag.tracking): not part of what a checkpoint belongs
    # to. The workflow sets them through the environment variables named by `env`.
    report_to: str = _opt(
        "none", "trackers, comma-separated: tensorboard, wandb, trackio, mlflow", env=ENV_REPORT_TO
    )
    tracking_dir: str = _opt(
        DEFAULT_TRACKING_DIR, "folder of the trackers' offline files", env=ENV_TRACKING_DIR
    )
    project: str | None = _opt(
        None, "tracker project (default: the current folder's name)", env=ENV_PROJECT
    )
    run_name: str | None = _opt(
        None, "the run's name in trackers (stages are logged under it)", env=ENV_RUN_NAME
    )
    stage: str = _opt("train", "this stage's name in trackers (imitation, epoch1, ...)")


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING


# Settings that are run-wide keys of the config rather than per-stage ones.
RUN_KEYS = {"seed": ("seed",), "prompt_format": ("game", "prompt_format")}
RUN_KEYS["trust_remote_code"] = ("base_model", "trust_remote_code")


def stage_keys() -> list[str]:
    """The per-stage config keys (``imitation.*``, ``spag.*``), in declaration order."""
    return [f.name for f in dataclasses.fields(StageSettings)]


def _value_type(f: dataclasses.Field) -> type:
    hint = typing.get_type_hints(TrainConfig)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = args[0]
    return hint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``spag train``'s flags: one per ``TrainConfig`` field, with its default and help."""
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = _value_type(f)
        help_text = f.metadata["help"]
        if kind is bool:
            if f.default:
                parser.add_argument(
                    flag, action=argparse.BooleanOptionalAction, default=True, help=help_text
                )
            else:
                parser.add_argument(flag, action="store_true", help=help_text)
            continue
        extra = {}
        default = f.default
        if f.metadata.get("env"):
            default = os.environ.get(f.metadata["env"], default)
            help_text += f" (environment: {f.metadata['env']})"
        if f.metadata.get("choices"):
            extra["choices"] = f.metadata["choices"]
        if _required(f):
            parser.add_argument(flag, required=True, type=kind, help=help_text, **extra)
        else:
            shown = f" (default {default})" if default is not None else ""
            parser.add_argument(flag, type=kind, default=default, help=help_text + shown, **extra)


def from_arguments(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})


def resolve_method_defaults(cfg: TrainConfig) -> None:
    """Fill the learning rate and KL coefficient the method implies where they are unset."""
    for key, value in METHOD_DEFAULTS[cfg.method].items():
        if getattr(cfg, key) is None:
            setattr(cfg, key, value)


def stage_arguments(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """``spag train`` options of a pipeline stage from the validated config.

    Keys are flag names with ``_`` (``learning_rate``); a true default-on boolean
    turned off becomes ``no_<name>``. Settings equal to the default are passed too,
    so the job's command line shows every value it trains with.
    """
    settings = config[stage]
    options: dict[str, Any] = {"method": STAGE_METHOD[stage]}
    for f in dataclasses.fields(StageSettings):
        value = settings.get(f.name, f.default)
        if f.name in ("sft_coeff", "clip_eps") and STAGE_METHOD[stage] != "offline_po":
            continue
        if _value_type(f) is bool and f.default and not value:
            options[f"no_{f.name}"] = True
        else:
            options[f.name] = value
    for name, path in RUN_KEYS.items():
        value = config
        for key in path:
            value = value[key]
        options[name] = value
    # The rule family's GPUs decide: never a silent CPU run of a GPU job.
    options["device"] = family_device(config, "train")
    # formatted with the rule's wildcards (params strings are)
    options["stage"] = "imitation" if stage == "imitation" else "epoch{epoch}"
    return options
