"""``spag eval-reasoning``: reasoning benchmarks of one model with lm-evaluation-harness.

Runs ``lm_eval.simple_evaluate`` (model type ``hf``) on a checkpoint folder and
writes a JSON file with per-task metrics (acc, acc_norm and their stderr, or the
task's own metrics), the model name and path, and the lm-eval version.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger("spag.eval_reasoning")


def _limit(value: str) -> int | float:
    # lm-eval takes a count (10) or a fraction of each task (0.1).
    number = float(value)
    return int(number) if number >= 1 and number.is_integer() else number


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder (Hugging Face checkpoint)")
    p.add_argument(
        "--model-name", default=None, help="name recorded in the result (default: the folder name)"
    )
    p.add_argument("--output", required=True, help="JSON file to write")
    p.add_argument("--tasks", nargs="+", required=True, help="lm-eval task or group names")
    p.add_argument(
        "--include-path",
        default=None,
        help="folder of local lm-eval task YAML files (e.g. data/lm_eval_tasks)",
    )
    p.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help="items per task: a count, or a fraction below 1 (default: all)",
    )
    p.add_argument(
        "--num-fewshot", type=int, default=None, help="few-shot examples (default: each task's own)"
    )
    p.add_argument("--batch-size", default="8", help="lm-eval batch size, or 'auto' (default 8)")
    p.add_argument(
        "--device",
        default="auto",
        help="cuda (stop at once without working CUDA), cpu, auto (CUDA where it works), "
        "or a torch device such as cuda:1 (default auto)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="the same for every model: auto is bfloat16 on a GPU that has it (else "
        "float16), float32 on CPU; never the checkpoint's own dtype",
    )
    p.add_argument("--seed", type=int, default=1234, help="lm-eval's seeds (default 1234)")
    p.add_argument(
        "--apply-chat-template",
        action="store_true",
        help="render benchmark prompts with the tokenizer's chat template (prompt_format chat)",
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model code from the model folder (off by default)",
    )


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.evaluation.reasoning import evaluate_model, geometric_mean, task_scores, write_record

    batch_size: int | str = args.batch_size
    if batch_size != "auto" and not str(batch_size).startswith("auto:"):
        try:
            batch_size = int(batch_size)
        except ValueError as exc:
            raise SpagInputError(
                f"--batch-size {args.batch_size!r}: not an integer or 'auto'"
            ) from exc
        if batch_size < 1:
            raise SpagInputError(f"--batch-size must be at least 1, got {batch_size}")
    record = evaluate_model(
        args.model,
        args.tasks,
        model_name=args.model_name,
        include_path=args.include_path,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        batch_size=batch_size,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
        seed=args.seed,
        apply_chat_template=args.apply_chat_template,
    )
    write_record(record, args.output)
    scores = task_scores(record)
    for name, score in scores.items():
        log.info("%s: %s = %.4f", name, record["tasks"][name].get("metric"), score)
    gm = geometric_mean(list(scores.values()))
    log.info(
        "wrote %s (geometric mean %s) in %.1f s",
        args.output,
        "n/a" if gm is None else f"{gm:.4f}",
        record["elapsed_s"],
    )
    return 0
