"""Training throughput on the tiny model: this project's training vs the naive way.

Both runs train the same model on the same game samples for the same steps with the
same Trainer, batch size and learning rate:

- ours: ``ref_logprob`` read from the scored table (computed once by the scoring
  step, timed separately), batches of similar length (LengthGroupedSampler);
- naive: the reference model held in memory and run on every batch, samples in
  random order (no length grouping).

Throughput counts non-padding tokens (query + target + BOS/EOS) per second of
``trainer.train()``. Results go to perf/results/training.md (and .json).

    python perf/bench_training.py [--samples 128] [--batch-size 4] [--max-length 512] [--rounds 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "perf" / "results"


def game_samples(n: int, seed: int) -> list[dict]:
    """Samples shaped like real ones: the play rules, a history of 0-9 messages, the next message."""
    import yaml

    prompts = yaml.safe_load((REPO / "data" / "prompts.yaml").read_text())
    rules = prompts["play"]["rules"].format(max_turns=5)
    games = json.loads((REPO / "data" / "demo_games.json").read_text())
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        g = rng.choice(games)
        hist = g["history"]
        k = rng.randrange(len(hist))
        lines = [f"  - {m['role']}: {m['content']}" for m in hist[:k]]
        query = "\n".join([rules, "Game so far:", *lines, f"You are the {hist[k]['role']}. Reply:"])
        rows.append(
            dict(type="game", role=hist[k]["role"], episode_id=g["id"], turn=k, query=query,
                 target=hist[k]["content"].strip(), reward=rng.uniform(0.05, 0.5), weight=1.0)
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2, help="measured runs of each (best kept)")
    p.add_argument("--output", default=str(RESULTS / "training.md"))
    args = p.parse_args(argv)

    import pyarrow as pa
    import torch

    from spag.data.tables import SAMPLE_SCHEMA, write_parquet
    from spag.models.tiny import build_tiny_model
    from spag.training.collate import SampleCollator, SampleDataset, build_features, pad_token_id
    from spag.training.losses import sequence_logprobs
    from spag.training.run import training_arguments
    from spag.training.scoring import load_model_and_tokenizer, model_sequence_logprobs, score_file
    from spag.training.settings import TrainConfig
    from spag.training.trainer import SpagTrainer

    class Counting(SpagTrainer):
        """Counts real and padded positions of every batch the model sees."""

        tokens = positions = 0
        # False: the vocabulary projection over every position (no logits_to_keep).
        trim_logits = True

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            mask = inputs["attention_mask"]
            self.tokens += int(mask.sum())
            self.positions += mask.numel()
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def policy_logprobs(self, model, inputs):
            return model_sequence_logprobs(
                model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"],
                trim_logits=self.trim_logits,
            )  # fmt: skip

    class FullLogits(Counting):
        trim_logits = False

    class Naive(FullLogits):
        """The reference model lives beside the policy and runs on every batch."""

        def __init__(self, *a, ref_model, **kw):
            super().__init__(*a, **kw)
            self.ref_model = ref_model.eval()

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            with torch.no_grad():
                logits = self.ref_model(
                    input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    use_cache=False,
                ).logits  # fmt: skip
                ref = sequence_logprobs(logits, inputs["labels"])
            inputs = {**inputs, "ref_logprob": ref}
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    work = Path(tempfile.mkdtemp(prefix="bench_training."))
    corpus = sorted(q for q in (REPO / "data").glob("*") if q.suffix in (".json", ".yaml", ".txt"))
    model_dir = build_tiny_model(corpus, work / "model", hidden_size=args.hidden_size,
                                 intermediate_size=3 * args.hidden_size, seed=args.seed)  # fmt: skip
    samples = work / "samples.parquet"
    write_parquet(
        pa.Table.from_pylist(game_samples(args.samples, args.seed), schema=SAMPLE_SCHEMA), samples
    )
    t0 = time.perf_counter()
    table = score_file(model_dir, samples, work / "scored.parquet", batch_size=16,
                       max_length=args.max_length)  # fmt: skip
    score_s = time.perf_counter() - t0

    steps = args.samples // args.batch_size
    # naive: the way without this project's measures; ours_full_logits: ours without
    # trimming the vocabulary projection to the target span (to show each measure's share).
    variants = ("naive", "ours_full_logits", "ours")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    # A warm-up pair, then alternating rounds: other load on the machine hits both alike.
    for name in list(variants) * (args.rounds + 1):
        model, tokenizer = load_model_and_tokenizer(model_dir)
        features, _ = build_features(table, tokenizer, args.max_length, samples, with_ref=True)
        dataset = SampleDataset(features)
        cfg = TrainConfig(
            objective="offline_po", model=str(model_dir), samples=str(samples),
            output=str(work / "out"), checkpoint_dir=str(work / f"ckpt_{name}"),
            loss_log=str(work / "loss.tsv"), learning_rate=1e-4, max_steps=steps,
            per_device_batch_size=args.batch_size, gradient_accumulation_steps=1,
            max_length=args.max_length, save_steps=10**6, logging_steps=10**6, seed=args.seed,
            group_by_length=name != "naive",
        )  # fmt: skip
        common = dict(
            model=model, args=training_arguments(cfg, None, "cpu"), train_dataset=dataset,
            data_collator=SampleCollator(pad_token_id(tokenizer)), lengths=dataset.lengths,
        )  # fmt: skip
        if name == "ours":
            trainer = Counting(**common)
        elif name == "ours_full_logits":
            trainer = FullLogits(**common)
        else:
            ref, _ = load_model_and_tokenizer(model_dir)
            trainer = Naive(**common, ref_model=ref)
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        runs[name].append(
            {
                "seconds": elapsed,
                "cpu_seconds": cpu,
                "tokens": trainer.tokens,
                "positions": trainer.positions,
                "pad_frac": 1 - trainer.tokens / trainer.positions,
            }
        )
    results = {}
    for name, rs in runs.items():
        measured = rs[1:]  # the first run of each is the warm-up
        best = min(measured, key=lambda r: r["seconds"])
        results[name] = dict(
            best,
            tokens_per_s=best["tokens"] / best["seconds"],
            tokens_per_cpu_s=best["tokens"] / min(r["cpu_seconds"] for r in measured),
            all_seconds=[round(r["seconds"], 1) for r in measured],
        )
    ours, naive = results["ours"], results["naive"]
    speedup = ours["tokens_per_s"] / naive["tokens_per_s"]
    cpu_speedup = ours["tokens_per_cpu_s"] / naive["tokens_per_cpu_s"]
    end_to_end = ours["tokens"] / (ours["seconds"] + score_s)
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average_1min_at_end": os.getloadavg()[0],
        "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "settings": vars(args) | {"steps": steps, "model_hidden_size": args.hidden_size},
        "scoring_seconds": score_s,
        "runs": results,
        "speedup": speedup,
        "speedup_cpu_time": cpu_speedup,
        "ours_with_scoring_tokens_per_s": end_to_end,
        "speedup_with_scoring": end_to_end / naive["tokens_per_s"],
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    rows = "\n".join(
        f"| {name} | {r['all_seconds']} | {r['tokens_per_s']:.0f} | {r['tokens_per_cpu_s']:.0f} "
        f"| {r['pad_frac']:.1%} |"
        for name, r in results.items()
    )
    md = f"""# Training throughput: ours vs naive

