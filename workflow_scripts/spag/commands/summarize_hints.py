"""``spag summarize-hints``: per model and role, the graded hints' mean reciprocal rank
and top-1 rate after the attacker's first, last and best message with 95% intervals,
and each model's paired difference from the reference (M0) on the same words and
roles (``results/summary/hints.tsv``); by the calibrated rank and by the raw one (the
``rank`` column)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hints", nargs="+", required=True, help="hint ranks, in run order")
    p.add_argument("--models", nargs="+", required=True, help="their model names")
    p.add_argument("--reference", default="imitation", help="the model others are paired with")
    p.add_argument("--output", required=True, help="summary TSV to write")
    p.add_argument(
        "--by",
        choices=("role", "source"),
        default="role",
        help="role: the evaluated model's role in its own games, paired on the same words"
        " and roles; source: the dialogues' source, paired on the same dialogues (the"
        " defender's inference: the same clues read by every model)",
    )


def run(args: argparse.Namespace) -> int:
    import pandas as pd
    import pyarrow.compute as pc

    from spag.data.tables import read_parquet
    from spag.errors import SpagInputError
    from spag.evaluation.hints import paired_difference, ranks_in, summarize_hints
    from spag.report.summary import write_tsv

    if len(args.models) != len(args.hints):
        raise SpagInputError(
            f"--models names {len(args.models)} models for {len(args.hints)} --hints"
        )
    tables = {
        m: read_parquet(h, "hint ranks") for m, h in zip(args.models, args.hints, strict=True)
    }
    if args.reference not in tables:
        raise SpagInputError(f"--reference {args.reference}: not among --models")
    rows = []
    for rank in ranks_in(*tables.values()):
        for model, table in tables.items():
            for row in summarize_hints(table, model, by=args.by, rank=rank):
                group, ref, own = row[args.by], tables[args.reference], table
                column = "policy_role" if args.by == "role" else "source"
                if group != "all":
                    own = own.filter(pc.equal(own[column], group))
                    ref = ref.filter(pc.equal(ref[column], group))
                pair_by = ("word", "role") if args.by == "role" else ("source", "episode")
                diff = paired_difference(own, ref, pair_by, rank=rank)
                row.update(paired_pairs=diff["pairs"], paired_mrr_best_diff=diff["mrr_best_diff"],
                           paired_lo=diff["lo"], paired_hi=diff["hi"])  # fmt: skip
                rows.append(row)
    write_tsv(pd.DataFrame(rows), args.output)
    return 0
