"""One module per ``spag`` step: ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse


def add_configfile(p: argparse.ArgumentParser) -> None:
    """``--configfile``: a run's config files, as the steps that read a whole config take them."""
    p.add_argument(
        "--configfile",
        nargs="+",
        default=["config.yaml"],
        help="the run's config files, in the order given to snakemake (default: config.yaml)",
    )
