"""Self-play on CPU, side by side as whole processes: ``spag play`` with the hf backend and
with vLLM's CPU build (.venv-vllm), eager and compiled, on the same shard.

Each side is one ``spag play`` process (its own environment's ``spag``), one after the
other on an otherwise idle machine; a sampler sums the resident memory of the process
and its children (vLLM runs an engine core and a worker beside it) every 0.2 s. From the
job's log: the engine's start (process start to the first message's call) and the rate
of generation alone (``spag play``'s ``wrote ... tokens/s``, generated tokens over the
time from the first call to the last reply). Sides:

- ``hf``: the hf backend (``--threads``);
- ``vllm-eager``: ``--vllm-enforce-eager`` (no torch.compile);
- ``vllm-compiled``: vLLM's default (torch.compile with inductor; ``--cold`` clears
  vLLM's compile cache first, so that the start includes the compile);
- ``vllm-eager-one-wave``: as ``vllm-eager`` with every game of a call in one
  ``LLM.generate`` (``cache_waves`` replaced in that process only): vLLM admits and
  preempts on its own instead of waves reserving prompt + max_new_tokens for each game
  (they differ only where the cache holds fewer games than a call has: a small
  ``--batch-memory-gib``).

Usage::

    python perf/bench_vllm_cpu.py --model MODEL_DIR --words 48 --threads 2 \\
        --output perf/results/vllm_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "perf"))
VLLM_ENV = REPO / ".venv-vllm"
ONE_WAVE = (
    "import runpy, sys, spag.generation.vllm_backend as v\n"
    "v.cache_waves = lambda prompts, max_new, cache: [list(range(len(prompts)))] if prompts else []\n"
    "sys.argv = ['spag', *sys.argv[1:]]\n"
    "runpy.run_module('spag', run_name='__main__')\n"
)


def _sample_memory(pid: int, peak: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            root = psutil.Process(pid)
            total = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            peak[0] = max(peak[0], total)
        except psutil.Error:
            pass
        time.sleep(0.2)


def run_side(name: str, args: argparse.Namespace, words: Path, work: Path) -> dict:
    vllm = name.startswith("vllm")
    env_bin = (VLLM_ENV if vllm else Path(sys.executable).parent.parent) / "bin"
    out = work / f"{name}.parquet"
    flags = [
        "play", "--model", args.model, "--words", str(words), "--output", str(out),
        "--backend", "vllm" if vllm else "hf", "--device", "cpu", "--threads", str(args.threads),
        "--prompt-format", "chat", "--seed", "42", "--max-turns", "5",
        "--max-new-tokens", str(args.max_new_tokens), "--temperature", "0.7", "--top-k", "50",
        "--batch-size", str(args.batch_size), "--max-length", "2048", "--no-journal",
        "--no-progress",
    ]  # fmt: skip
    if args.batch_memory_gib is not None:
        flags += ["--batch-memory-gib", str(args.batch_memory_gib)]
    if name in ("vllm-eager", "vllm-eager-one-wave"):
        flags.append("--vllm-enforce-eager")
    if name == "vllm-eager-one-wave":
        cmd = [str(env_bin / "python"), "-c", ONE_WAVE, *flags]
    else:
        cmd = [str(env_bin / "spag"), *flags]
    if name == "vllm-compiled" and args.cold:
        shutil.rmtree(Path.home() / ".cache/vllm/torch_compile_cache", ignore_errors=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    peak, stop = [0], threading.Event()
    started = time.monotonic()
    with open(work / f"{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
        sampler = threading.Thread(target=_sample_memory, args=(proc.pid, peak, stop))
        sampler.start()
        rc = proc.wait()
        stop.set()
        sampler.join()
    wall = time.monotonic() - started
    text = (work / f"{name}.log").read_text(errors="replace")
    row = {
        "side": name,
        "rc": rc,
        "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak[0] / 2**30, 2),
    }
    m = re.search(
        r"wrote .*?: (\d+) episodes, (\d+) generated tokens in ([\d.]+) s \(([\d.]+) tokens/s", text
    )
    if m:
        row.update(episodes=int(m[1]), tokens=int(m[2]), generation_s=float(m[3]),
                   tokens_per_s=float(m[4]))  # fmt: skip
        row["start_s"] = round(wall - row["generation_s"], 1)
    if rc != 0:
        row["log_tail"] = text[-2000:]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--words", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--sides", nargs="+",
                   default=["hf", "vllm-eager", "vllm-eager-one-wave", "vllm-compiled"])  # fmt: skip
    p.add_argument("--cold", action="store_true", help="clear vLLM's compile cache first")
    p.add_argument(
        "--batch-memory-gib", type=float, help="hf: slots' memory; vllm on CPU: its KV cache"
    )
    p.add_argument("--output", required=True)
    args = p.parse_args()
    from bench_selfplay import bench_words

    work = Path(tempfile.mkdtemp(prefix="bench-vllm-cpu-"))
    words = work / "words.txt"
    words.write_text("\n".join(bench_words(args.words)) + "\n")
    rows = []
    for side in args.sides:
        row = run_side(side, args, words, work)
        print(json.dumps(row), flush=True)
        rows.append(row)
    report = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg(),
        },  # fmt: skip
        "rows": rows,
    }
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    print(f"logs in {work}")


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
