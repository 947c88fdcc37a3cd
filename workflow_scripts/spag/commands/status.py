"""``spag status``: where the run in this folder stands (see :mod:`spag.ops.status`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spag.commands import add_configfile


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_configfile(p)
    p.add_argument("--directory", default=".", help="the workflow folder (default: here)")


def run(args: argparse.Namespace) -> int:
    from spag.config import read_config_files, validate_config
    from spag.ops.status import format_status, require_run, run_status

    root = Path(args.directory)
    require_run(root)  # before the config files: their absence would be the lesser news
    config, given = read_config_files(
        [Path(name) if Path(name).is_absolute() else root / name for name in args.configfile]
    )
    validate_config(config, source=" + ".join(args.configfile), given=given)
    print(format_status(run_status(config, root)))
    return 0
