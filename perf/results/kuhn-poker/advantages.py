"""Each epoch's game samples, decision by decision: how many, and their mean reward.

From a study run's workflow copy:

    python perf/results/kuhn-poker/advantages.py /tmp/kuhn-study/<run> perf/results/kuhn-poker/<run>

writes ``<out>/advantages.tsv``: per epoch (the samples that trained M(e), played by
M(e-1)), seat, card, moves so far and the sample's move, the number of game samples and
the mean of their ``reward`` column (under ``rae``: the advantage, return minus the role's
baseline). A decision where only one legal move was sampled, with a mean advantage below
0, is one where an update over the legal moves moves probability to the move not
sampled, whatever that move is worth.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq


def main(run: str, out: str) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "workflow_scripts"))
    from spag.game.kuhn_poker import SEATS, parse_deal, read_move

    epochs = sorted(Path(run, "results").glob("epoch*/samples.parquet"),
                    key=lambda p: int(p.parent.name.removeprefix("epoch")))  # fmt: skip
    rows = []
    for path in epochs:
        epoch = path.parent.name.removeprefix("epoch")
        games = {
            g["episode_id"]: g
            for g in pq.read_table(path.parent / "episodes.parquet").to_pylist()
        }  # fmt: skip
        rewards = defaultdict(list)
        for s in pq.read_table(path).to_pylist():
            if s["type"] != "game":
                continue
            game, k = games[s["episode_id"]], s["turn"]
            seat = SEATS[k % 2]
            card = parse_deal(game["target_word"])[k % 2]
            so_far = " ".join(read_move(m["content"]) or "?" for m in game["history"][:k])
            rewards[(seat, card, so_far or "-", s["move"] or "none")].append(s["reward"])
        for (seat, card, so_far, move), values in sorted(rewards.items()):
            rows.append([epoch, seat, card, so_far, move, len(values),
                         f"{sum(values) / len(values):.4f}"])  # fmt: skip
    Path(out).mkdir(parents=True, exist_ok=True)
    with open(Path(out) / "advantages.tsv", "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["epoch", "seat", "card", "moves_so_far", "move", "samples", "mean_reward"])
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="the run's workflow copy (/tmp/kuhn-study/<run>)")
    parser.add_argument("out", help="the run's folder here, for advantages.tsv")
    args = parser.parse_args()
    sys.exit(main(args.run, args.out))
