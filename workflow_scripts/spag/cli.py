"""The ``spag`` command: one sub-command per pipeline step.

Each step lives in ``spag.commands.<module>`` with ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported only when their step runs, so that light
steps (judging, rewards) do not pay for importing torch.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import gc
import importlib
import logging
import os
import sys
import time

from spag.errors import SpagInputError, SpagRunError
from spag.ops.allocator import keep_freed_memory

# Errors of the storage, not of the program: reported as one line naming the file.
_STORAGE_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}

# step name -> (module under spag.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "target-words": ("target_words", "build the training and held-out target word lists"),
    "deals": ("deals", "write the secrets of a game that deals them (Kuhn Poker)"),
    "build-tiny-model": ("build_tiny_model", "build the embedded tiny Llama and its BPE tokenizer"),
    "prepare-base-model": ("prepare_base_model", "check a hub id or local model and record it"),
    "prepare-sft": ("prepare_sft", "convert instruction data (query/target or Alpaca) to Parquet"),
    "imitation-samples": ("imitation_samples", "build imitation samples from demonstration games"),
    "play": ("play", "play the game for one shard of secrets (target words, deals)"),
    "merge-episodes": ("merge_episodes", "merge shard files and judge every game"),
    "assign-rewards": ("assign_rewards", "judge episodes, assign rewards, mix in SFT rows"),
    "score-ref": ("score_ref", "add ref_logprob under the reference model"),
    "train": ("train", "imitation (SFTwithKL) or SPAG (OfflinePO) training"),
    "eval-games": ("eval_games", "win/loss/tie table of evaluation games"),
    "eval-reasoning": ("eval_reasoning", "reasoning benchmarks with lm-evaluation-harness"),
    "read-strategy": ("read_strategy", "a model's exact strategy in a solved game (Kuhn Poker)"),
    "score-hints": ("score_hints", "graded hints: a listener ranks the secret after each hint"),
    "summarize-hints": ("summarize_hints", "the graded hints of every model, paired with M0"),
    "summarize-strategies": ("summarize_strategies", "exploitability and chips of every model"),
    "compare-arms": ("compare_arms", "a SPAG run against its control arm, paired model by model"),
    "scripted-games": ("scripted_games", "games of the game's scripted player (demonstrations)"),
    "summarize-epoch": ("summarize_epoch", "the summary row of one epoch"),
    "summarize-run": ("summarize_run", "the run-wide summary tables"),
    "plot-epoch": ("plot_epoch", "one epoch's plots for the report"),
    "plot-run": ("plot_run", "the run-wide plots for the report"),
    "run-info": ("run_info", "what produced the run: commit, versions, hosts, config"),
    "status": ("status", "where the run in this folder stands (epochs, shards, training)"),
    "preflight": ("preflight", "check what one rule family's jobs need (snakemake preflight)"),
    "preflight-report": ("preflight_report", "print the preflight table of every family"),
    "engine-capacity": ("engine_capacity", "games a vLLM engine holds at once, per GPU family"),
    "training-memory": ("training_memory", "a training job's memory per GPU: full and LoRA"),
    "calibration-samples": ("calibration_samples", "a seeded sample of rows (calibration)"),
    "calibration-report": ("calibration_report", "the calibration's figures, a file a family"),
    "estimate": ("estimate", "a target's time per rule and GPU-hours, from measured figures"),
    "gpu-lease": ("gpu_lease", "lease N of this machine's GPUs, then run a command on them"),
}


def _load(module: str):
    return importlib.import_module(f"spag.commands.{module}")


# A step imports torch and transformers (about a million long-lived objects), then works
# mostly in tensors. At the default threshold (700 allocations) the collector ran about 900
# times over those imports: 1.5 of a tiny-model step's 10 CPU-seconds. Collections stay,
# less often: cyclic garbage is still freed within a step.
GC_THRESHOLD = (50_000, 20, 10)


def main(argv: list[str] | None = None) -> int:
    gc.set_threshold(*GC_THRESHOLD)
    argv = sys.argv[1:] if argv is None else argv
    # Only the chosen step's module is imported (its arguments are parsed with it).
    parser = argparse.ArgumentParser(prog="spag", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="STEP")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == chosen:
            _load(module).add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Before the step allocates: freed buffers stay for reuse (see spag.ops.allocator).
    keep_freed_memory()
    started = time.time()
    try:
        rc = int(_load(args._module).run(args) or 0)
        if rc == 0:
            _record_job(args, started)
        return rc
    except SpagInputError as exc:
        print(f"spag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except SpagRunError as exc:
        print(f"spag {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # A read-only or full results folder: the file and the reason, not a traceback.
        if exc.errno not in _STORAGE_ERRORS or not exc.filename:
            raise
        print(f"spag {args.command}: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    finally:
        # The step's objects (torch, transformers: millions) need no collection at
        # exit: without this, the interpreter's last garbage collection takes ~1 s.
        gc.freeze()


def run() -> None:
    """The ``spag`` command (console script, ``python -m spag``): :func:`main`, then the
    process's exit.

    A step that ran a process group here (training) leaves without the interpreter's
    teardown, its output and job record written and its exit handlers run (trackers
    finish, logs flush): the backends' leftover threads can abort it there
    (``spag.training.distributed.group_ended``). Callers of :func:`main` in a process
    that goes on are not ended."""
    from spag.training.distributed import group_ended  # no torch at import

    rc = main()
    if rc == 0 and group_ended():
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit(rc)


def _record_job(args: argparse.Namespace, started: float) -> None:
    """The finished step's job record beside its output (spag.ops.provenance)."""
    from spag.ops.provenance import OUTPUT_FLAGS, UNRECORDED_STEPS, write_job_record

    output = next((getattr(args, f) for f in OUTPUT_FLAGS if getattr(args, f, None)), None)
    if output is None or args.command in UNRECORDED_STEPS:
        return
    try:
        write_job_record(args.command, output, started)
    except OSError as exc:  # the output is written; its record is not worth failing for
        logging.getLogger("spag").warning("no job record for %s: %s", output, exc)


if __name__ == "__main__":
    run()
