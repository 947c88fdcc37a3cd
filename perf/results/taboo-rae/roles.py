"""Per epoch of a run folder: self-play outcomes, and each role's game samples and weight.

    python perf/results/taboo-rae/roles.py RUN_DIR [--game taboo] [--copy-to DIR]

The same figures as the epoch summaries (``spag summarize-epoch``), read from each
epoch's ``outcomes.tsv`` and ``samples.parquet`` alone, so a run stopped before its
evaluations (e.g. target ``results/epoch3/samples.parquet``) can be read too. With
``--copy-to``, each epoch's outcomes, role baselines and this table are copied there.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "workflow_scripts"))

from spag.game.base import load_game  # noqa: E402
from spag.report.summary import outcome_summary, sample_summary  # noqa: E402


def epochs_with_samples(run: Path) -> list[int]:
    epochs = sorted(
        int(p.name.removeprefix("epoch")) for p in (run / "results").glob("epoch*")
        if (p / "samples.parquet").is_file()
    )  # fmt: skip
    if not epochs:
        raise SystemExit(f"{run}/results: no epoch with samples.parquet")
    return epochs


def table(run: Path, game_name: str, epochs: list[int]) -> str:
    game = load_game(game_name)
    roles = game.roles
    head = ["epoch", *game.outcomes, *(f"{r} samples" for r in roles),
            *(f"{r} weight" for r in roles), "rewards min", "rewards max"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for e in epochs:
        folder = run / "results" / f"epoch{e}"
        row = outcome_summary(folder / "outcomes.tsv", game)
        row.update(sample_summary(folder / "samples.parquet", game))
        cells = [str(e), *(str(row[o]) for o in game.outcomes),
                 *(str(row[f"{r}_samples"]) for r in roles),
                 *(f"{row[f'{r}_weight']:.3g}" for r in roles),
                 f"{row['reward_min']:+.3f}", f"{row['reward_max']:+.3f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (with results/epoch*/)")
    ap.add_argument("--game", default="taboo")
    ap.add_argument("--copy-to", type=Path, help="copy each epoch's tables and this one here")
    args = ap.parse_args()
    epochs = epochs_with_samples(args.run)
    text = table(args.run, args.game, epochs)
    print(text, end="")
    if args.copy_to:
        # Only the table's epochs: an epoch still playing would not match the table.
        args.copy_to.mkdir(parents=True, exist_ok=True)
        (args.copy_to / "roles.md").write_text(text)
        for e in epochs:
            for name in ("outcomes.tsv", "role_baselines.json"):
                src = args.run / "results" / f"epoch{e}" / name
                if src.is_file():
                    shutil.copy(src, args.copy_to / f"epoch{e}.{name}")


if __name__ == "__main__":
    main()
