"""Markdown tables of the control study (run_study.sh): for each config and seed, SPAG's
M(e) against the control arm's M(e), spag - control with its paired 95% interval
(McNemar p for game rates), from each folder's arms.tsv.

    python perf/results/control/summarize.py > perf/results/control/tables.md
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

HERE = Path(__file__).parent
# Metrics shown (every group: each role, "all", each dialogue source), in this order;
# the rest stay in arms.tsv.
SHOWN = [
    "win_rate",
    "broke_rules_rate",
    "hints_mrr_best",
    "inference_mrr_best",
    "exploitability",
    "ev_vs_random",
    "ev_vs_equilibrium",
    "illegal_mass",
]


def fmt(x: str) -> str:
    return "" if x == "" or math.isnan(float(x)) else f"{float(x):+.3f}"


def cell(r: dict) -> str:
    arms = [f"{float(r[a]):.3f}" if r[a] else "-" for a in ("spag", "control")]
    text = f"{arms[0]} vs {arms[1]}: {fmt(r['diff'])}"
    if r["lo"]:
        text += f" [{fmt(r['lo'])}, {fmt(r['hi'])}]"
    if r["p"]:
        text += f" p={float(r['p']):.2g}"
    return text


def main() -> None:
    runs = sorted(p for p in HERE.iterdir() if (p / "arms.tsv").is_file())
    configs = sorted({p.name.rsplit("-s", 1)[0] for p in runs})
    for config in configs:
        mine = [p for p in runs if p.name.rsplit("-s", 1)[0] == config]
        print(f"## {config}\n")
        for p in mine:
            with open(p / "run.tsv") as f:
                (t,) = csv.DictReader(f, delimiter="\t")
            print(
                f"- seed {t['seed']}: SPAG from nothing {t['spag_wall_s']} s, control "
                f"(from SPAG's M0 and epoch 1 games) {t['control_wall_s']} s, {t['date']}"
            )
        print()
        rows = {}
        for p in mine:
            with open(p / "arms.tsv") as f:
                for r in csv.DictReader(f, delimiter="\t"):
                    rows[(p.name, r["model"], r["metric"], r["group"])] = r
        models = sorted({k[1] for k in rows})
        print("| metric | group | model | " + " | ".join(p.name for p in mine) + " |")
        print("|---|---|---|" + "---|" * len(mine))
        for metric in SHOWN:
            groups = sorted({k[3] for k in rows if k[2] == metric}, key=lambda g: (g == "all", g))
            for group, model in ((g, m) for g in groups for m in models):
                cells = [rows.get((p.name, model, metric, group)) for p in mine]
                if not any(cells):
                    continue
                print(
                    f"| {metric} | {group} | {model} | "
                    + " | ".join(cell(c) if c else "" for c in cells)
                    + " |"
                )
        print("\nEach cell: SPAG vs control, spag - control [95% interval] (McNemar p).\n")


if __name__ == "__main__":
    main()
