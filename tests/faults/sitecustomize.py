"""Test-only fault injection, outside the package: with this folder on PYTHONPATH and
``SPAG_TEST_FAIL_SHARDS=1,3``, ``spag play --shard-index 1`` (or 3) exits with code 3
before writing anything. Python imports ``sitecustomize`` at start-up, so every
``spag`` process a test's Snakemake starts (locally or through sbatch, which
exports the environment) carries the fault, and the production code has no hook.
"""

import os
import sys

FAIL_ENV = "SPAG_TEST_FAIL_SHARDS"
FAIL_EXIT_CODE = 3

_value = os.environ.get(FAIL_ENV, "")
if _value.strip():
    _failing = {int(part) for part in _value.split(",") if part.strip()}
    try:
        import spag.commands.play as _play
    except ImportError:  # a Python without the package (e.g. a helper tool)
        _play = None
    if _play is not None:
        _real_run = _play.run

        def _run(args):
            if args.shard_index in _failing:
                print(
                    f"spag play: shard {args.shard_index} fails on purpose "
                    f"({FAIL_ENV}={_value}); no output written",
                    file=sys.stderr,
                )
                return FAIL_EXIT_CODE
            return _real_run(args)

        _play.run = _run

# ``SPAG_TEST_SLOW_STEP=target-words:6``: that step sleeps 6 s before it runs, so a
# test can kill the job's process while the step is under way.
SLOW_ENV = "SPAG_TEST_SLOW_STEP"
_slow = os.environ.get(SLOW_ENV, "")
if _slow.strip():
    import importlib
    import time

    _step, _, _seconds = _slow.partition(":")
    try:
        from spag.cli import COMMANDS as _commands
    except ImportError:
        _commands = {}
    if _step in _commands:
        _module = importlib.import_module(f"spag.commands.{_commands[_step][0]}")
        _slow_run = _module.run

        def _run_slowly(args, _real=_slow_run):
            time.sleep(float(_seconds))
            return _real(args)

        _module.run = _run_slowly
