"""``spag preflight``: check what one rule family's jobs need, write its report (JSON).

Run by ``snakemake preflight`` as a job of the family (its resources, environment and
launch prefix); every rank of a training launch checks, rank 0 writes. A failed check
is a row of the report, not an error: the table of every family is printed by
``spag preflight-report``.
"""

from __future__ import annotations

import argparse

from spag.generation.settings import SelfplaySettings
from spag.ops.device import DEVICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", required=True, help="the report's name (a job family)")
    p.add_argument(
        "--resources", default=None, help="its config resources.<key> (default: --family)"
    )
    p.add_argument("--output", required=True, help="report JSON to write")
    p.add_argument("--device", choices=DEVICES[1:], default="cpu", help="what the family asks")
    p.add_argument("--backend", choices=("hf", "vllm"), default=None, help="generation backend")
    p.add_argument("--model", default=None, help="base model: tiny, a folder or a hub id")
    p.add_argument("--dtype", default="auto", help="the engine's dtype (vllm)")
    p.add_argument("--max-length", type=int, default=None, help="the engine's context (vllm)")
    p.add_argument("--batch-size", type=int, default=None, help="the engine's max_num_seqs (vllm)")
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=SelfplaySettings.gpu_memory_utilization,
        help="the engine's share of the GPU (vllm)",
    )
    p.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="GPUs one engine spans (vllm)"
    )
    p.add_argument("--deepspeed", nargs="*", default=[], help="the stages' DeepSpeed configs")
    p.add_argument("--endpoint", nargs="*", default=[], help="endpoint specs to reach")
    p.add_argument("--path", nargs="*", default=[], help="folders whose disk is checked")
    p.add_argument(
        "--training-gib",
        nargs="*",
        default=[],
        metavar="STAGE=GIB",
        help="each training stage's estimated memory per GPU",
    )
    p.add_argument("--threads", type=int, default=None, help="expected threads per rank")
    p.add_argument("--cpus", type=int, default=None, help="CPUs each rank's step must see")
    p.add_argument("--lm-eval", action="store_true", help="lm-eval must import")
    p.add_argument("--online", action="store_true", help="the run may download the base model")


def run(args: argparse.Namespace) -> int:
    from spag.ops.preflight import FamilyPlan, gather_rows, run_checks, write_report

    plan = FamilyPlan(
        family=args.family,
        resources=args.resources or args.family,
        device=args.device,
        backend=args.backend,
        model=args.model,
        dtype=args.dtype,
        max_length=args.max_length,
        batch_size=args.batch_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        deepspeed=args.deepspeed,
        training_gib={k: float(v) for k, _, v in (w.partition("=") for w in args.training_gib)},
        endpoints=args.endpoint,
        paths=args.path,
        threads=args.threads,
        cpus=args.cpus,
        lm_eval=args.lm_eval,
        offline=not args.online,
    )
    rows = gather_rows(run_checks(plan))
    if rows is not None:
        write_report(plan, rows, args.output)
    return 0
