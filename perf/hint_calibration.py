"""The calibrated hint score on the SmolLM2 study's graded messages, side by side with
the raw rank it was computed beside.

    python perf/hint_calibration.py perf/results/smollm2-graded/seed42 \
        perf/results/smollm2-graded/seed43 --output perf/results/smollm2-graded/calibrated

For every seed folder, ``spag score-hints --unique-dialogues`` scores each distinct
dialogue of the committed greedy evaluation games of both arms (the folder itself and
its ``control/``) and every evaluated model again with the study's listener (the base
SmolLM2-135M-Instruct, converted from its packaged GGUF), as the run's ``eval_hints``
rule did (chat prompts, k = 11, float32, CPU; with 11 distractors of 12 held-out
words a message's ranks depend on its secret and dialogue only). It checks that the
raw ranks equal the committed ones row for row, writes each arm's and model's ranks
with the calibrated rank added to ``OUTPUT/<seed>/<arm>/<model>.parquet``, and prints:

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
    p.add_argument("--threads", type=int, default=2, help="torch threads of the scoring")
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "workflow_scripts"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spag.cli import main as spag
    from spag.evaluation.hints import HINT_SCHEMA

    listener = args.listener
    if listener is None:
        from spag.ops.base_model import prepare_base_model

        listener = args.output / "listener"
        if not (listener / "config.json").is_file():
            prepare_base_model("smollm2-135m-instruct", listener)
    messages: dict[str, dict[str, dict[tuple, tuple[str, float]]]] = {}
    for seed_dir in args.seeds:
        seed = seed_dir.name.removeprefix("seed")
        arms = {"spag": seed_dir, "control": seed_dir / "control"}
        games = {
            (arm, m): folder / "games" / f"{m}.parquet"
            for arm, folder in arms.items()
            for m in MODELS
            if (folder / "games" / f"{m}.parquet").is_file()
        }
        # With k = 11 of 12 held-out words every game of a secret meets the same
        # distractors: a message's ranks depend on its secret and dialogue only, so each
        # distinct dialogue of the seed is scored once.
        out = args.output / seed_dir.name
        out.mkdir(parents=True, exist_ok=True)
        # Episode ids repeat between arms: each is prefixed with its arm and model.
        parts = []
        for (arm, model), path in games.items():
            t = pq.read_table(path)
            ids = [f"{arm}/{model}/{i}" for i in t.column("episode_id").to_pylist()]
            parts.append(t.set_column(t.schema.get_field_index("episode_id"), "episode_id",
                                      pa.array(ids)))  # fmt: skip
        every = pa.concat_tables(parts, promote_options="permissive")
        pq.write_table(every, out / "games.parquet")
        held_out = sorted(set(every.column("target_word").to_pylist()))
        (out / "words.txt").write_text("\n".join(held_out) + "\n")
        scored = out / "ranks.parquet"
        if not scored.is_file():
            rc = spag(["score-hints", "--listener", str(listener),
                       "--episodes", str(out / "games.parquet"), "--unique-dialogues",
                       "--words", str(out / "words.txt"),
                       "--prompts", str(REPO / "data/prompts.yaml"), "--output", str(scored),
                       "--k", "11", "--seed", seed, "--game", "taboo",
                       "--prompt-format", "chat", "--dtype", "float32", "--device", "cpu",
                       "--threads", str(args.threads)])  # fmt: skip
            if rc:
                return rc
        histories = {g["episode_id"]: g for g in every.to_pylist()}

        def key(word: str, history: list, message: int) -> tuple:
            return word, tuple((m["role"], m["content"]) for m in history[: message + 1])

        by_key = {}
        for r in pq.read_table(scored).to_pylist():
            by_key[key(r["target_word"], histories[r["episode_id"]]["history"], r["message"])] = r
        for arm in arms:
            models = [m for m in MODELS if (arm, m) in games]
            for model in models:
                eps = {g["episode_id"]: g for g in pq.read_table(games[arm, model]).to_pylist()}
                ranks = arms[arm] / "ranks" / "hints" / f"{model}.parquet"
                old = pq.read_table(ranks).to_pylist()
                new = [by_key[key(r["target_word"], eps[r["episode_id"]]["history"], r["message"])]
                       for r in old]  # fmt: skip
                same = sum(a["rank"] == b["rank"] for a, b in zip(old, new, strict=True))
                print(f"seed {seed} {arm} {model}: raw ranks as committed {same}/{len(old)}")
                rows = [
                    {**a, "calibrated_rank": b["calibrated_rank"]}
                    for a, b in zip(old, new, strict=True)
                ]
                (out / arm).mkdir(exist_ok=True)
                pq.write_table(
                    pa.Table.from_pylist(rows, schema=HINT_SCHEMA), out / arm / f"{model}.parquet"
                )
            spag(["summarize-hints", "--hints", *(str(out / arm / f"{m}.parquet") for m in models),
                  "--models", *models, "--output", str(out / arm / "hints.tsv")])  # fmt: skip
        for k, r in by_key.items():
            for kind, column in (("raw", "rank"), ("calibrated", "calibrated_rank")):
                messages.setdefault(seed, {}).setdefault(kind, {})[k] = (k[0], float(r[column]))
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
