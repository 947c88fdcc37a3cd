"""The calibrated hint score on the SmolLM2 study's graded messages, side by side with
the raw rank it was computed beside.

    python perf/hint_calibration.py perf/results/smollm2-graded/seed42 \
        perf/results/smollm2-graded/seed43 --output perf/results/smollm2-graded/calibrated

For every arm of every seed folder (the folder itself and its ``control/``) and every
evaluated model, ``spag score-hints`` scores the committed greedy evaluation games again
with the study's listener (the base SmolLM2-135M-Instruct, converted from its packaged
GGUF), as the run's ``eval_hints`` rule did (chat prompts, k = 11, float32, CPU). It
writes the new ranks (raw and calibrated) to ``OUTPUT/<seed>/<arm>/<model>.parquet``,
checks that the raw ranks equal the committed ones row for row, and prints:

- the share of the rank's variance that lies between secrets (the words), over the
  distinct graded messages (a message is its secret and the dialogue up to it), for
  the raw and the calibrated rank: the closer to 1, the more the rank measures the
  listener's prior for each word rather than what was said;
- each arm's hint table (``spag summarize-hints``) by both ranks, beside the committed
  one, as ``OUTPUT/<seed>/<arm>/hints.tsv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("base", "imitation", "epoch1", "epoch2", "epoch3")


def between_share(values: dict[tuple, tuple[str, float]]) -> float:
    """Between-group sum of squares over the total (eta squared) of ``values``: key ->
    (group, value)."""
    groups: dict[str, list[float]] = {}
    for group, value in values.values():
        groups.setdefault(group, []).append(value)
    every = [v for vs in groups.values() for v in vs]
    mean = sum(every) / len(every)
    total = sum((v - mean) ** 2 for v in every)
    between = sum(len(vs) * (sum(vs) / len(vs) - mean) ** 2 for vs in groups.values())
    return between / total if total else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seeds", nargs="+", type=Path, help="seed folders of the study")
    p.add_argument("--output", required=True, type=Path)
    p.add_argument("--listener", type=Path, help="the converted base model (default: convert)")
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "workflow_scripts"))
    import pyarrow.parquet as pq

    from spag.cli import main as spag

    listener = args.listener
    if listener is None:
        from spag.ops.base_model import prepare_base_model

        listener = args.output / "listener"
        if not (listener / "config.json").is_file():
            prepare_base_model("smollm2-135m-instruct", listener)
    messages: dict[str, dict[tuple, dict[str, tuple[str, float]]]] = {}
    for seed_dir in args.seeds:
        seed = seed_dir.name.removeprefix("seed")
        for arm, folder in (("spag", seed_dir), ("control", seed_dir / "control")):
            out = args.output / seed_dir.name / arm
            out.mkdir(parents=True, exist_ok=True)
            models = [m for m in MODELS if (folder / "games" / f"{m}.parquet").is_file()]
            for model in models:
                games = folder / "games" / f"{model}.parquet"
                ranks = out / f"{model}.parquet"
                if not ranks.is_file():
                    words = out / "words.txt"
                    held_out = sorted(set(pq.read_table(games).column("target_word").to_pylist()))
                    words.write_text("\n".join(held_out) + "\n")
                    rc = spag(["score-hints", "--listener", str(listener), "--episodes", str(games),
                               "--words", str(words), "--prompts", str(REPO / "data/prompts.yaml"),
                               "--output", str(ranks), "--k", "11", "--seed", seed,
                               "--game", "taboo", "--prompt-format", "chat", "--dtype", "float32",
                               "--device", "cpu", "--threads", "1"])  # fmt: skip
                    if rc:
                        return rc
                new = pq.read_table(ranks).to_pylist()
                old = pq.read_table(folder / "ranks" / "hints" / f"{model}.parquet").to_pylist()
                same = sum(
                    (a["episode_id"], a["message"], a["rank"])
                    == (b["episode_id"], b["message"], b["rank"])
                    for a, b in zip(new, old, strict=False)
                )
                print(f"seed {seed} {arm} {model}: raw ranks as committed {same}/{len(old)} "
                      f"(rescored {len(new)})")  # fmt: skip
                histories = {
                    g["episode_id"]: g["history"] for g in pq.read_table(games).to_pylist()
                }
                for r in new:
                    said = tuple(
                        m["content"] for m in histories[r["episode_id"]][: r["message"] + 1]
                    )
                    key = (r["target_word"], said)
                    for kind, column in (("raw", "rank"), ("calibrated", "calibrated_rank")):
                        messages.setdefault(seed, {}).setdefault(kind, {})[key] = (
                            r["target_word"], float(r[column])
                        )  # fmt: skip
            spag(["summarize-hints", "--hints", *(str(out / f"{m}.parquet") for m in models),
                  "--models", *models, "--output", str(out / "hints.tsv")])  # fmt: skip
    pooled: dict[str, dict] = {}
    for seed, kinds in sorted(messages.items()):
        for kind, values in kinds.items():
            pooled.setdefault(kind, {}).update({(seed, *k): v for k, v in values.items()})
            words = len({w for w, _ in values.values()})
            print(f"seed {seed}, {kind} rank: {len(values)} distinct graded messages of "
                  f"{words} secrets, share of variance between secrets "
                  f"{between_share(values):.3f}")  # fmt: skip
    for kind, values in pooled.items():
        print(f"both seeds, {kind} rank: {len(values)} messages, share between secrets "
              f"{between_share({k: (f'{k[0]}-{v[0]}', v[1]) for k, v in values.items()}):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
