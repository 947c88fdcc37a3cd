"""``spag train``: imitation (SFTwithKL) or SPAG (OfflinePO) training with the HF Trainer.

Run it directly (one process) or as ``torchrun --no-python --nproc_per_node N spag train ...``.
"""

from __future__ import annotations

import argparse

from spag.rendering import PROMPT_FORMATS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, choices=["sft_kl", "offline_po"])
    p.add_argument("--model", required=True, help="init model folder")
    p.add_argument("--samples", required=True, help="scored samples Parquet (with ref_logprob)")
    p.add_argument("--output", required=True, help="model folder to write")
    p.add_argument("--checkpoint-dir", required=True, help="trainer checkpoints (resume from here)")
    p.add_argument("--loss-log", required=True, help="per-step loss table (TSV) to write")
    p.add_argument(
        "--ref-model", default=None, help="model the samples were scored under (default: --model)"
    )
    p.add_argument(
        "--kl-coeff",
        type=float,
        default=None,
        help="KL coefficient (default 0.1 for sft_kl, 0.2 for offline_po)",
    )
    p.add_argument("--sft-coeff", type=float, default=0.5)
    p.add_argument("--clip-eps", type=float, default=0.2)
    p.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="default 5e-6 for sft_kl, 2e-6 for offline_po",
    )
    p.add_argument("--num-train-epochs", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--per-device-batch-size", type=int, default=2)
    p.add_argument("--gradient-accumulation-steps", type=int, default=8)
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--lr-scheduler", default="cosine")
    p.add_argument("--warmup-ratio", type=float, default=0.03)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument(
        "--deepspeed", default="none", help="zero3_offload | zero3 | path to a JSON config | none"
    )
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--save-total-limit", type=int, default=2)
    p.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep trainer checkpoints after the model is written",
    )
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--group-by-length", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--prompt-format",
        choices=PROMPT_FORMATS,
        default="raw",
        help="raw or chat: how queries are rendered (the same as in play; default raw)",
    )
    p.add_argument("--trust-remote-code", action="store_true")


def run(args: argparse.Namespace) -> int:
    from spag.training.run import TrainConfig, train

    train(
        TrainConfig(
            method=args.method,
            model=args.model,
            samples=args.samples,
            output=args.output,
            checkpoint_dir=args.checkpoint_dir,
            loss_log=args.loss_log,
            ref_model=args.ref_model,
            kl_coeff=args.kl_coeff,
            sft_coeff=args.sft_coeff,
            clip_eps=args.clip_eps,
            learning_rate=args.learning_rate,
            num_train_epochs=args.num_train_epochs,
            max_steps=args.max_steps,
            per_device_batch_size=args.per_device_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            max_length=args.max_length,
            lr_scheduler=args.lr_scheduler,
            warmup_ratio=args.warmup_ratio,
            weight_decay=args.weight_decay,
            bf16=args.bf16,
            tf32=args.tf32,
            gradient_checkpointing=args.gradient_checkpointing,
            deepspeed=args.deepspeed,
            save_steps=args.save_steps,
            save_total_limit=args.save_total_limit,
            logging_steps=args.logging_steps,
            seed=args.seed,
            group_by_length=args.group_by_length,
            prompt_format=args.prompt_format,
            trust_remote_code=args.trust_remote_code,
            keep_checkpoints=args.keep_checkpoints,
        )
    )
    return 0
