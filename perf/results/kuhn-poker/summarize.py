"""The Kuhn Poker study's tables, from the run folders beside this file (run_study.sh).

    python perf/results/kuhn-poker/summarize.py > perf/results/kuhn-poker/tables.md

Per config, training (full fine-tuning, or LoRA: ``PEFT=lora``), SPAG-stage method
(``METHOD=<name>``: the overlay method-<name>.yaml; "paper" without one), reward scheme
and number of epochs: each model's exact figures for each seed, with their mean over seeds;
the self-play hands that ended in a rule break, either seat's, per epoch; each training
stage's time, memory and speed where the runs kept them; then M0's and the last model's
probability of the aggressive move (bet, or call facing a bet) at each information set,
beside the equilibrium's (first seat alpha = 1/6).
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "workflow_scripts"))

from spag.game import kuhn_poker as kuhn  # noqa: E402

METRICS = ("exploitability", "ev_vs_random", "ev_vs_equilibrium", "illegal_mass")


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def main() -> None:
    runs = defaultdict(dict)  # (config, peft, method, scheme, epochs) -> seed -> folder
    for folder in sorted(p for p in HERE.iterdir() if (p / "run.tsv").is_file()):
        info = read(folder / "run.tsv")[0]
        epochs = sum(r["model"].startswith("epoch") for r in read(folder / "poker.tsv"))
        # Runs written before the LoRA option have no peft column: full fine-tuning.
        key = (
            info["config"], info.get("peft", "none"), info.get("method", "paper"),
            info["scheme"], epochs,
        )  # fmt: skip
        runs[key][int(info["seed"])] = (folder, info)
    for (config, peft, method, scheme, epochs), seeds in sorted(runs.items()):
        training = "" if peft == "none" else f", {peft}"
        training += "" if method == "paper" else f", method {method}"
        print(f"## {config}{training}, rewards.scheme {scheme}, to M{epochs}\n")
        walls = ", ".join(f"seed {s}: {i['wall_s']} s" for s, (_, i) in sorted(seeds.items()))
        print(f"From nothing (`snakemake -c2 all`, 2 cores): {walls}.\n")
        rows = {s: {r["model"]: r for r in read(f / "poker.tsv")} for s, (f, _) in seeds.items()}
        models = list(next(iter(rows.values())))
        order = sorted(seeds)
        print("| model | " + " | ".join(METRICS) + " |")
        print("|---" * (len(METRICS) + 1) + "|")
        for m in models:
            cells = []
            for metric in METRICS:
                vals = [float(rows[s][m][metric]) for s in order]
                mean = sum(vals) / len(vals)
                cells.append(f"{mean:+.3f} ({', '.join(f'{v:+.3f}' for v in vals)})")
            print(f"| {m} | " + " | ".join(cells) + " |")
        print(
            f"\nEach cell: the mean over seeds {', '.join(map(str, order))} (each seed's value).\n"
        )
        goal_lines(rows, order, epochs)
        average_line(seeds, order, epochs)
        rule_break_table(seeds, order)
        train_table(seeds, order)
        last = f"epoch{epochs}"
        eq = kuhn.equilibrium()
        print("| seat | card | moves so far | aggressive move | equilibrium | "
              + " | ".join(f"M0 s{s}" for s in order) + " | "
              + " | ".join(f"M{epochs} s{s}" for s in order) + " |")  # fmt: skip
        print("|---" * (4 + 1 + 2 * len(order)) + "|")
        tables = {
            (m, s): {(r["seat"], r["card"], r["history"]): r for r in
                     read(seeds[s][0] / "strategy" / f"{m}.tsv")}
            for m in ("imitation", last) for s in order
        }  # fmt: skip
        for infoset in kuhn.INFOSETS:
            key = (infoset[0], infoset[1], " ".join(infoset[2]) or "-")
            agg = kuhn.legal_moves(infoset[2])[1]
            cells = [f"{float(tables[(m, s)][key]['aggressive_probability']):.2f}"
                     for m in ("imitation", last) for s in order]  # fmt: skip
            print(f"| {infoset[0]} | {infoset[1]} | {key[2]} | {agg} | "
                  f"{float(eq[infoset][agg]):.2f} | " + " | ".join(cells) + " |")  # fmt: skip
        print()


def goal_lines(rows: dict[int, dict[str, dict]], order: list[int], epochs: int) -> None:
    """Per seed, the study's goal for an update that keeps the rules: exploitability at
    the last model at most 0.25 and at least 0.08 below M0's, the mass outside the legal
    moves at or below M0's at every epoch, chips against the random player not below
    M0's (at the last model)."""
    last = f"epoch{epochs}"
    for s in order:
        m0, end = rows[s]["imitation"], rows[s][last]
        expl0, expl = float(m0["exploitability"]), float(end["exploitability"])
        mass0 = float(m0["illegal_mass"])
        above = [
            m for m, r in rows[s].items()
            if m.startswith("epoch") and float(r["illegal_mass"]) > mass0
        ]  # fmt: skip
        checks = {
            f"exploitability M{epochs} {expl:.3f} <= 0.25": expl <= 0.25,
            f"<= M0's - 0.08 ({expl0 - 0.08:.3f})": expl <= expl0 - 0.08,
            f"mass outside <= M0's {mass0:.3f} at every epoch"
            + (f" (above at {', '.join(above)})" if above else ""): not above,
            f"chips vs random M{epochs} {float(end['ev_vs_random']):+.3f} >= M0's "
            f"{float(m0['ev_vs_random']):+.3f}": float(end["ev_vs_random"])
            >= float(m0["ev_vs_random"]),
        }
        met = "; ".join(f"{k}: {'yes' if v else 'no'}" for k, v in checks.items())
        print(f"- Goal, seed {s}: {met}.")
    print()


