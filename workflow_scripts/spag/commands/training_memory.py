"""``spag training-memory``: a training job's memory per GPU for each stage of a config,
full fine-tuning beside LoRA, from the model's ``config.json`` (see
:mod:`spag.ops.capacity`), and whether it fits each GPU family."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spag.errors import SpagInputError
from spag.ops.capacity import (
    GPU_FAMILIES,
    LORA_TARGETS,
    NEEDED_KEYS,
    ZeroLayout,
    model_config,
    text_config,
    training_memory,
)

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
        "--lora-rank", type=int, default=16, help="the adapters' rank of the LoRA estimate"
    )
    p.add_argument(
        "--lora-targets",
        nargs="+",
        default=list(LORA_TARGETS),
        help="projections with adapters (default: every attention and MLP projection)",
    )
    p.add_argument(
        "--gpu-memory-gib",
        type=float,
        nargs="*",
        default=None,
        help="GPU sizes (default: the common families)",
    )


def _config(files: list[str]) -> dict:
    import yaml

    from spag.config import validate_config

    config: dict = {}
    for name in files:
        try:
            layer = yaml.safe_load(Path(name).read_text()) or {}
        except OSError as exc:
            raise SpagInputError(f"--configfile {name}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SpagInputError(f"--configfile {name}: not YAML ({exc})") from None
        _merge(config, layer)
    return validate_config(config, source=" + ".join(files))


def _merge(base: dict, layer: dict) -> None:
    # As Snakemake layers config files: nested sections merge, other values replace.
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def run(args: argparse.Namespace) -> int:
    from spag.training.distributed import resolve_deepspeed

    if args.lora_rank < 1:
        raise SpagInputError(f"--lora-rank must be at least 1, got {args.lora_rank}")
    path = Path(args.model)
    if path.is_file():
        model, parameters = text_config(json.loads(path.read_text())), None
    else:
        model, parameters = model_config(path)
    missing = [k for k in NEEDED_KEYS if k not in model]
    if missing:
        raise SpagInputError(
            f"{path}: the config has no {', '.join(missing)}: not a decoder this estimate knows"
        )
    config = _config(args.configfile)
    resources = config["resources"]["train"]
    nodes = max(int(resources.get("nodes", 1)), 1)
    gpus = max(int(resources.get("gpus", 0)), 1) * nodes
    sizes = {f"{g:g} GiB": g for g in args.gpu_memory_gib} if args.gpu_memory_gib else GPU_FAMILIES
    for stage in args.stage:
        s = config[stage]
        ds = resolve_deepspeed(s["deepspeed"])
        zero = ZeroLayout.from_config(json.loads(Path(ds).read_text()) if ds else None)
        common = dict(
            per_device_batch_size=s["per_device_batch_size"],
            max_length=s["max_length"],
            bf16=s["bf16"],
            gradient_checkpointing=s["gradient_checkpointing"],
            zero=zero,
            gpus=gpus,
            nodes=nodes,
            parameters=parameters,
        )
        print(
            f"{stage}: {s['per_device_batch_size']} samples of {s['max_length']} tokens per "
            f"GPU, {gpus} GPU(s) on {nodes} node(s), deepspeed {s['deepspeed'] or 'none'}, "
            f"bf16 {s['bf16']}, gradient checkpointing {s['gradient_checkpointing']}"
        )
        estimates = {
            "full fine-tuning": training_memory(model, **common),
            f"LoRA r={args.lora_rank}": training_memory(
                model, lora_rank=args.lora_rank, lora_targets=tuple(args.lora_targets), **common
            ),
        }
        for method, mem in estimates.items():
            fits = [name for name, gib in sizes.items() if mem.total_gib <= gib]
            print(
                f"  {method} ({mem.trained_parameters:,} trained parameters): "
                f"{mem.describe()}; fits: {', '.join(fits) or 'none of ' + ', '.join(sizes)}"
            )
    return 0
