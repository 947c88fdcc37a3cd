"""``spag calibration-report``: the calibration jobs' figures, one file a family under
``--output-dir`` (``snakemake calibrate``; :mod:`spag.ops.calibration`), then the table."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--selfplay", nargs=3, required=True, metavar=("EPISODES", "LOG", "BENCHMARK"))
    p.add_argument("--score", nargs=3, required=True, metavar=("SCORED", "LOG", "BENCHMARK"))
    for stage in ("imitation", "spag"):
        p.add_argument(
            f"--train-{stage}",
            nargs=4,
            required=True,
            metavar=("MODEL", "LOSS_LOG", "LOG", "BENCHMARK"),
        )
    p.add_argument("--output-dir", required=True, help="where <family>.json go")
    p.add_argument(
        "--training-gib",
        nargs="*",
        default=[],
        metavar="STAGE=GIB",
        help="each stage's estimated memory per GPU (spag training-memory), shown beside",
    )


def run(args: argparse.Namespace) -> int:
    from spag.ops.calibration import (
        format_figures,
        score_figures,
        selfplay_figures,
        train_figures,
        write_figures,
    )

    out = Path(args.output_dir)
    estimated = {k: float(v) for k, _, v in (w.partition("=") for w in args.training_gib)}
    docs = {}
    episodes, log, bench = args.selfplay
    docs["selfplay"] = write_figures(
        "selfplay", selfplay_figures(episodes, log, bench), out / "selfplay.json", episodes
    )
    scored, log, bench = args.score
    docs["score"] = write_figures("score", score_figures(log, bench), out / "score.json", scored)
    for stage in ("imitation", "spag"):
        model, loss, log, bench = getattr(args, f"train_{stage}")
        family = f"train_{stage}"
        docs[family] = write_figures(
            family,
            train_figures(log, loss, bench),
            out / f"{family}.json",
            model,
            estimated_gib=estimated.get(stage),
        )
    for family, doc in docs.items():
        doc["path"] = str(out / f"{family}.json")
    print(format_figures(docs))
    return 0
