"""Self-play generation as whole processes: ``spag play`` vs transformers' ``generate``.

Every side plays the same games (distinct target words, one game each, the
shipped prompts, the same stopping rules) as its own process, one after the
other, and the machine's fp32 matrix-product rate is measured in the same run:

- ``spag``: the ``spag play`` command (hf backend: shared prompt prefix stored
  once, a game's keys/values kept between its turns, static cache);
- ``generate``: the same game loop in a process that answers each message with
  ``model.generate`` over sub-batches of ``--batch-size`` prompts (left-padded,
  sorted by length, as ours), i.e. the same batch size without our decoder;
- ``one-by-one``: the research code's loop, ``model.generate`` at batch size 1.

With ``--greedy`` (the default) the replies of all sides must be the same
tokens; the report counts the messages that differ. Rates: generated tokens
(message tokens, EOS included) and messages per second of the whole process
(start-up and model load included) and of the generation alone; the share of
the matrix-product rate counts 2 x parameters FLOP per generated token.

Usage::

    python perf/bench_generation.py --model results/base_model --prompt-format chat \\
        --games 64 --max-new-tokens 32 --sides spag generate \\
        --output perf/results/generation_smollm2.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(REPO / "perf"))


def matmul_rate(threads: int, n: int = 2048, seconds: float = 3.0) -> float:
    """fp32 GFLOP/s of an n x n matrix product on ``threads`` threads (best of 5 rounds)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(5):
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 5:
            a @ b
            reps += 1
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - start) / 1e9)
    return best


def read_rate(threads: int, mib: int = 1024) -> float:
    """GB/s of reading a float32 tensor far larger than the caches (best of 5 sums):
    what bounds a decode step that reads every weight for a few rows."""
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(mib * 2**20 // 4)
    x.sum()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * 4 / best / 1e9


class GenerateBackend:
    """Answers the game loop with ``model.generate``: sub-batches of ``batch_size``
    prompts (1: the research code's loop), encoded as the hf backend encodes them."""

    def __init__(self, model_dir: Path, batch_size: int, prompt_format: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from spag.generation.base import context_budget, stop_token_ids
        from spag.models.rendering import PromptRenderer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, use_safetensors=True
        ).eval()
        self.encoder = PromptRenderer(self.tokenizer, prompt_format, source=str(model_dir))
        self.eos_ids = stop_token_ids(self.encoder, model_dir)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]
        self.batch_size = batch_size
        self.max_length = context_budget(model_dir, None)

    def generate(self, prompts, sampling, *, seed, **_):
        import torch
        from transformers import GenerationConfig

        from spag.generation.base import Reply

        encoded = self.encoder.encode(prompts, self.max_length - sampling.max_new_tokens)
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            min_new_tokens=sampling.min_new_tokens,
            do_sample=not sampling.greedy,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
        )
        torch.manual_seed(seed)
        order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i][0]), i))
        replies = [None] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encoded[i][0]) for i in idx)
            ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                seq = encoded[i][0]
                ids[row, width - len(seq) :] = torch.tensor(seq)
                mask[row, width - len(seq) :] = 1
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=ids, attention_mask=mask, generation_config=config
                )[:, width:].tolist()
            for row, i in enumerate(idx):
                tokens = out[row]
                eos = next((k for k, t in enumerate(tokens) if t in self.eos_ids), None)
                kept = tokens if eos is None else tokens[:eos]
                replies[i] = Reply(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True).strip(),
                    num_tokens=len(tokens) if eos is None else eos + 1,
                    finished_by_eos=eos is not None,
                    prompt_truncated=encoded[i][1],
                )
        return replies


def worker(args: argparse.Namespace) -> int:
    """One baseline side as its own process: play the games, write their histories."""
    import torch

    from spag.data.words import read_word_list
    from spag.game.selfplay import POLICY, play_games, selfplay_specs
    from spag.game.taboo import TABOO
    from spag.generation import Sampling

    torch.set_num_threads(args.threads)
    batch = 1 if args.worker == "one-by-one" else args.batch_size
    backend = GenerateBackend(Path(args.model), batch, args.prompt_format)
    # Greedy decoding is temperature 0.
    temperature = 0.0 if args.greedy else args.temperature
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=temperature)
    settings = dict(max_turns=args.max_turns, sampling=sampling, seed=0)
    start = time.perf_counter()
    games = play_games(
        selfplay_specs(read_word_list(args.words), 0, 0, 1),
        {POLICY: backend},
        TABOO.load_prompts(),
        game=TABOO,
        **settings,
    )
    seconds = time.perf_counter() - start
    Path(args.worker_output).write_text(
        json.dumps(
            {
                "generation_seconds": seconds,
                "games": [
                    {"word": g.spec.target_word, "history": g.history, "tokens": g.message_tokens}
                    for g in games
                ],
            }
        )
    )
    return 0