def strategy_of(path: Path) -> dict:
    """A model's strategy over the legal moves, renormalised (its strategy/<model>.tsv)."""
    rows = {(r["seat"], r["card"], r["history"]): r for r in read(path)}
    return {
        infoset: kuhn._two(infoset, float(rows[(infoset[0], infoset[1],
                                                 " ".join(infoset[2]) or "-")]["aggressive_probability"]))
        for infoset in kuhn.INFOSETS
    }  # fmt: skip


def average_strategy(strategies: list[dict]) -> dict:
    """The behavioural form of playing one of ``strategies``, drawn uniformly for a whole
    hand: at each information set their moves averaged, each weighted by how often it
    reaches the set by its own moves (Kuhn's theorem; the first seat's second decision
    is reached by its check)."""
    average = {}
    for infoset in kuhn.INFOSETS:
        seat, card, history = infoset
        reach = [
            s[(seat, card, ())][kuhn.CHECK] if seat == "first" and history else 1.0
            for s in strategies
        ]  # fmt: skip
        total = sum(reach)
        p = (sum(r * kuhn.aggressive_probability(s, infoset) for r, s in zip(reach, strategies,
             strict=True)) / total if total > 0 else 0.5)  # fmt: skip
        average[infoset] = kuhn._two(infoset, p)
    return average


def average_line(seeds: dict[int, tuple[Path, dict]], order: list[int], epochs: int) -> None:
    """Per seed, the exploitability of the average of M1..M(E)'s strategies (one of them
    drawn for each hand): where self-play circles the equilibrium, the average can sit
    closer to it than the last model."""
    if epochs < 2:
        return
    cells = []
    for s in order:
        folder = seeds[s][0] / "strategy"
        strategies = [strategy_of(folder / f"epoch{e}.tsv") for e in range(1, epochs + 1)]
        cells.append(f"seed {s} {kuhn.exploitability(average_strategy(strategies)):.3f}")
    print(f"Exploitability of the average of M1..M{epochs}'s strategies: {', '.join(cells)}.\n")


def rule_break_table(seeds: dict[int, tuple[Path, dict]], order: list[int]) -> None:
    """Each epoch's self-play hands that ended in a rule break by either seat (epochs.tsv:
    the hands M(e-1) played to train M(e))."""
    rows = {s: read(seeds[s][0] / "epochs.tsv") for s in order}
    print("| epoch | self-play hands ending in a rule break (first seat + second seat) |")
    print("|---|---|")
    for i, row in enumerate(rows[order[0]]):
        cells = []
        for s in order:
            r = rows[s][i]
            broke = int(r["first_broke_rules"]) + int(r["second_broke_rules"])
            cells.append(f"{broke}/{r['selfplay_games']} ({broke / int(r['selfplay_games']):.0%})")
        print(f"| {row['epoch']} | " + ", ".join(cells) + " |")
    print(f"\nSeeds {', '.join(map(str, order))}, in that order.\n")


def train_table(seeds: dict[int, tuple[Path, dict]], order: list[int]) -> None:
    """Each training stage's wall time, peak memory and tokens/s, where the runs kept them
    (train/<stage>.benchmark.tsv and .loss.tsv)."""
    if not all((seeds[s][0] / "train").is_dir() for s in order):
        return
    stages = sorted(
        (p.name.removesuffix(".benchmark.tsv") for p in (seeds[order[0]][0] / "train").glob(
            "*.benchmark.tsv")),
        key=lambda name: (name != "imitation", name),
    )  # fmt: skip
    print("| stage | wall s | peak memory MB | tokens/s (mean over steps) |")
    print("|---|---|---|---|")
    for stage in stages:
        cells = {"s": [], "max_rss": [], "tokens_per_s": []}
        for s in order:
            folder = seeds[s][0] / "train"
            bench = read(folder / f"{stage}.benchmark.tsv")[0]
            cells["s"].append(f"{float(bench['s']):.0f}")
            cells["max_rss"].append(f"{float(bench['max_rss']):.0f}")
            steps = [float(r["tokens_per_s"]) for r in read(folder / f"{stage}.loss.tsv")]
            cells["tokens_per_s"].append(f"{sum(steps) / len(steps):.0f}")
        print(f"| {stage} | " + " | ".join(", ".join(v) for v in cells.values()) + " |")
    print(f"\nSeeds {', '.join(map(str, order))}, in that order in each cell.\n")


if __name__ == "__main__":
    main()
