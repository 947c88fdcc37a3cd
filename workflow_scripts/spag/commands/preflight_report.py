"""``spag preflight-report``: every family's preflight report in one table; fails on a
failed check."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", nargs="+", required=True, help="the families' report JSONs")
    p.add_argument("--output-dir", required=True, help="where <family>.json and table.tsv go")


def run(args: argparse.Namespace) -> int:
    from spag.ops.preflight import collect

    table, failed = collect(args.inputs, args.output_dir)
    print(table)
    if failed:
        print(f"\npreflight: {failed} check(s) failed; each FAIL row says what to change")
        return 1
    print("\npreflight: every check passed")
    return 0