def run_side(side: str, args: argparse.Namespace, words: Path, out_dir: Path) -> dict:
    """Run one side as a whole process; return its games and timings."""
    common = [
        "--max-turns",
        str(args.max_turns),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--temperature",
        str(args.temperature),
        "--prompt-format",
        args.prompt_format,
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
    ]
    greedy = ["--greedy"] if args.greedy else ["--no-greedy"]
    if side == "spag":
        shard = out_dir / "spag.parquet"
        cmd = ["spag", "play", "--model", str(args.model), "--words", str(words)]
        cmd += ["--output", str(shard), "--no-progress", *common, *greedy]
    else:
        shard = out_dir / f"{side}.json"
        cmd = [sys.executable, __file__, "--worker", side, "--worker-output", str(shard)]
        cmd += ["--model", str(args.model), "--words", str(words), *common, *greedy]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if side == "spag":
        import pyarrow.parquet as pq

        table = pq.read_table(shard).to_pylist()
        games = [
            {"word": r["target_word"], "history": r["history"], "tokens": r["message_tokens"]}
            for r in table
        ]
        gen_s = _logged_generation_seconds(proc.stderr)
        work = _logged_work(proc.stderr)
    else:
        data = json.loads(shard.read_text())
        games, gen_s, work = data["games"], data["generation_seconds"], None
    tokens = sum(sum(g["tokens"]) for g in games)
    messages = sum(len(g["tokens"]) for g in games)
    return {
        "side": side,
        "wall_seconds": round(wall, 2),
        "generation_seconds": round(gen_s, 2) if gen_s else None,
        "tokens": tokens,
        "messages": messages,
        "tokens_per_s": round(tokens / wall, 1),
        "messages_per_s": round(messages / wall, 3),
        "generation_tokens_per_s": round(tokens / gen_s, 1) if gen_s else None,
        "games": games,
        # Tokens the model ran (prompt tokens computed + rows x decoding steps).
        "processed_tokens": work,
    }


def _logged_generation_seconds(stderr: str) -> float | None:
    """``spag play`` logs the games' wall time ('... generated tokens in S s')."""
    import re

    found = re.findall(r"generated tokens in ([0-9.]+) s", stderr)
    return float(found[-1]) if found else None


def _logged_work(stderr: str) -> int | None:
    """Prompt tokens run through the model plus rows x decoding steps, from the
    ``spag play`` log line of the hf backend's counters."""
    import re

    found = re.findall(r"(\d+) run through it .*?, (\d+) rows x decoding steps", stderr)
    return sum(int(a) + int(b) for a, b in found) if found else None


