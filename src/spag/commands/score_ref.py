"""``spag score-ref``: add ``ref_logprob`` (sequence mean log-prob) under the reference model."""

from __future__ import annotations

import argparse

from spag.device import DEVICES
from spag.game.rendering import PROMPT_FORMATS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="reference model folder")
    p.add_argument("--samples", required=True, help="samples Parquet (docs/design.md section 6)")
    p.add_argument("--output", required=True, help="scored samples Parquet to write")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=2048, help="same value as training's")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument(
        "--prompt-format", choices=PROMPT_FORMATS, default="raw", help="same value as training's"
    )
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument(
        "--padding-free",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score packed rows, attention per sample: training's path with padding_free "
        "(the same value as training's; default on)",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
    )


def run(args: argparse.Namespace) -> int:
    from spag.training.scoring import score_file

    score_file(
        args.model,
        args.samples,
        args.output,
        batch_size=args.batch_size,
        max_length=args.max_length,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
        prompt_format=args.prompt_format,
        device=args.device,
        padding_free=args.padding_free,
    )
    return 0
