"""The most frequent self-play replies of each epoch of a study run, from its workflow copy:

    python perf/results/kuhn-poker/replies.py /tmp/kuhn-study/<run> perf/results/kuhn-poker/<run>

writes ``<out>/replies.tsv`` (epoch, reply, count; the 8 most frequent replies of every
epoch's self-play, the reply's first 40 characters, as in ``results/epoch*/episodes.parquet``)
and ``<out>/moves.tsv`` (epoch and how many replies play read as each move, every reply
counted: ``kuhn_poker.read_move``; ``none`` where a reply names no move).
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
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "workflow_scripts"))
    from spag.game.kuhn_poker import KuhnPoker, read_move

    epochs = sorted(Path(run, "results").glob("epoch*/episodes.parquet"),
                    key=lambda p: int(p.parent.name.removeprefix("epoch")))  # fmt: skip
    replies, moves = [], []
    for path in epochs:
        epoch = path.parent.name.removeprefix("epoch")
        texts = [
            message["content"]
            for history in pq.read_table(path, columns=["history"]).column(0).to_pylist()
            for message in history
        ]
        counts = Counter(text[:40] for text in texts)
        replies += [[epoch, repr(reply), n] for reply, n in counts.most_common(TOP)]
        read = Counter(read_move(text) or "none" for text in texts)
        moves.append([epoch, *(read[m] for m in (*KuhnPoker.move_set, "none"))])
    for name, header, rows in (
        ("replies.tsv", ["epoch", "reply", "count"], replies),
        ("moves.tsv", ["epoch", *KuhnPoker.move_set, "none"], moves),
    ):
        with open(Path(out, name), "w", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="the run's workflow copy (/tmp/kuhn-study/<run>)")
    parser.add_argument("out", help="the run's folder here, for replies.tsv and moves.tsv")
    args = parser.parse_args()
    sys.exit(main(args.run, args.out))
