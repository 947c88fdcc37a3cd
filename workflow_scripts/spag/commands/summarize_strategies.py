"""``spag summarize-strategies``: one row per model from its strategy table
(``results/summary/poker.tsv``: exploitability, chips per hand against the random and
the equilibrium players, mass outside the legal moves) and the plot of
exploitability by model, in run order."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategies", nargs="+", required=True, help="strategy TSVs, in run order")
    p.add_argument("--models", nargs="+", required=True, help="their model names, same order")
    p.add_argument("--output", required=True, help="summary TSV to write")
    p.add_argument("--plot", default=None, help="exploitability plot (PNG) to write")


def run(args: argparse.Namespace) -> int:
    import logging

    from spag.errors import SpagInputError
    from spag.evaluation.strategy import SUMMARY_COLUMNS, summarize_strategies, write_tsv

    if len(args.models) != len(args.strategies):
        raise SpagInputError(
            f"--models names {len(args.models)} models for {len(args.strategies)} --strategies"
        )
    rows = summarize_strategies(dict(zip(args.models, args.strategies, strict=True)))
    if args.plot:
        from spag.report.plots import plot_exploitability

        plot_exploitability(rows, args.plot)
    write_tsv(rows, SUMMARY_COLUMNS, args.output)
    log = logging.getLogger("spag.summarize_strategies")
    for r in rows:
        log.info("%s: exploitability %.4f, vs random %+.4f", r["model"], r["exploitability"],
                 r["ev_vs_random"])  # fmt: skip
    return 0