- Date: {summary["date"]}
- Machine: {summary["machine"]}, torch {summary["torch"]} ({summary["torch_threads"]} threads), CPU;
  load average (1 min) at the end: {summary["load_average_1min_at_end"]:.1f}
- Command: `{summary["command"]}`
- Model: tiny Llama (hidden {args.hidden_size}, 2 layers) built from `data/`; {args.samples}
  game samples from the demo games (play rules + 0-9 history messages as query), max_length
  {args.max_length}, batch {args.batch_size}, {steps} steps (one pass), OfflinePO.
- Tokens are non-padding positions (query + target + BOS/EOS) per second of `trainer.train()`.
- naive: reference model in memory, run on every batch; random order; full logits.
- ours_full_logits: `ref_logprob` read from the scored table, length-grouped batches.
- ours: the same, and logits only from the first target position on (`logits_to_keep`).

Each variant runs {args.rounds} times after a warm-up, the variants alternating; the
table shows the fastest run (wall clock) and, less sensitive to other load on the
machine, tokens per second of process CPU time (best run).

| run | train s (all runs) | tokens/s (wall) | tokens/s (CPU time) | padding fraction |
|---|---|---:|---:|---:|
{rows}

Speed-up (training, wall clock): **{speedup:.2f}x**; by CPU time: **{cpu_speedup:.2f}x**
(goal >= 1.5x).

The scoring step (`spag score-ref`, one batched forward pass per sample, length-sorted)
took {score_s:.2f} s; counting it, ours runs at {end_to_end:.0f} tokens/s,
{summary["speedup_with_scoring"]:.2f}x the naive way.
"""
    out.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
