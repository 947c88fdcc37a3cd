"""``spag engine-capacity``: how many games of ``max_length`` tokens one vLLM engine holds
at once on each GPU family, from the model's ``config.json`` (see
:mod:`spag.ops.capacity`), and whether ``--batch-size`` exceeds it."""

from __future__ import annotations

import argparse

from spag.generation.settings import DTYPES, SelfplaySettings
from spag.ops.capacity import GPU_FAMILIES, engine_capacity, read_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model folder, or a config.json")
    p.add_argument("--max-length", type=int, default=SelfplaySettings.max_length)
    p.add_argument("--dtype", choices=DTYPES, default=SelfplaySettings.dtype)
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=SelfplaySettings.gpu_memory_utilization
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=None, help="max_num_seqs to compare")
    add_gpu_sizes(p)


def add_gpu_sizes(p: argparse.ArgumentParser) -> None:
    """The GPU sizes an estimate is stated for (read back by :func:`gpu_sizes`)."""
    p.add_argument(
        "--gpu-memory-gib",
        type=float,
        nargs="*",
        default=None,
        help="GPU sizes (default: the common families)",
    )


def gpu_sizes(args: argparse.Namespace) -> dict[str, float]:
    """GPU name -> GiB: the sizes given, else the common families."""
    return {f"{g:g} GiB": g for g in args.gpu_memory_gib} if args.gpu_memory_gib else GPU_FAMILIES


def run(args: argparse.Namespace) -> int:
    config, parameters = read_model(args.model)
    sizes = gpu_sizes(args)
    for name, gib in sizes.items():
        cap = engine_capacity(
            config,
            gpu_memory_gib=gib,
            share=args.gpu_memory_utilization,
            max_length=args.max_length,
            dtype=args.dtype,
            parameters=parameters,
            tensor_parallel_size=args.tensor_parallel_size,
        )
        line = f"{name}: {cap.describe(args.max_length)}"
        if args.batch_size and args.batch_size > cap.games:
            line += f"; batch size {args.batch_size} exceeds it (the rest wait in vLLM's queue)"
        print(line)
    return 0
