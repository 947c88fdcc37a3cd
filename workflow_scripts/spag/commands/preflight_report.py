"""``spag preflight-report``: every family's preflight report in one table, then the
epoch's estimate on the GPUs found (``spag estimate``'s table); fails on a failed check."""

from __future__ import annotations

import argparse
import json
import os

from spag.ops.provenance import ENV_CONFIG


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", nargs="+", required=True, help="the families' report JSONs")
    p.add_argument("--output-dir", required=True, help="where <family>.json and table.tsv go")
    p.add_argument(
        "--config-json",
        default=os.environ.get(ENV_CONFIG),
        help=f"the resolved config, as JSON text (default: the environment's {ENV_CONFIG}, "
        "set by the workflow); without it no estimate is printed",
    )
    p.add_argument("--base-model", default=None, help="the run's prepared base model folder")


def run(args: argparse.Namespace) -> int:
    from spag.ops.preflight import collect, estimate_section, read_report

    reports = [read_report(path) for path in args.inputs]
    table, failed = collect(args.inputs, args.output_dir)
    print(table)
    if args.config_json:
        print()
        print(estimate_section(reports, json.loads(args.config_json), args.base_model))
    if failed:
        print(f"\npreflight: {failed} check(s) failed; each FAIL row says what to change")
        return 1
    print("\npreflight: every check passed")
    return 0
