"""``spag compare-arms``: a SPAG run folder against its control arm's (config
``rewards.control``), model by model, every metric paired where its games pair
(``spag.evaluation.arms``). Not a rule: it reads two run folders."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spag", required=True, help="the SPAG run folder (holds results/)")
    p.add_argument("--control", required=True, help="the control arm's run folder")
    p.add_argument("--game", required=True, help="the game both arms played (game.name)")
    p.add_argument(
        "--models",
        nargs="+",
        default=None,
        help="models to compare (default: every epoch<N>; base and imitation, M0, are the "
        "same in both arms when the control ran from a copy of the SPAG folder)",
    )
    p.add_argument("--output", required=True, help="comparison TSV to write")


def run(args: argparse.Namespace) -> int:
    import logging

    import pandas as pd

    from spag.evaluation.arms import ARM_COLUMNS, compare_arms
    from spag.game.base import load_game
    from spag.report.summary import write_tsv

    rows = compare_arms(args.spag, args.control, load_game(args.game), args.models)
    write_tsv(pd.DataFrame(rows, columns=list(ARM_COLUMNS)), args.output)
    log = logging.getLogger("spag.compare_arms")
    for r in rows:
        if r["group"] == "all":
            log.info("%s %s: spag %.4f, control %.4f, diff %+.4f [%.4f, %.4f]", r["model"],
                     r["metric"], r["spag"], r["control"], r["diff"], r["lo"], r["hi"])  # fmt: skip
    return 0
