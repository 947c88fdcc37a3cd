"""``spag training-memory``: a training job's memory per GPU for each stage of a config,
full fine-tuning beside LoRA, from the model's ``config.json`` (see
:mod:`spag.ops.capacity`), and whether it fits each GPU family."""

from __future__ import annotations

import argparse

from spag.commands import add_configfile
from spag.commands.engine_capacity import add_gpu_sizes, gpu_sizes
from spag.errors import SpagInputError
from spag.ops.capacity import LORA_TARGETS, TRAIN_STAGES, read_model, stage_estimates


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model folder, or a config.json")
    add_configfile(p)
    p.add_argument("--stage", choices=TRAIN_STAGES, nargs="+", default=list(TRAIN_STAGES))
    p.add_argument(
        "--lora-rank",
        type=int,
        default=16,
        help="the adapters' rank of the LoRA estimate of a stage without peft settings "
        "(a stage's own <stage>.peft wins)",
    )
    p.add_argument(
        "--lora-targets",
        nargs="+",
        default=list(LORA_TARGETS),
        help="projections with adapters, as --lora-rank (default: every attention and MLP "
        "projection)",
    )
    add_gpu_sizes(p)


def run(args: argparse.Namespace) -> int:
    from spag.config import read_config_files, validate_config

    if args.lora_rank < 1:
        raise SpagInputError(f"--lora-rank must be at least 1, got {args.lora_rank}")
    model, parameters = read_model(args.model)
    config, given = read_config_files(args.configfile)
    validate_config(config, source=" + ".join(args.configfile), given=given)
    sizes = gpu_sizes(args)
    for stage in stage_estimates(
        config, model, parameters, tuple(args.stage), args.lora_rank, tuple(args.lora_targets)
    ):
        print(f"{stage.stage}: {stage.shape}")
        for method, mem in stage.estimates.items():
            fits = [name for name, gib in sizes.items() if mem.total_gib <= gib]
            # The method the config trains this stage with is marked.
            print(
                f"{'*' if method == stage.chosen else ' '} {method} "
                f"({mem.trained_parameters:,} trained parameters): {mem.describe()}; "
                f"fits: {', '.join(fits) or 'none of ' + ', '.join(sizes)}"
            )
    return 0
