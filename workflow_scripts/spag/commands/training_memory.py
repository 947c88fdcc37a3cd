"""``spag training-memory``: a training job's memory per GPU for each stage of a config,
full fine-tuning beside LoRA, from the model's ``config.json`` (see
:mod:`spag.ops.capacity`), and whether it fits each GPU family."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spag.commands.engine_capacity import add_gpu_sizes, gpu_sizes
from spag.errors import SpagInputError
from spag.ops.capacity import LORA_TARGETS, ZeroLayout, read_model, training_memory

STAGES = ("imitation", "spag")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model folder, or a config.json")
    p.add_argument(
        "--configfile",
        nargs="+",
        default=["config.yaml"],
        help="the run's config files, in the order given to snakemake (default: config.yaml)",
    )
    p.add_argument("--stage", choices=STAGES, nargs="+", default=list(STAGES))
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
    from spag.training.distributed import resolve_deepspeed

    if args.lora_rank < 1:
        raise SpagInputError(f"--lora-rank must be at least 1, got {args.lora_rank}")
    model, parameters = read_model(args.model)
    config, given = read_config_files(args.configfile)
    validate_config(config, source=" + ".join(args.configfile), given=given)
    resources = config["resources"]["train"]
    nodes = max(int(resources.get("nodes", 1)), 1)
    gpus = max(int(resources.get("gpus", 0)), 1) * nodes
    sizes = gpu_sizes(args)
    for stage in args.stage:
        s = config[stage]
        ds = resolve_deepspeed(s["deepspeed"])
        zero = ZeroLayout.from_config(json.loads(Path(ds).read_text()) if ds else None)
        common = dict(
            per_device_batch_size=s["per_device_batch_size"],
            max_length=s["max_length"],
            bf16=s["bf16"],
            activation_checkpointing=s["activation_checkpointing"],
            zero=zero,
            gpus=gpus,
            nodes=nodes,
            parameters=parameters,
        )
        print(
            f"{stage}: {s['per_device_batch_size']} samples of {s['max_length']} tokens per "
            f"GPU, {gpus} GPU(s) on {nodes} node(s), deepspeed {s['deepspeed'] or 'none'}, "
            f"bf16 {s['bf16']}, activation checkpointing {s['activation_checkpointing']}"
        )
        peft = s["peft"]
        rank, targets = (
            (peft["r"], tuple(peft["target_modules"]))
            if peft
            else (args.lora_rank, tuple(args.lora_targets))
        )
        estimates = {
            "full fine-tuning": training_memory(model, **common),
            f"LoRA r={rank}": training_memory(
                model, lora_rank=rank, lora_targets=targets, **common
            ),
        }
        # The method the config trains this stage with is marked.
        chosen = f"LoRA r={rank}" if peft else "full fine-tuning"
        for method, mem in estimates.items():
            fits = [name for name, gib in sizes.items() if mem.total_gib <= gib]
            print(
                f"{'*' if method == chosen else ' '} {method} ({mem.trained_parameters:,} "
                f"trained parameters): {mem.describe()}; "
                f"fits: {', '.join(fits) or 'none of ' + ', '.join(sizes)}"
            )
    return 0
