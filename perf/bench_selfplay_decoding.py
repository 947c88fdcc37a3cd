"""Self-play-shaped decoding with the ``hf`` backend, two checkouts side by side.

Each side plays the same Taboo self-play shard with the real game loop
(``spag.game.selfplay.play_games``): several turns of one dialogue per game, the
shared rules prefix, per-game seeds, replies that end at EOS. Each run is its own
process whose ``spag`` package comes from one checkout (``PYTHONPATH``), so the
code before a change runs beside the code after it on the same machine, in turns
(before, after, before, after, ...).

A model that never says EOS (random weights, the GPU check's shapes) gets its
replies stopped by ``--stop-lengths``: a hook on the model's output makes EOS
certain at each step with a fixed probability drawn from the position and the last
token, so that replies are geometric in length with the mean of the committed
games' messages (not their distribution), the same for both sides whatever their
schedule.

Reported per run: generated tokens/s over the whole shard, the decoding step's
milliseconds (one token per row: the backend's step timed whole, a replayed CUDA
graph or an eager forward, with CUDA events on a GPU; the steps that captured a
graph apart; code without that step: its eager forwards), the graphs captured, the
share of row-steps that make a token, and prompt tokens computed against prompt
tokens seen.

Usage::

    python perf/bench_selfplay_decoding.py --before /tmp/before --after . \\
        --model results/imitation/model --games 48 --repeats 3 \\
        --output perf/results/selfplay_decoding_tiny.md
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def reply_lengths(paths: list[str]) -> list[int]:
    """Message lengths (tokens, EOS included) of committed games."""
    import pandas as pd

    out: list[int] = []
    for p in paths:
        for tokens in pd.read_parquet(p, columns=["message_tokens"])["message_tokens"]:
            out.extend(int(t) for t in tokens)
    return out


def stop_hook(model, eos_id: int, mean_length: float):
    """Make EOS certain with probability ``1 / (mean_length - 2)`` at each step (the
    backend forbids it for the first two tokens), drawn from the row's position and last
    token only: both sides stop the same replies at the same tokens, whatever rows share
    their batch, and replies are 2 + geometric tokens long with the games' mean."""
    import torch

    p = 1.0 / max(mean_length - 2.0, 1.0)

    def hook(module, args, kwargs, output):
        if kwargs.get("position_ids") is None:  # the shared prefix's pass: no reply
            return output
        pos = kwargs["position_ids"][:, -1]
        tok = kwargs["input_ids"][:, -1]
        u = ((pos * 1103515245 + tok * 12345 + 7) % 65536).float() / 65536
        # No boolean indexing (a host sync): the step stays capturable as a CUDA graph.
        last = output.logits[:, -1, eos_id]
        output.logits[:, -1, eos_id] = torch.where(u < p, torch.full_like(last, 1e4), last)
        return output

    return model.register_forward_hook(hook, with_kwargs=True)


def worker(args) -> dict:
    import torch

    from spag.game.selfplay import POLICY, play_games, selfplay_specs
    from spag.game.settings import GameSettings
    from spag.game.taboo import TABOO
    from spag.generation import Sampling, load_backend

    torch.set_num_threads(args.threads)
    from bench_selfplay import bench_words  # perf/, this script's folder

    words = bench_words(args.games)
    backend = load_backend(
        "hf",
        args.model,
        batch_size=args.batch_size,
        prompt_format=GameSettings.prompt_format,
        trust_remote_code=False,
        device=args.device,
    )
    model = backend.model
    if args.stop_lengths:
        lengths = reply_lengths(args.stop_lengths)
        stop_hook(model, backend.eos_ids[0], sum(lengths) / len(lengths))
    timing = {
        "decode_s": 0.0, "decode_calls": 0, "prompt_s": 0.0, "prompt_calls": 0,
        "replayed_steps": 0, "eager_steps": 0, "capture_s": 0.0, "capture_calls": 0,
    }  # fmt: skip
    forward = model.forward
    cuda = backend.device.type == "cuda"
    # A decoding step is timed around the slots' step (replayed CUDA graph or eager
    # forward), where the code has one; the forward timer then sees prompt passes only
    # (a replay never calls forward: timing forwards would count the capture's warm-ups).
    slots = getattr(importlib.import_module(type(backend).__module__), "_Slots", None)
    step = getattr(slots, "_step", None)
    in_step = [False]
    pending: list = []  # (kind, start, end) CUDA events, read once the shard has ended

    def timed_step(self, token):
        captured = self.b.stats.get("graphs_captured", 0)
        in_step[0] = True
        try:
            if cuda:  # events, not a host sync: the replays keep their overlap with the host
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                out = step(self, token)
                end.record()
            else:
                t0 = time.perf_counter()
                out = step(self, token)
                seconds = time.perf_counter() - t0
        finally:
            in_step[0] = False
        # The step that captured (its warm-up, the capture, its first replay) is apart.
        if self.b.stats.get("graphs_captured", 0) != captured:
            kind = "capture"
        else:
            kind = "replayed" if getattr(self, "graph", None) is not None else "eager"
        if cuda:
            pending.append((kind, start, end))
        else:
            _count(kind, seconds)
        return out

    def _count(kind: str, seconds: float) -> None:
        if kind == "capture":
            timing["capture_s"] += seconds
            timing["capture_calls"] += 1
        else:
            timing["decode_s"] += seconds
            timing["decode_calls"] += 1
            timing[f"{kind}_steps"] += 1

    def timed(*a, **kw):
        if in_step[0]:
            return forward(*a, **kw)
        # Code without a slots' step: its decoding forwards are timed here, but a step
        # being captured cannot synchronise and replays never come here.
        if cuda and torch.cuda.is_current_stream_capturing():
            return forward(*a, **kw)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = forward(*a, **kw)
        if cuda:
            torch.cuda.synchronize()
        one = kw["input_ids"].shape[1] == 1
        if one:
            _count("eager", time.perf_counter() - start)
        else:
            timing["prompt_s"] += time.perf_counter() - start
            timing["prompt_calls"] += 1
        return out

    model.forward = timed
    if step is not None:
        slots._step = timed_step
    specs = selfplay_specs(words, epoch=1, shard_index=0, games_per_word=1)
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    start = time.perf_counter()
    games = play_games(
        specs,
        {POLICY: backend},
        TABOO.load_prompts(),
        game=TABOO,
        max_turns=args.max_turns,
        sampling=sampling,
        seed=args.seed,
    )
    wall = time.perf_counter() - start
    if step is not None:
        slots._step = step
    if cuda:
        torch.cuda.synchronize()
    for kind, begin, end in pending:
        _count(kind, begin.elapsed_time(end) / 1000)
    generated = sum(sum(g.message_tokens) for g in games)
    stats = backend.stats
    return {
        "wall_s": wall,
        "games": len(games),
        "messages": sum(len(g.message_tokens) for g in games),
        "generated_tokens": generated,
        "tokens_per_s": generated / wall,
        # slots_step: each step timed whole (CUDA events on a GPU); forward: the eager
        # forwards of code without that step (replayed graphs unseen).
        "step_timer": "slots_step" if step is not None else "forward",
        "decode_step_ms": 1000 * timing["decode_s"] / max(timing["decode_calls"], 1),
        "decode_steps": timing["decode_calls"],
        "replayed_steps": timing["replayed_steps"],
        "eager_steps": timing["eager_steps"],
        "capture_calls": timing["capture_calls"],
        "capture_s": timing["capture_s"],
        "prompt_passes": timing["prompt_calls"],
        "prompt_pass_s": timing["prompt_s"],
        "decode_s": timing["decode_s"],
        "row_steps": stats["decode_row_steps"],
        "token_share": generated / max(stats["decode_row_steps"], 1),
        "prompt_tokens": stats["prompt_tokens"],
        "prompt_tokens_computed": stats["prompt_tokens_computed"],
        # CUDA graphs captured (one per call and batch size); None for code before them.
        "graphs_captured": stats.get("graphs_captured"),
        "cuda_graphs": getattr(backend, "cuda_graphs", None),
        "histories": [[m["content"] for m in g.history] for g in games],
    }


