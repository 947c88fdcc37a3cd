"""The most frequent self-play replies of each epoch of a study run, from its workflow copy:

    python perf/results/kuhn-poker/replies.py /tmp/kuhn-study/<run> perf/results/kuhn-poker/<run>

writes ``<out>/replies.tsv`` (epoch, reply, count; the 8 most frequent replies of every
epoch's self-play, the reply's first 40 characters, as in ``results/epoch*/episodes.parquet``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

TOP = 8


def main(run: str, out: str) -> int:
    epochs = sorted(Path(run, "results").glob("epoch*/episodes.parquet"),
                    key=lambda p: int(p.parent.name.removeprefix("epoch")))  # fmt: skip
    with open(Path(out, "replies.tsv"), "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["epoch", "reply", "count"])
        for path in epochs:
            counts = Counter(
                message["content"][:40]
                for history in pq.read_table(path, columns=["history"]).column(0).to_pylist()
                for message in history
            )
            for reply, count in counts.most_common(TOP):
                writer.writerow([path.parent.name.removeprefix("epoch"), repr(reply), count])
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="the run's workflow copy (/tmp/kuhn-study/<run>)")
    parser.add_argument("out", help="the run's folder here, for replies.tsv")
    args = parser.parse_args()
    sys.exit(main(args.run, args.out))