def differing_messages(a: list[dict], b: list[dict]) -> int:
    """Messages that differ between two sides' games (by word, message by message);
    a game one side plays longer counts its extra messages as differing."""
    by_word = {g["word"]: g["history"] for g in b}
    diff = 0
    for g in a:
        other = by_word[g["word"]]
        diff += sum(x["content"] != y["content"] for x, y in zip(g["history"], other, strict=False))
        diff += abs(len(g["history"]) - len(other))
    return diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="model folder (default: build the tiny model)")
    p.add_argument("--prompt-format", default="raw", choices=("raw", "chat"))
    p.add_argument("--games", type=int, default=64, help="games (distinct target words)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.2)
    p.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--sides",
        nargs="+",
        default=["spag", "generate"],
        choices=["spag", "generate", "one-by-one"],
    )
    p.add_argument("--repeat", type=int, default=1, help="rounds of all sides (fastest kept)")
    p.add_argument("--output", default=None, help="Markdown file for the results (+ .json)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-output", default=None, help=argparse.SUPPRESS)
    p.add_argument("--words", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)

    from bench_selfplay import bench_words, write_results

    tmp = tempfile.TemporaryDirectory()
    out_dir = Path(tmp.name)
    if args.model is None:
        from spag.models.tiny import build_tiny_model

        corpus = sorted(
            x for x in (REPO / "data").glob("*") if x.suffix in (".json", ".yaml", ".txt")
        )
        args.model = build_tiny_model(corpus, out_dir / "model", seed=0)
    import torch

    words = out_dir / "words.txt"
    words.write_text("\n".join(bench_words(args.games)) + "\n", encoding="utf-8")
    load = [round(os.getloadavg()[0], 2)]
    rates = [matmul_rate(args.threads)]
    read_gbs = read_rate(args.threads)
    # Rounds alternate the sides, so that a change in the machine's speed weighs on all;
    # each side keeps its fastest round (all rounds' wall times are reported).
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for side in args.sides:
            result = run_side(side, args, words, out_dir)
            print(json.dumps({k: v for k, v in result.items() if k != "games"}), flush=True)
            walls = [*best.get(side, {}).get("wall_seconds_all", []), result["wall_seconds"]]
            if side not in best or result["wall_seconds"] < best[side]["wall_seconds"]:
                best[side] = result
            best[side]["wall_seconds_all"] = walls
    sides = [best[side] for side in args.sides]
    rates.append(matmul_rate(args.threads))
    load.append(round(os.getloadavg()[0], 2))

    from safetensors import safe_open

    params = 0
    for f in Path(args.model).glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            params += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118
    rate = max(rates)
    for s in sides:
        flops = 2 * params * s["tokens"]
        s["share_of_matmul_rate"] = round(flops / s["wall_seconds"] / 1e9 / rate, 4)
        if s["generation_seconds"]:
            s["generation_share_of_matmul_rate"] = round(
                flops / s["generation_seconds"] / 1e9 / rate, 4
            )
            if s["processed_tokens"]:
                # All the model's work, prompt passes included (model FLOP utilisation).
                s["processed_share_of_matmul_rate"] = round(
                    2 * params * s["processed_tokens"] / s["generation_seconds"] / 1e9 / rate, 4
                )
    base = sides[0]
    for s in sides[1:]:
        if args.greedy:  # sampled replies differ by design (other random streams)
            s["differing_messages_vs_" + base["side"]] = differing_messages(
                base["games"], s["games"]
            )
        base[f"speedup_vs_{s['side']}"] = round(s["wall_seconds"] / base["wall_seconds"], 2)
        base[f"message_rate_ratio_vs_{s['side']}"] = round(
            base["messages_per_s"] / s["messages_per_s"], 2
        )
        if s["generation_seconds"] and base["generation_seconds"]:
            base[f"generation_speedup_vs_{s['side']}"] = round(
                (base["tokens"] / base["generation_seconds"])
                / (s["tokens"] / s["generation_seconds"]),
                2,
            )
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{args.threads} threads",
        "model": f"{Path(args.model).name}: {params / 1e6:.1f} M parameters (fp32)",
        "matmul_gflops": [round(r, 1) for r in rates],
        "memory_read_gbs": round(read_gbs, 1),
        "load_average": load,
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
        "settings": {
            k: getattr(args, k)
            for k in (
                "games",
                "max_turns",
                "max_new_tokens",
                "greedy",
                "batch_size",
                "prompt_format",
            )
        },
    }
    rows = [{k: v for k, v in s.items() if k != "games"} for s in sides]
    if args.output:
        write_results(Path(args.output), meta, rows, markdown(meta, rows))
    return 0


def markdown(meta: dict, rows: list[dict]) -> str:
    s = meta["settings"]
    lines = [
        "# Self-play generation as whole processes",
        "",
        f"- date: {meta['date']}; load average before/after: {meta['load_average']}",
        f"- machine: {meta['machine']}; fp32 matrix product (2048^2) before/after: "
        f"{meta['matmul_gflops']} GFLOP/s; memory read {meta['memory_read_gbs']} GB/s",
        f"- model: {meta['model']}",
        f"- games: {s['games']} distinct target words, max_turns {s['max_turns']}, "
        f"max_new_tokens {s['max_new_tokens']}, greedy {s['greedy']}, batch size "
        f"{s['batch_size']}, prompt format {s['prompt_format']}",
        f"- command: `{meta['command']}`",
        "",
        "| side | process s (all rounds) | generation s | tokens | messages | tokens/s (process) "
        "| messages/s | share of matmul rate (process / generation) | tokens the model ran "
        "| their share of matmul rate | messages differing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        diff = next((v for k, v in r.items() if k.startswith("differing_messages")), "-")
        gen_share = r.get("generation_share_of_matmul_rate")
        work_share = r.get("processed_share_of_matmul_rate")
        lines.append(
            f"| {r['side']} | {r['wall_seconds']} ({', '.join(map(str, r['wall_seconds_all']))}) | "
            f"{r['generation_seconds'] or '-'} | "
            f"{r['tokens']} | {r['messages']} | {r['tokens_per_s']} | {r['messages_per_s']} | "
            f"{100 * r['share_of_matmul_rate']:.1f}% / "
            f"{'-' if gen_share is None else f'{100 * gen_share:.1f}%'} | "
            f"{r['processed_tokens'] or '-'} | "
            f"{'-' if work_share is None else f'{100 * work_share:.1f}%'} | {diff} |"
        )
    first = rows[0]
    lines.append("")
    for other in rows[1:]:
        name = other["side"]
        lines.append(
            f"- {first['side']} vs {name}: process wall clock **{first[f'speedup_vs_{name}']}x**, "
            f"messages/s {first[f'message_rate_ratio_vs_{name}']}x, generated tokens per "
            f"second of generation {first.get(f'generation_speedup_vs_{name}', '-')}x"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