def run_side(checkout: Path, argv: list[str]) -> dict:
    # Prepended: what is there (the carried wheels' folder) stays, behind this checkout.
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(checkout / "workflow_scripts"), *([path] if path else [])]
    )}  # fmt: skip
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: worker failed\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--before", type=Path, help="checkout of the code before the change")
    p.add_argument("--after", type=Path, default=REPO, help="checkout after (default: this one)")
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--games", type=int, default=48, help="games of the shard (one per word)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--stop-lengths", nargs="*", default=[], help="games' parquet files")
    p.add_argument("--output", default=None, help="Markdown file for the results (+ .json)")
    args, _ = p.parse_known_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    raw = list(sys.argv[1:] if argv is None else argv)
    sides = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    load = os.getloadavg()
    for _ in range(args.repeats):
        for name, checkout in sides.items():
            if checkout is not None:
                runs[name].append(run_side(checkout.resolve(), raw))
    lines = [
        f"# Self-play-shaped decoding: {Path(args.model).name}",
        "",
        f"Command: `python perf/bench_selfplay_decoding.py {' '.join(raw)}`",
        f"Date: {datetime.date.today()}; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; load before: {load[0]:.2f}; device: {args.device}",
        "",
        "| side | tokens/s | decode step ms | steps replayed / eager, graphs captured "
        "| row-steps making a token | prompt tokens computed / seen | wall s |",
        "|---|---|---|---|---|---|---|",
    ]

    def spread(values: list[float], fmt: str) -> str:
        med = statistics.median(values)
        return f"{med:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    for name, rs in runs.items():
        if not rs:
            continue
        lines.append(
            f"| {name} | {spread([r['tokens_per_s'] for r in rs], '.1f')} | "
            f"{spread([r['decode_step_ms'] for r in rs], '.2f')} | "
            f"{rs[0].get('replayed_steps')} / {rs[0].get('eager_steps')}, "
            f"{rs[0]['graphs_captured']} | "
            f"{rs[0]['token_share']:.1%} ({rs[0]['generated_tokens']}/{rs[0]['row_steps']}) | "
            f"{rs[0]['prompt_tokens_computed']}/{rs[0]['prompt_tokens']} | "
            f"{spread([r['wall_s'] for r in rs], '.1f')} |"
        )
    if runs["before"] and runs["after"]:
        gain = statistics.median(r["tokens_per_s"] for r in runs["after"]) / statistics.median(
            r["tokens_per_s"] for r in runs["before"]
        )
        a, b = runs["before"][0]["histories"], runs["after"][0]["histories"]
        same = sum(x == y for x, y in zip(a, b, strict=True))
        lines += [
            "",
            f"Tokens/s after / before (medians): {gain:.2f}x. Games identical on both "
            f"sides: {same}/{len(a)} (median, range over {args.repeats} runs each).",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        for rs in runs.values():
            for r in rs:
                r.pop("histories", None)
        Path(args.output).with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
