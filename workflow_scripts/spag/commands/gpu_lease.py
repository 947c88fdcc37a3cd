"""``spag gpu-lease N CMD...``: lease N GPUs (``spag.ops.gpu_lease``), then run CMD in this
process's place, so that it holds them (torchrun of a local multi-GPU training job, whose
ranks see only these). Where the GPUs are chosen already (a SLURM job's own, torchrun's
ranks) or the machine has none, CMD runs as it is."""

from __future__ import annotations

import argparse
import os


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("count", type=int, help="GPUs to lease")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run on them")


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.ops.device import nvml_device_count
    from spag.ops.gpu_lease import claim_local_gpus

    if not args.command:
        raise SpagInputError("spag gpu-lease: no command to run")
    claim_local_gpus(args.count, args.command[0], nvml_device_count())
    try:
        os.execvp(args.command[0], args.command)
    except FileNotFoundError as exc:
        raise SpagInputError(f"spag gpu-lease: command not found: {args.command[0]}") from exc
