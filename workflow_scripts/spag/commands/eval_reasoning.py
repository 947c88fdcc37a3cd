"""``spag eval-reasoning``: reasoning benchmarks of one model with lm-evaluation-harness.

Runs ``lm_eval.simple_evaluate`` (model type ``hf``) on a checkpoint folder and
writes a JSON file with per-task metrics (acc, acc_norm and their stderr, or the
task's own metrics), the model name and path, and the lm-eval version.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from spag.evaluation.reasoning import ReasoningSettings
from spag.models.settings import ModelLoading
from spag.settings import add_arguments as add_setting_arguments
from spag.settings import from_arguments, opt, req

log = logging.getLogger("spag.eval_reasoning")


@dataclass(frozen=True, kw_only=True)
class EvalReasoningConfig(ReasoningSettings):
    """One ``spag eval-reasoning`` job: a model, its result file, the config's
    ``evaluation.reasoning`` and how the model is loaded."""

    model: str = req("model folder (Hugging Face checkpoint)")
    model_name: str | None = opt(None, "name recorded in the result (default: the folder name)")
    output: str = req("JSON file to write")
    # Given on every command line; by hand no local task folder is searched.
    tasks: list[str] = req("lm-eval task or group names")
    include_path: str | None = opt(
        None, "folder of local lm-eval task YAML files (e.g. data/lm_eval_tasks)"
    )
    device: str = opt(
        ModelLoading.device,
        "cuda (stop at once without working CUDA), cpu, auto (CUDA where it works), "
        "or a torch device such as cuda:1",
    )
    seed: int = opt(1234, "lm-eval's seeds")
    apply_chat_template: bool = opt(
        False, "render benchmark prompts with the tokenizer's chat template (prompt_format chat)"
    )
    trust_remote_code: bool = opt(
        ModelLoading.trust_remote_code, "allow model code from the model folder (off by default)"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_arguments(p, EvalReasoningConfig)


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.evaluation.reasoning import evaluate_model, geometric_mean, task_scores, write_record

    job: EvalReasoningConfig = from_arguments(EvalReasoningConfig, args)
    batch_size: int | str = job.batch_size
    if batch_size != "auto" and not str(batch_size).startswith("auto:"):
        try:
            batch_size = int(batch_size)
        except ValueError as exc:
            raise SpagInputError(
                f"--batch-size {job.batch_size!r}: not an integer or 'auto'"
            ) from exc
        if batch_size < 1:
            raise SpagInputError(f"--batch-size must be at least 1, got {batch_size}")
    record = evaluate_model(
        job.model,
        job.tasks,
        model_name=job.model_name,
        include_path=job.include_path,
        limit=job.limit,
        num_fewshot=job.num_fewshot,
        batch_size=batch_size,
        device=job.device,
        dtype=job.dtype,
        trust_remote_code=job.trust_remote_code,
        seed=job.seed,
        apply_chat_template=job.apply_chat_template,
    )
    write_record(record, job.output)
    scores = task_scores(record)
    for name, score in scores.items():
        log.info("%s: %s = %.4f", name, record["tasks"][name].get("metric"), score)
    gm = geometric_mean(list(scores.values()))
    log.info(
        "wrote %s (geometric mean %s) in %.1f s",
        job.output,
        "n/a" if gm is None else f"{gm:.4f}",
        record["elapsed_s"],
    )
    return 0
