"""``spag status``: where the run in this folder stands (see :mod:`spag.ops.status`),
and the time its target's jobs took and will take (see :mod:`spag.ops.timing`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spag.commands import add_configfile


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_configfile(p)
    p.add_argument("--directory", default=".", help="the workflow folder (default: here)")
    p.add_argument("--target", default=None, help="the target timed (default: spag_epoch<epochs>)")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="jobs of a rule that run at once (shards side by side), for the wall time left",
    )
    p.add_argument(
        "--no-times", action="store_true", help="leave out the times (no Snakemake dry-run)"
    )


def run(args: argparse.Namespace) -> int:
    from spag.config import read_config_files, validate_config
    from spag.ops.status import format_status, require_run, run_status

    root = Path(args.directory)
    require_run(root)  # before the config files: their absence would be the lesser news
    config, given = read_config_files(
        [Path(name) if Path(name).is_absolute() else root / name for name in args.configfile]
    )
    config = validate_config(config, source=" + ".join(args.configfile), given=given)
    print(format_status(run_status(config, root)))
    if args.no_times:
        return 0
    if not (root / "Snakefile").is_file():
        print("times: no Snakefile here (run from the workflow folder for the time left)")
        return 0
    from spag.ops.timing import format_times, rule_times, snakemake_plan

    target = args.target or f"spag_epoch{config['epochs']}"
    jobs = snakemake_plan(target, root, args.configfile)
    times, shape = rule_times(jobs, config, root)
    print(format_times(times, shape, args.jobs, f"times of {target}:"))
    return 0
