"""``spag prepare-sft``: instruction data (query/target, Alpaca, JSON or JSON Lines) to Parquet."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        required=True,
        help="instruction data: JSON list or JSON Lines of {query, target} or Alpaca "
        "{instruction, input, output} records, or a Parquet file with query/target",
    )
    p.add_argument("--output", required=True, help="Parquet file to write (query, target)")
    p.add_argument(
        "--max-rows", type=int, default=None, help="keep a seeded sample of this many rows (all)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --max-rows sample (0)")


def run(args: argparse.Namespace) -> int:
    from spag.data.formats import load_instructions, sample_rows
    from spag.data.tables import write_parquet

    table = load_instructions(args.input)
    total = table.num_rows
    table = sample_rows(table, args.max_rows, args.seed)
    write_parquet(table, args.output)
    log.info(
        "%s: %d of %d instruction rows from %s", args.output, table.num_rows, total, args.input
    )
    return 0
