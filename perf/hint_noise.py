"""The hint score's noise on the SmolLM2 study's graded games: the context ranks (raw,
calibrated) beside the message rank (each message alone, scored once per secret and
message), on the dialogues as played and on the same dialogues read for a secret they
were not written for (they hint at nothing about it: every score should sit at chance).

    python perf/hint_noise.py perf/results/smollm2-graded/seed42 \
        perf/results/smollm2-graded/seed43 --output perf/results/smollm2-graded/message

For every seed folder, the distinct dialogues of the committed greedy evaluation games
of both arms are scored with the study's listener as its ``eval_hints`` rule did (the
base SmolLM2-135M-Instruct from its packaged GGUF, chat prompts, k = 11 of the 12
held-out words, float32, CPU): once with their own secret, once with the next held-out
word in sorted order as the secret (the listener's prompt does not show the secret, so
only which guess counts changes). Writes per seed ``ranks.parquet`` and
``swapped.parquet`` (the hint tables' rows) and prints, per seed and pooled, for each
rank: the mean over dialogues of the first, best and mean message's reciprocal rank
with its 95% interval (secrets resampled), the chance level, and the shares of the
messages' variance between secrets (over the distinct (secret, message) pairs, beside
its chance level and the excess over it) and among identical (secret, message) pairs.
Seed tables already written are read, not scored again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("base", "imitation", "epoch1", "epoch2", "epoch3")


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
    import torch

    from spag.evaluation.hints import (
        Listener,
        chance_rr,
        hint_ranks,
        summarize_hints,
        unique_dialogues,
    )
    from spag.game.taboo import TABOO

    torch.set_num_threads(args.threads)
    listener = None

    def the_listener() -> Listener:
        """The listener, built the first time a seed's table has to be scored."""
        nonlocal listener
        if listener is None:
            listener_dir = args.listener
            if listener_dir is None:
                from spag.ops.base_model import prepare_base_model

                listener_dir = args.output / "listener"
                if not (listener_dir / "config.json").is_file():
                    prepare_base_model("smollm2-135m-instruct", listener_dir)
            listener = Listener(listener_dir, prompt_format="chat", dtype="float32",
                                device="cpu", trust_remote_code=False)  # fmt: skip
        return listener

    prompts = TABOO.load_prompts(str(REPO / "data/prompts.yaml"))
    tables: dict[str, list] = {"own": [], "swapped": []}
    lines = []
    for seed_dir in args.seeds:
        seed = seed_dir.name.removeprefix("seed")
        episodes = []
        for arm, folder in (("spag", seed_dir), ("control", seed_dir / "control")):
            for m in MODELS:
                path = folder / "games" / f"{m}.parquet"
                if path.is_file():
                    for g in pq.read_table(path).to_pylist():
                        episodes.append({**g, "episode_id": f"{arm}/{m}/{g['episode_id']}"})
        dialogues = unique_dialogues(episodes)
        words = sorted({g["target_word"] for g in episodes})
        shift = {w: words[(i + 1) % len(words)] for i, w in enumerate(words)}
        out = args.output / seed_dir.name
        out.mkdir(parents=True, exist_ok=True)
        # Read for another secret, a dialogue ends before a message that broke the rules
        # for its own (it says its own secret: not graded in the own reading either).
        swapped = []
        for g in dialogues:
            outcome, n = TABOO.judge(g["history"], g["target_word"], g["max_turns"])
            cut = n - 1 if TABOO.rule_breaker(outcome) == TABOO.roles[0] else None
            swapped.append({**g, "target_word": shift[g["target_word"]],
                            "history": g["history"][:cut]})  # fmt: skip
        for kind, eps in (("own", dialogues), ("swapped", swapped)):
            path = out / ("ranks.parquet" if kind == "own" else "swapped.parquet")
            if not path.is_file():
                table = hint_ranks(the_listener(), TABOO, prompts, eps, words, k=11, seed=int(seed))
                pq.write_table(table, path)
            table = pq.read_table(path)
            tables[kind].append(table)
            lines += report(f"seed {seed}, {kind} secrets", table, summarize_hints, chance_rr)
    for kind, parts in tables.items():
        lines += report(f"both seeds, {kind} secrets", pa.concat_tables(parts), summarize_hints,
                        chance_rr)  # fmt: skip
    print("\n".join(lines))
    return 0


def report(title: str, table, summarize_hints, chance_rr) -> list[str]:
    """One line per rank: dialogues, first/best/mean MRR [95%], chance, variance shares."""
    lines = [f"## {title}: {table.num_rows} graded messages"]
    for rank in ("raw", "calibrated", "message"):
        row = summarize_hints(table, "all", rank=rank)[-1]

        def cell(when: str, row: dict = row) -> str:
            return (f"{row[f'mrr_{when}']:.3f} [{row[f'mrr_{when}_lo']:.3f}, "
                    f"{row[f'mrr_{when}_hi']:.3f}]")  # fmt: skip

        lines.append(
            f"- {rank}: {row['games']} dialogues; MRR first {cell('first')}, best "
            f"{cell('best')}, mean {cell('mean')}; chance {row['mrr_chance']:.3f}; variance "
            f"between secrets {row['between_secrets_share']:.3f} (by chance "
            f"{row['between_secrets_chance']:.3f}, excess {row['between_secrets_excess']:+.3f}), "
            f"among identical messages {row['identical_messages_share']:.3f}"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
