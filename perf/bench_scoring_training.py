"""Scoring vs training on a real model, the same samples, as whole processes.

Sides (each a ``spag`` process, rounds alternating the sides):

- ``score``: ``spag score-ref`` (forward only, batches sorted by length);
- ``train``: ``spag train`` as the pipeline runs it (padding-free micro-batches);
- ``train-padded``: the same with ``--no-padding-free`` (right-padded micro-batches);
- ``train-before``: ``spag train`` of another checkout (``--before-src``: its ``src``
  folder), to compare with an earlier revision.

Training's rate is non-padding tokens per second of ``train_runtime`` (the Trainer's
own clock: the loop, checkpoints and all; model load and the final save are outside);
scoring's is per second of the process. The fp32 matrix-product rate is measured in
the same run; a training token costs 6 x parameters FLOP, a scored one 2 x.

    python perf/bench_scoring_training.py --model RUN/results/epoch2/model \\
        --samples RUN/results/epoch3/samples.parquet --prompt-format chat \\
        [--sides score train train-padded] [--before-src OLD/src] [--repeat 1]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr


def train_runtime(log: str) -> float:
    found = re.findall(r"'train_runtime': '?([0-9.]+)", log)
    if not found:
        raise SystemExit("no train_runtime in the training log")
    return float(found[-1])


def token_count(model: str, samples: Path, max_length: int, prompt_format: str) -> int:
    """Non-padding tokens of the samples as training encodes them."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from spag.training.collate import build_features, check_sample_table

    table = check_sample_table(pq.read_table(samples), samples, need_ref=False)
    tok = AutoTokenizer.from_pretrained(model)
    feats, _ = build_features(table, tok, max_length, samples, False, prompt_format)
    return sum(len(f["input_ids"]) for f in feats)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--samples", required=True, help="an epoch's samples.parquet")
    p.add_argument("--prompt-format", default="chat")
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=8, help="training micro-batch")
    p.add_argument("--score-batch-size", type=int, default=16)
    p.add_argument("--sides", nargs="+", default=["score", "train", "train-padded"])
    p.add_argument("--before-src", help="src folder of another checkout (side train-before)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--output", default=str(REPO / "perf/results/scoring_training_smollm2.md"))
    args = p.parse_args(argv)
    if "train-before" in args.sides and not args.before_src:
        p.error("side train-before needs --before-src")

    from bench_generation import matmul_rate
    from safetensors import safe_open

    tmp = Path(tempfile.mkdtemp(prefix="bench_st_"))
    spag = [sys.executable, "-m", "spag"]
    common = ["--max-length", str(args.max_length), "--prompt-format", args.prompt_format]
    scored = tmp / "scored.parquet"
    score_cmd = [*spag, "score-ref", "--model", args.model, "--samples", args.samples,
                 "--output", str(scored), "--batch-size", str(args.score_batch_size), *common]  # fmt: skip
    load = [round(os.getloadavg()[0], 2)]
    rates = [matmul_rate(args.threads)]
    # The training sides need the scored file: one scoring run first (not timed).
    run(score_cmd)
    tokens = token_count(args.model, Path(args.samples), args.max_length, args.prompt_format)
    results: dict[str, list[float]] = {side: [] for side in args.sides}
    walls: dict[str, list[float]] = {side: [] for side in args.sides}
    for rnd in range(args.repeat):
        for side in args.sides:
            if side == "score":
                wall, _ = run(score_cmd)
                results[side].append(wall)
                walls[side].append(wall)
                continue
            out = tmp / f"{side}-{rnd}"
            cmd = ["train", "--objective", "offline_po", "--model", args.model,
                   "--samples", str(scored), "--output", str(out / "model"),
                   "--checkpoint-dir", str(out / "ckpt"), "--loss-log", str(out / "loss.tsv"),
                   "--per-device-batch-size", str(args.batch_size),
                   "--num-train-epochs", "1", "--logging-steps", "1", *common]  # fmt: skip
            env = None
            if side == "train-padded":
                cmd.append("--no-padding-free")
            if side == "train-before":
                env = {**os.environ, "PYTHONPATH": str(Path(args.before_src).resolve())}
            wall, log = run([*spag, *cmd], env)
            results[side].append(train_runtime(log))
            walls[side].append(wall)
            print(json.dumps({"side": side, "train_runtime": results[side][-1], "wall": wall}))
    rates.append(matmul_rate(args.threads))
    load.append(round(os.getloadavg()[0], 2))
    rate = max(rates)
    params = 0
    for f in Path(args.model).glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            params += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118

    rows = []
    summary = {}
    for side in args.sides:
        best = min(results[side])
        tps = tokens / best
        flop = (2 if side == "score" else 6) * params
        share = tps * flop / 1e9 / rate
        summary[side] = {"seconds": results[side], "wall": walls[side], "tokens_per_s": tps,
                         "share": share}  # fmt: skip
        clock = "process" if side == "score" else "train_runtime"
        rows.append(
            f"| {side} | {', '.join(f'{s:.1f}' for s in results[side])} ({clock}) | "
            f"{', '.join(f'{w:.1f}' for w in walls[side])} | {tps:.0f} | "
            f"{'2' if side == 'score' else '6'} x {params / 1e6:.1f} M | {share:.0%} |"
        )
    ratios = []
    if "score" in summary:
        for side in summary:
            if side != "score":
                ratios.append(
                    f"- scoring / {side}: "
                    f"{summary['score']['tokens_per_s'] / summary[side]['tokens_per_s']:.1f}x"
                )
    if "train" in summary:
        for side in ("train-padded", "train-before"):
            if side in summary:
                ratios.append(
                    f"- train vs {side}: "
                    f"{min(results[side]) / min(results['train']):.2f}x (train_runtime)"
                )
    now = datetime.datetime.now(datetime.UTC)
    cmd_line = "python perf/bench_scoring_training.py " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    import torch

    report = f"""# Scoring vs training on a real model, whole processes

- date: {now:%Y-%m-%d %H:%M} UTC; load average before/after: {load}
- machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {args.threads} threads; fp32 matrix product (2048^2) before/after: {[round(r, 1) for r in rates]} GFLOP/s
- model: {args.model}: {params / 1e6:.1f} M parameters (fp32); samples: {args.samples} ({tokens} non-padding tokens, max_length {args.max_length}, prompt format {args.prompt_format})
- training: OfflinePO, micro-batches of {args.batch_size}, one epoch; scoring: batches of {args.score_batch_size}
- command: `{cmd_line}`

| side | seconds, every round | process wall s | non-padding tokens/s (best) | FLOP per token | share of the matmul rate |
|---|---|---|---:|---|---:|
{chr(10).join(rows)}

{chr(10).join(ratios)}

Where the training time goes, and what changed it: `training_analysis.md`.
"""
    Path(args.output).write_text(report)
    Path(args.output).with_suffix(".json").write_text(
        json.dumps(
            {"tokens": tokens, "params": params, "rates": rates, "load": load, "sides": summary},
            indent=1,
        )  # fmt: skip
    )
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
