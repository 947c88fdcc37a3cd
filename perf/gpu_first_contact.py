"""The GPU check: what the pipeline's GPU paths do on one card, step by step.

Run through ``GFC_CALL=N perf/gpu_first_contact.sh OUT [--cpu]``, which gives every step
its own process and time limit, in calls of at most 8 minutes (the script's top). Each
step appends one JSON line per measurement to ``OUT/results.jsonl`` as soon as it has
it, so a step that fails or runs out of time keeps what came before. Models are
random-weight Llamas built here (real weights cannot travel to a node without
internet): ``big`` (about 0.85B parameters, grouped queries, a 32k vocabulary) and
``small`` (about 30M) for CPU-vs-GPU agreement.
``--cpu`` runs every step at toy sizes on the CPU (the test's mode).

Steps:

- ``env``: versions, the card, the attention kernels torch may use;
- ``models``: builds both models; loading to the GPU through host memory
  (``.to(cuda)``) against ``device_map`` (straight to the card);
- ``generation``: the ``hf`` backend's tokens/s at batch 1, 8, 32, 128 on the same
  games, peak memory per row against the slot and prompt-pass estimate
  (:class:`spag.generation.hf_backend.RowMemory`), the CUDA graphs captured, and the
  sampler's cost per decode step (one random kernel per row against one per batch);
- ``graphs``: greedy replies with decoding steps replayed from CUDA graphs against
  eager steps, same prompts: replies equal, the first difference (on the CPU the same
  path, all eager, recorded as not applicable);
- ``selfplay``: self-play-shaped decoding (``perf/bench_selfplay_decoding.py``: Taboo
  self-play of the big model, several turns a game, replies stopped at the committed
  SmolLM2 games' mean length) at batch 128 and batch 1, the code of ``GFC_BEFORE``
  (a checkout of an earlier commit, where given) beside this one in the same run;
- ``invariance``: the same games at batch 1 and 8, greedy and seeded, in fp32 and
  bf16: how many replies differ;
- ``scoring``: reference scoring throughput, packed and padded, in fp32 and bf16;
  the small model's log-probs on the GPU against the CPU's in fp32; fp32 attention
  with grouped queries against the same heads expanded;
- ``training``: ``spag train`` steps for each precision pairing of training and
  reference scores (fp32, ZeRO-3 bf16, autocast bf16, ZeRO-3 with CPU offload) and
  for LoRA (alone and under ZeRO-3, with and without activation checkpointing): step
  time, peak memory against ``spag training-memory``'s estimate, the first step's
  ratio and KL (it scores the samples itself where ``scoring`` did not run);
- ``shape7b_*`` (calls 4 and 5, or ``GFC_STEPS`` naming ``shape7b``): LLaMA-2-7B's
  configuration with random weights, built on the card in bf16 (``shape7b_build``);
  self-play at the slots the backend's sizing picks (``shape7b_generate``); packed bf16
  scoring of samples up to 2,048 tokens (``shape7b_score``); training at the paper's
  micro-batch with activation checkpointing: LoRA, full under ZeRO-3, ZeRO-3 with CPU
  offload (``shape7b_lora``, ``shape7b_full``, ``shape7b_offload``), whose CPU Adam
  ``shape7b_cpu_adam`` builds. Each with tokens/s and its share of the card's bf16
  rate (:func:`flop_share`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass(frozen=True)
class Shape:
    """The ``shape7b_*`` sub-steps' sizes: LLaMA-2-7B's on a card, a toy Llama's on the CPU."""

    model: dict  # LlamaConfig's keywords
    samples: int  # scored samples, queries long enough to fill most of max_length
    max_length: int
    score_batch: int
    train_batch: int  # the paper's per_device_batch_size
    train_accum: int
    train_steps: int
    offload_steps: int
    games: int  # self-play games of the shard, and the batch size asked for (a cap)
    max_new_tokens: int
    max_turns: int
    lora: tuple[str, ...]


@dataclass(frozen=True)
class Sizes:
    """The shapes of one mode: a card's, or toy ones for the CPU."""

    big: dict
    small: dict
    prompt_words: int  # each game's own words (its prompt also holds shared rules)
    rules_words: int
    max_new_tokens: int
    batches: tuple[int, ...]
    batch1_games: int  # games played one by one (batch 1 is slow)
    invariance_games: int
    samples: int
    max_length: int
    score_batch: int
    agreement_samples: int
    train_batch: int
    train_accum: int
    train_steps: int
    attention_shape: tuple[int, int, int, int, int]  # heads, kv heads, tokens, dim, reps
    shape7b: Shape


# LLaMA-2-7B's configuration (meta-llama/Llama-2-7b-hf's config.json): 6.74B parameters.
LLAMA2_7B = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
    rms_norm_eps=1e-5,
)  # fmt: skip
# The paper's shapes (configs/paper-llama2-7b.yaml): 2 samples of 2048 tokens a
# micro-batch, scoring in sub-batches of 16, replies of at most 256 tokens; LoRA as
# configs/paper-llama2-7b-lora.yaml. 768 games, more than the ~600 slots the sizing
# should fit for first-turn Taboo prompts (~210 tokens): the sizing, not the cap, picks.
GPU_SHAPE = Shape(
    model=LLAMA2_7B, samples=128, max_length=2048, score_batch=16, train_batch=2,
    train_accum=1, train_steps=3, offload_steps=2, games=768, max_new_tokens=256,
    max_turns=1, lora=("r=32", "lora_alpha=64"),
)  # fmt: skip
CPU_SHAPE = Shape(
    model=dict(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
        rms_norm_eps=1e-5,
    ),
    samples=8, max_length=64, score_batch=4, train_batch=2, train_accum=1, train_steps=2,
    offload_steps=2, games=4, max_new_tokens=8, max_turns=1, lora=("r=4", "lora_alpha=8"),
)  # fmt: skip
# The H200's dense bf16 rate by the vendor's datasheet (a large matrix product on random
# data reached about 790 TFLOP/s on this workplace's H200s).
BF16_PEAK_FLOPS = 989e12

GPU = Sizes(
    big=dict(
        vocab_size=4000, vocab_rows=32000, hidden_size=2048, intermediate_size=5632,
        num_layers=16, num_heads=16, num_kv_heads=4, max_position_embeddings=4096,
    ),
    small=dict(
        vocab_size=4000, vocab_rows=8192, hidden_size=512, intermediate_size=1408,
        num_layers=8, num_heads=8, num_kv_heads=2, max_position_embeddings=4096,
    ),
    prompt_words=600, rules_words=200, max_new_tokens=64, batches=(1, 8, 32, 128),
    batch1_games=4, invariance_games=8, samples=128, max_length=1024, score_batch=16,
    agreement_samples=32, train_batch=4, train_accum=2, train_steps=4,
    attention_shape=(16, 4, 1024, 128, 20), shape7b=GPU_SHAPE,
)  # fmt: skip
CPU = Sizes(
    big=dict(
        vocab_size=512, vocab_rows=1024, hidden_size=64, intermediate_size=128,
        num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=1024,
    ),
    small=dict(
        vocab_size=512, vocab_rows=512, hidden_size=32, intermediate_size=64,
        num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=1024,
    ),
    prompt_words=30, rules_words=10, max_new_tokens=8, batches=(1, 2, 4),
    batch1_games=2, invariance_games=4, samples=16, max_length=96, score_batch=4,
    agreement_samples=8, train_batch=2, train_accum=2, train_steps=2,
    attention_shape=(4, 2, 64, 16, 3), shape7b=CPU_SHAPE,
)  # fmt: skip


@contextlib.contextmanager
def _cudnn_allowed(inner):
    """cuDNN's attention switched back on (the pipeline turns it off) inside ``inner``."""
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        with inner:
            yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


class Recorder:
    """Appends one JSON line per measurement to ``OUT/results.jsonl`` at once."""

    def __init__(self, out: Path, step: str) -> None:
        self.path = out / "results.jsonl"
        self.step = step

    def __call__(self, what: str, **data) -> None:
        row = {"step": self.step, "what": what, "ok": True, **data}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        print(json.dumps(row, default=str), flush=True)


def _device(cpu: bool) -> str:
    return "cpu" if cpu else "cuda"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device: str) -> int:
    import torch

    if device != "cuda":
        return 0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def _peak_since(device: str, base: int) -> int | None:
    import torch

    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _words(seed: int, n: int) -> str:
    from spag.models.tiny import iter_corpus_text

    vocab = sorted({w for t in iter_corpus_text([DATA / "demo_games.json"]) for w in t.split()})
    rng = random.Random(seed)
    return " ".join(rng.choice(vocab) for _ in range(n))


def _prompts(sizes: Sizes, count: int) -> list[str]:
    """Games' prompts: shared rules, then each game's own history."""
    rules = _words(0, sizes.rules_words)
    return [f"{rules}\n\n{_words(i + 1, sizes.prompt_words)}" for i in range(count)]


# ---------------------------------------------------------------------------- steps


def step_env(args: argparse.Namespace, rec: Recorder) -> None:
    import torch

    versions = {}
    for name in ("torch", "transformers", "accelerate", "tokenizers", "safetensors",
                 "huggingface-hub", "deepspeed", "peft", "numpy", "pyarrow", "pydantic"):  # fmt: skip
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    info = dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        python=platform.python_version(),
        versions=versions,
        transformers_from=__import__("transformers").__file__,
        cpus=os.cpu_count(),
        cuda_build=torch.version.cuda,
        cuda_available=torch.cuda.is_available(),
    )
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
        )
        for kernel in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "cudnn_sdp_enabled"):
            with contextlib.suppress(AttributeError, RuntimeError):
                info[kernel] = getattr(torch.backends.cuda, kernel)()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                 "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30,
            ).stdout.strip()  # fmt: skip
    rec("environment", **info)


def step_models(args: argparse.Namespace, rec: Recorder) -> None:
    import torch

    from spag.models.tiny import build_tiny_model

    corpus = sorted(p for p in DATA.glob("*") if p.suffix in (".json", ".yaml", ".txt"))
    for name, shape in (("small", args.sizes.small), ("big", args.sizes.big)):
        folder = args.work / name
        start = time.perf_counter()
        if not folder.is_dir():
            build_tiny_model(corpus, folder, seed=0, **shape)
        rec("built", model=name, seconds=round(time.perf_counter() - start, 1),
            parameters=_parameters(folder), **shape)  # fmt: skip

    # Loading: through host memory then .to(device), as the loaders do, against
    # device_map (weights go straight to the card).
    from transformers import AutoModelForCausalLM

    device = _device(args.cpu)
    for how in ("to_device", "device_map"):
        _sync(device)
        start = time.perf_counter()
        kwargs = {"device_map": device} if how == "device_map" else {}
        model = AutoModelForCausalLM.from_pretrained(
            args.work / "big", dtype=torch.bfloat16, use_safetensors=True, **kwargs
        )
        if how == "to_device":
            model = model.to(device)
        _sync(device)
        rec("load", model="big", how=how, seconds=round(time.perf_counter() - start, 2))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()


def _parameters(folder: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in folder.glob("*.safetensors"):
        with safe_open(path, "pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open has no __iter__)
                shape = fh.get_slice(key).get_shape()
                total += _numel(shape)
    return total


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _backend(args, model: str, dtype: str, batch: int):
    from spag.generation.hf_backend import HFBackend

    return HFBackend(
        args.work / model,
        prompt_format="raw",
        trust_remote_code=False,
        batch_size=batch,
        dtype=dtype,
        device=_device(args.cpu),
        reuse_kv=False,
    )


def step_generation(args: argparse.Namespace, rec: Recorder) -> None:
    import torch

    from spag.generation.settings import Sampling

    sizes, device = args.sizes, _device(args.cpu)
    dtype = "float32" if args.cpu else "bfloat16"
    start = time.perf_counter()
    backend = _backend(args, "big", dtype, 1)
    _sync(device)
    rec("load", model="big", dtype=dtype, seconds=round(time.perf_counter() - start, 2))
    sampling = Sampling(max_new_tokens=sizes.max_new_tokens)  # self-play's defaults
    games = _prompts(sizes, max(sizes.batches))
    backend.generate(games[:2], sampling, seed=0, game_ids=["w0", "w1"])  # warm-up
    for batch in sizes.batches:
        count = sizes.batch1_games if batch == 1 else batch
        backend.batch_size = batch
        before = dict(backend.stats)
        base = _peak_reset(device)
        _sync(device)
        start = time.perf_counter()
        replies = backend.generate(
            games[:count], sampling, seed=1, game_ids=[f"g{i}" for i in range(count)]
        )
        _sync(device)
        seconds = time.perf_counter() - start
        tokens = sum(r.num_tokens for r in replies)
        prompt_tokens = backend.stats["prompt_tokens"] - before["prompt_tokens"]
        longest = max(
            len(backend.encoder.encode([g], backend.max_length)[0][0]) for g in games[:count]
        )
        # A slot with its whole prompt (an upper bound: the shared rules are stored once)
        # and a row of the prompt pass: every slot enters in the first pass here.
        memory = backend._memory
        estimate = memory.slot_bytes(longest, sizes.max_new_tokens) + memory.pass_bytes(
            longest, backend.reuse_kv
        )
        peak = _peak_since(device, base)
        rec(
            "batch",
            batch=batch,
            games=count,
            seconds=round(seconds, 3),
            new_tokens=tokens,
            tokens_per_s=round(tokens / seconds, 1),
            prompt_tokens_mean=round(prompt_tokens / count, 1),
            longest_prompt=longest,
            peak_bytes=peak,
            peak_bytes_per_row=None if peak is None else peak // min(batch, count),
            estimate_bytes_per_row=estimate,
            kv_bytes_per_token=backend._memory.kv_bytes_per_token,
            estimate_over_peak=None if not peak else round(estimate * min(batch, count) / peak, 3),
            cuda_graphs=backend.cuda_graphs,
            graphs_captured=backend.stats["graphs_captured"] - before["graphs_captured"],
        )

    # The sampler alone at the largest batch: a draw per row and step (one kernel each),
    # a row's draws for all steps made up front (what generate does under top-k), and
    # one draw for the batch.
    batch = max(sizes.batches)
    vocab = backend.model.config.vocab_size
    logits = torch.randn(batch, vocab, device=device)
    generators = [backend._generator(i) for i in range(batch)]
    reps = 20
    for how in ("per_row", "per_row_upfront", "one_draw"):
        _sync(device)
        start = time.perf_counter()
        noise = None
        if how == "per_row_upfront":
            noise = torch.stack([backend._noise(sampling, g, reps, vocab) for g in generators])
        for t in range(reps):
            if how == "per_row":
                backend._pick(logits, sampling, generators)
            elif how == "per_row_upfront":
                backend._pick(logits, sampling, generators, noise[:, t])
            else:
                probs = torch.softmax(torch.topk(logits / sampling.temperature, 50).values, -1)
                (probs / torch.empty_like(probs).exponential_(generator=generators[0])).argmax(-1)
        _sync(device)
        rec(
            "sampler",
            how=how,
            batch=batch,
            ms_per_step=round(1e3 * (time.perf_counter() - start) / reps, 3),
        )


def _token_replies(backend):
    """Replies as their token ids, not text: ids of the padded vocabulary rows decode to
    nothing, so texts could agree where the tokens differ."""
    from spag.generation.base import Reply

    backend._reply = lambda tokens, truncated: Reply(
        text=" ".join(map(str, tokens)), num_tokens=len(tokens),
        finished_by_eos=False, prompt_truncated=truncated,
    )  # fmt: skip
    return backend


def _first_difference(a: list, b: list) -> dict | None:
    """Where two runs' token-id replies first differ: the game and the token."""
    for game, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.text != y.text:
            xs, ys = x.text.split(), y.text.split()
            pairs = enumerate(zip(xs, ys, strict=False))  # a reply may be shorter
            at = next((i for i, (u, v) in pairs if u != v), min(len(xs), len(ys)))
            return {"game": game, "token": at, "lengths": [len(xs), len(ys)]}
    return None


def step_graphs(args: argparse.Namespace, rec: Recorder) -> None:
    """Greedy replies with the decoding step replayed from CUDA graphs against eager steps,
    on the same prompts and model, and eager again (run-to-run noise). On the CPU the
    same path runs, every side eager: the row says it does not apply."""
    from spag.generation.hf_backend import GRAPH_MIN_STEPS
    from spag.generation.settings import Sampling

    sizes, device = args.sizes, _device(args.cpu)
    # 32 games on a card: fp32's three prompt passes stay a few seconds.
    games = _prompts(sizes, min(32, max(sizes.batches)))
    ids = [f"g{i}" for i in range(len(games))]
    sampling = Sampling(max_new_tokens=sizes.max_new_tokens, temperature=0.0)
    applicable = device == "cuda" and sizes.max_new_tokens >= GRAPH_MIN_STEPS
    for dtype in ("float32",) if args.cpu else ("float32", "bfloat16"):
        backend = _token_replies(_backend(args, "big", dtype, len(games)))
        replies, captured = {}, {}
        for side, graphs in (("eager", False), ("graphs", True), ("eager_again", False)):
            backend.cuda_graphs = graphs  # read by each generate call's slots
            before = backend.stats["graphs_captured"]
            start = time.perf_counter()
            replies[side] = backend.generate(games, sampling, seed=0, game_ids=ids)
            _sync(device)
            captured[side] = (
                backend.stats["graphs_captured"] - before,
                time.perf_counter() - start,
            )
        eager, graphs, again = replies["eager"], replies["graphs"], replies["eager_again"]
        rec(
            "graphs_vs_eager",
            # On CUDA without a capture the comparison measured nothing: a failed row.
            ok=not applicable or captured["graphs"][0] > 0,
            applicable=applicable,
            note=None if applicable else "CUDA graphs are CUDA only: every side ran eager",
            model="big",
            dtype=dtype,
            mode="greedy",
            games=len(games),
            batch=len(games),
            max_new_tokens=sizes.max_new_tokens,
            graphs_captured=captured["graphs"][0],
            eager_graphs_captured=captured["eager"][0] + captured["eager_again"][0],
            tokens=[sum(r.num_tokens for r in replies[k]) for k in ("eager", "graphs")],
            equal_replies=sum(a.text == b.text for a, b in zip(eager, graphs, strict=True)),
            first_difference=_first_difference(eager, graphs),
            eager_repeat_equal=sum(a.text == b.text for a, b in zip(eager, again, strict=True)),
            eager_repeat_first_difference=_first_difference(eager, again),
            seconds={k: round(v[1], 3) for k, v in captured.items()},
        )
        del backend
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()


def step_invariance(args: argparse.Namespace, rec: Recorder) -> None:
    from spag.generation.settings import Sampling

    sizes = args.sizes
    games = _prompts(sizes, sizes.invariance_games)
    ids = [f"g{i}" for i in range(len(games))]
    dtypes = ("float32",) if args.cpu else ("float32", "bfloat16")
    for model in ("small", "big"):
        for dtype in dtypes:
            backend = _token_replies(_backend(args, model, dtype, 1))
            for mode in ("greedy", "seeded"):
                greedy = {"temperature": 0.0} if mode == "greedy" else {}
                sampling = Sampling(max_new_tokens=sizes.max_new_tokens, **greedy)
                replies = {}
                captured = backend.stats["graphs_captured"]
                for batch in (1, len(games)):
                    backend.batch_size = batch
                    replies[batch] = backend.generate(games, sampling, seed=7, game_ids=ids)
                one, many = replies[1], replies[len(games)]
                rec(
                    "batch_1_vs_n",
                    model=model,
                    dtype=dtype,
                    mode=mode,
                    games=len(games),
                    batch=len(games),
                    differing_replies=sum(a.text != b.text for a, b in zip(one, many, strict=True)),
                    differing_lengths=sum(
                        a.num_tokens != b.num_tokens for a, b in zip(one, many, strict=True)
                    ),
                    cuda_graphs=backend.cuda_graphs,
                    graphs_captured=backend.stats["graphs_captured"] - captured,
                )
            del backend


def _samples(path: Path, count: int, max_length: int, fill: float = 0.0) -> Path:
    """Game and SFT rows with queries up to about max_length tokens (at least ``fill`` of
    the longest query's words)."""
    import pyarrow as pa

    from spag.data.tables import SAMPLE_SCHEMA, write_parquet

    rng = random.Random(0)
    rows = []
    top = max(8, int(max_length * 0.6))
    for i in range(count):
        query = _words(1000 + i, rng.randint(max(4, int(fill * top)), top))
        target = _words(5000 + i, rng.randint(4, max(8, max_length // 16)))
        sft = i % 4 == 3
        rows.append(dict(
            type="sft" if sft else "game", role=None if sft else rng.choice(["attacker", "defender"]),
            episode_id=None if sft else f"ep{i}", turn=None if sft else i % 5, query=query,
            target=target, reward=1.0 if sft else rng.uniform(0.1, 0.6),
            weight=1.0 if sft else rng.uniform(0.5, 1.5),
        ))  # fmt: skip
    write_parquet(pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA), path)
    return path


def _features(model_dir: Path, samples: Path, max_length: int):
    from transformers import AutoTokenizer

    from spag.data.tables import read_parquet
    from spag.training.collate import build_features, check_sample_table, pad_token_id

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    table = check_sample_table(read_parquet(samples, "samples"), samples, need_ref=False)
    features, _ = build_features(
        table, tokenizer, max_length, samples, with_ref=False, prompt_format="raw"
    )
    return features, pad_token_id(tokenizer)


def _score_samples(args: argparse.Namespace, rec: Recorder, dtype: str) -> Path:
    """The scored file training reads (packed, as training's padding_free default)."""
    from spag.training.scoring import score_file

    sizes = args.sizes
    samples = args.work / "samples.parquet"
    if not samples.exists():
        _samples(samples, sizes.samples, sizes.max_length)
    scored = args.work / f"scored_{dtype}.parquet"
    start = time.perf_counter()
    score_file(args.work / "big", samples, scored, batch_size=sizes.score_batch,
               max_length=sizes.max_length, dtype=dtype, prompt_format="raw",
               device=_device(args.cpu), padding_free=True)  # fmt: skip
    rec("score_file", model="big", dtype=dtype, seconds=round(time.perf_counter() - start, 2))
    return scored


def step_scoring(args: argparse.Namespace, rec: Recorder) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from spag.training.packing import use_packed_attention
    from spag.training.scoring import load_model_and_tokenizer, score_features

    # Explicit kernel sets: the pipeline leaves cuDNN's out in CUDA processes
    # (spag.ops.device.use_unplanned_attention, e.g. through score_file below), so
    # torch's own choice must be asked for with cuDNN's included.
    no_cudnn = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with_cudnn = [SDPBackend.CUDNN_ATTENTION, *no_cudnn]

    def kernels_ctx(kernels: str):
        if kernels == "no_cudnn":
            return sdpa_kernel(no_cudnn)
        return _cudnn_allowed(sdpa_kernel(with_cudnn, set_priority=True))

    sizes, device = args.sizes, _device(args.cpu)
    samples = _samples(args.work / "samples.parquet", sizes.samples, sizes.max_length)
    features, pad = _features(args.work / "big", samples, sizes.max_length)
    tokens = sum(len(f["input_ids"]) for f in features)
    for dtype in ("float32", "bfloat16"):
        model, _ = load_model_and_tokenizer(args.work / "big", dtype=dtype, device=device)
        for packed in (False, True):
            if packed:
                use_packed_attention(model)
            score_features(
                model, features[: sizes.score_batch], pad, sizes.score_batch, device, packed
            )
            for kernels in ("cudnn_first", "no_cudnn"):
                ctx = kernels_ctx(kernels)
                base = _peak_reset(device)
                start = time.perf_counter()
                with ctx:
                    score_features(model, features, pad, sizes.score_batch, device, packed)
                _sync(device)
                seconds = time.perf_counter() - start
                rec("throughput", model="big", dtype=dtype, packed=packed, kernels=kernels,
                    samples=len(features), tokens=tokens, seconds=round(seconds, 3),
                    tokens_per_s=round(tokens / seconds),
                    peak_bytes=_peak_since(device, base))  # fmt: skip
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
        _score_samples(args, rec, dtype)

    # Agreement: the small model's sequence log-probs on this device against the CPU's.
    small = args.work / "small"
    agreement = _features(small, samples, sizes.max_length)
    feats, pad = agreement[0][: sizes.agreement_samples], agreement[1]
    reference, _ = load_model_and_tokenizer(small, dtype="float32")
    use_packed_attention(reference)
    cpu_lp = torch.tensor(score_features(reference, feats, pad, sizes.score_batch, "cpu", True))
    for dtype in ("float32", "bfloat16"):
        model, _ = load_model_and_tokenizer(small, dtype=dtype, device=device)
        use_packed_attention(model)
        lp = torch.tensor(score_features(model, feats, pad, sizes.score_batch, device, True))
        diff = (lp - cpu_lp).abs()
        rec("against_cpu_fp32", model="small", device=device, dtype=dtype, samples=len(feats),
            max_abs=float(diff.max()), mean_abs=float(diff.mean()),
            mean_abs_logprob=float(cpu_lp.abs().mean()),
            max_rel=float((diff / cpu_lp.abs()).max()))  # fmt: skip

    # Attention in bf16 over many distinct lengths (a packed batch's samples): with
    # torch's choice of kernel, and with cuDNN's left out (it plans each new shape).
    heads, kv_heads, length, dim, _ = sizes.attention_shape
    lengths = [length // 4 + 7 * i for i in range(64)]
    for how in ("cudnn_first", "no_cudnn"):
        for rnd in ("new_lengths", "same_lengths_again"):
            qs = [
                torch.randn(1, heads, n, dim, device=device, dtype=torch.bfloat16) for n in lengths
            ]
            ks = [
                torch.randn(1, kv_heads, n, dim, device=device, dtype=torch.bfloat16)
                for n in lengths
            ]
            ctx = kernels_ctx(how)
            _sync(device)
            start = time.perf_counter()
            with ctx:
                for q, k in zip(qs, ks, strict=True):
                    torch.nn.functional.scaled_dot_product_attention(
                        q, k, k, is_causal=True, enable_gqa=True
                    )
            _sync(device)
            rec("sdpa_many_lengths", how=how, round=rnd, calls=len(lengths),
                ms_per_call=round(1e3 * (time.perf_counter() - start) / len(lengths), 3))  # fmt: skip
        lengths = [n + 1 for n in lengths]  # the next kernel choice meets new shapes again

    # fp32 attention with grouped queries (the packed path's enable_gqa) against the
    # key/value heads expanded to the query heads.
    heads, kv_heads, length, dim, reps = sizes.attention_shape
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.randn(1, heads, length, dim, device=device, dtype=dtype)
        k = torch.randn(1, kv_heads, length, dim, device=device, dtype=dtype)
        v = torch.randn_like(k)
        for how in ("enable_gqa", "expanded"):

            def run(how=how, q=q, k=k, v=v):
                if how == "expanded":  # the expansion is part of the cost
                    group = heads // kv_heads
                    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=True, enable_gqa=how == "enable_gqa"
                )

            run()
            base = _peak_reset(device)
            start = time.perf_counter()
            for _ in range(reps):
                run()
            _sync(device)
            rec("gqa_attention", dtype=str(dtype).removeprefix("torch."), how=how,
                shape=[heads, kv_heads, length, dim],
                ms=round(1e3 * (time.perf_counter() - start) / reps, 3),
                peak_bytes=_peak_since(device, base))  # fmt: skip


LORA = ["--peft", "r=32", "lora_alpha=64"]
# Training's pairings: (name, spag train flags, the scores' dtype). On the CPU, bf16
# goes only through autocast (the Trainer refuses bf16 with DeepSpeed there).
PAIRINGS = (
    ("fp32", [], "float32"),
    ("zero3_bf16", ["--bf16", "--deepspeed", "zero3"], "bfloat16"),
    ("zero3_bf16_fp32_grads", ["--bf16", "--deepspeed", "zero3_fp32_grads"], "bfloat16"),
    ("autocast_bf16_fp32_scores", ["--bf16"], "float32"),
    ("zero3_bf16_fp32_scores", ["--bf16", "--deepspeed", "zero3"], "float32"),
    # LoRA as configs/paper-llama2-7b-lora.yaml sets it, on a bf16 frozen base: alone,
    # and under ZeRO-3, each with and without activation checkpointing.
    ("lora_bf16", ["--bf16", *LORA], "bfloat16"),
    ("lora_bf16_checkpointing", ["--bf16", "--activation-checkpointing", *LORA], "bfloat16"),
    ("lora_zero3_bf16", ["--bf16", "--deepspeed", "zero3", *LORA], "bfloat16"),
    (
        "lora_zero3_bf16_checkpointing",
        ["--bf16", "--deepspeed", "zero3", "--activation-checkpointing", *LORA],
        "bfloat16",
    ),
    # Last: its CPU Adam build (55 s in run 1) may meet the step's limit, cutting no other.
    ("zero3_offload_bf16", ["--bf16", "--deepspeed", "zero3_offload"], "bfloat16"),
)
CPU_PAIRINGS = (
    ("fp32", [], "float32"),
    ("zero3_fp32", ["--deepspeed", "zero3"], "float32"),
    ("autocast_bf16_fp32_scores", ["--bf16"], "float32"),
    ("lora_bf16", ["--bf16", "--peft", "r=4", "lora_alpha=8"], "bfloat16"),
)


def step_training(args: argparse.Namespace, rec: Recorder) -> None:
    sizes = args.sizes
    pairings = CPU_PAIRINGS if args.cpu else PAIRINGS
    if args.pairings:
        pairings = [p for p in pairings if p[0] in args.pairings]
    # A call without the scoring step (a fresh node) scores here what training reads.
    for scores in sorted({p[2] for p in pairings}):
        if not (args.work / f"scored_{scores}.parquet").exists():
            _score_samples(args, rec, scores)
    for name, flags, scores in pairings:
        cmd = [
            sys.executable, __file__, "train-one", "--out", str(args.out), "--work", str(args.work),
            *(["--cpu"] if args.cpu else []), "--name", name, "--scores", scores, "--",
            *_train_args(
                args, name, args.work / "big", args.work / f"scored_{scores}.parquet",
                sizes.max_length, sizes.train_batch, sizes.train_accum, sizes.train_steps, flags,
            ),
        ]  # fmt: skip
        start = time.perf_counter()
        try:
            rc = subprocess.run(cmd, check=False, timeout=args.step_limit).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        if rc != 0:
            rec(
                "pairing", name=name, ok=False, rc=rc, seconds=round(time.perf_counter() - start, 1)
            )


def _train_args(
    args, name: str, model: Path, samples: Path, max_length: int, batch: int, accum: int,
    steps: int, flags: list[str],
) -> list[str]:  # fmt: skip
    """``spag train``'s arguments for one pairing (its files under ``WORK/train_NAME``)."""
    folder = args.work / f"train_{name}"
    return [
        "train", "--model", str(model), "--samples", str(samples),
        "--output", str(folder / "model"), "--checkpoint-dir", str(folder / "ckpt"),
        "--loss-log", str(folder / "loss.tsv"), "--max-length", str(max_length),
        "--prompt-format", "raw", "--objective", "offline_po",
        "--per-device-batch-size", str(batch), "--gradient-accumulation-steps", str(accum),
        "--max-steps", str(steps), "--learning-rate", "1e-6",
        "--warmup-ratio", "0", "--save-steps", "100000", "--device", _device(args.cpu),
        *flags,
    ]  # fmt: skip


def flop_share(
    parameters: int, tokens: float, seconds: float, *, passes: str = "forward",
    checkpointing: bool = False, peak: float = BF16_PEAK_FLOPS,
) -> float:  # fmt: skip
    """The share of the card's bf16 rate that ``tokens`` in ``seconds`` use, counting
    2N FLOPs a token for a forward pass (``forward``: generation, scoring), 6N for full
    training (``full``: the forward and the backward's two products, for the inputs and
    the weights), 4N for LoRA (``lora``: a frozen base has no weight gradients), and 2N
    more with activation checkpointing (the forward run again). N is ``parameters``
    (embeddings included); attention's own products are not counted."""
    per_token = {"forward": 2, "lora": 4, "full": 6}[passes] + (2 if checkpointing else 0)
    return per_token * parameters * tokens / seconds / peak


class _StepClock:
    """Optimizer-step wall times (synchronised) and the tokens of each step, as a Trainer
    callback; ``report(step, seconds, tokens)`` is told of each step as it ends."""

    def __init__(self, device: str, report=None) -> None:
        self.device, self.times, self._start = device, [], 0.0
        self.tokens: list[float] = []
        self.pending: list = []  # the micro-batches' token counts (tensors) of this step
        self.report = report

    def on_step_begin(self, *a, **k):
        _sync(self.device)
        self._start = time.perf_counter()

    def on_step_end(self, *a, **k):
        _sync(self.device)
        self.times.append(time.perf_counter() - self._start)
        self.tokens.append(float(sum(float(t) for t in self.pending)))
        self.pending = []
        if self.report:
            self.report(len(self.times), self.times[-1], self.tokens[-1])


class _StepProfile:
    """torch's profiler over one optimizer step (``step``, counted from 1), as a Trainer
    callback: the top kernels by device time to ``OUT/profile_<name>.txt`` and the trace
    to ``OUT/trace_<name>.json.gz`` (chrome://tracing, Perfetto)."""

    def __init__(self, out: Path, name: str, step: int, cuda: bool) -> None:
        self.out, self.name, self.step, self.cuda = out, name, step, cuda
        self.seen, self.prof = 0, None

    def on_step_begin(self, *a, **k):
        self.seen += 1
        if self.seen != self.step:
            return
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()

    def on_step_end(self, *a, **k):
        if self.prof is None:
            return
        import gzip

        prof, self.prof = self.prof, None
        prof.__exit__(None, None, None)
        key = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=key, row_limit=30)
        (self.out / f"profile_{self.name}.txt").write_text(table + "\n")
        # The raw trace outside OUT: a step killed here leaves no stray file to bring back.
        trace = Path(tempfile.mkdtemp()) / f"trace_{self.name}.json"
        prof.export_chrome_trace(str(trace))
        with (
            trace.open("rb") as src,
            gzip.open(self.out / f"trace_{self.name}.json.gz", "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        shutil.rmtree(trace.parent)


def _host_peak_bytes() -> int:
    """This process's peak resident memory (Linux reports kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train_one(
    args: argparse.Namespace, rec: Recorder, spag_args: list[str], *, save: bool = True,
    step_rows: bool = False, profile_step: int | None = None,
) -> None:  # fmt: skip
    """``spag train`` in this process, with a step clock and the peak memory read after;
    without ``save`` the trained model is not written (a 7B model's write and LoRA's
    merge on the CPU would take much of a step's time), with ``step_rows`` each step's
    time is recorded as it ends, with ``profile_step`` that step is profiled
    (:class:`_StepProfile`; its time is then the profiler's too)."""
    import torch
    from transformers import TrainerCallback

    import spag.training.run as run_module
    import spag.training.trainer as trainer_module
    from spag.cli import main

    device = _device(args.cpu)

    def report(step: int, seconds: float, tokens: float) -> None:
        rec("step", name=args.name, optimizer_step=step, seconds=round(seconds, 3),
            tokens=int(tokens))  # fmt: skip

    clock = type("StepClock", (_StepClock, TrainerCallback), {})(
        device, report if step_rows else None
    )
    original = trainer_module.SpagTrainer.__init__
    accumulate = trainer_module.SpagTrainer._accumulate

    profiler = None
    if profile_step:
        profiler = type("StepProfile", (_StepProfile, TrainerCallback), {})(
            Path(args.out), args.name, profile_step, device == "cuda"
        )

    def with_clock(self, *a, **k):
        original(self, *a, **k)
        self.add_callback(clock)
        if profiler is not None:
            self.add_callback(profiler)

    def counting(self, stats):
        clock.pending.append(stats["tokens"].detach())  # read once the step has ended
        accumulate(self, stats)

    trainer_module.SpagTrainer.__init__ = with_clock
    trainer_module.SpagTrainer._accumulate = counting
    if not save:

        def loss_log_only(trainer, cfg, work_log, is_main, weights_dtype):
            shutil.copyfile(work_log, cfg.loss_log)

        run_module.save_final = loss_log_only
    base = _peak_reset(device)
    start = time.perf_counter()
    rc = main(spag_args)
    seconds = time.perf_counter() - start
    if rc != 0:
        rec("pairing", name=args.name, ok=False, rc=rc, process_seconds=round(seconds, 1))
        return
    out = Path(spag_args[spag_args.index("--loss-log") + 1])
    with out.open() as fh:
        first = next(csv.DictReader(fh, delimiter="\t"))
    estimate = _memory_estimate(spag_args)
    # Throughput over the steps after the first (its kernels' first calls, its allocations).
    # A profiled step (the last) is left out: the profiler slows it.
    end = -1 if profile_step and len(clock.times) >= profile_step > 1 else None
    later = slice(1 if len(clock.times) > 1 else 0, end)
    times, tokens = sum(clock.times[later]), sum(clock.tokens[later])
    parameters = _parameters(Path(spag_args[spag_args.index("--model") + 1]))
    passes = "lora" if "--peft" in spag_args else "full"
    checkpointing = "--activation-checkpointing" in spag_args
    share = flop_share(parameters, tokens, times, passes=passes, checkpointing=checkpointing)
    rec(
        "pairing",
        name=args.name,
        scores=args.scores,
        rc=rc,
        process_seconds=round(seconds, 1),
        step_seconds=[round(t, 3) for t in clock.times],
        step_tokens=[int(t) for t in clock.tokens],
        tokens_per_s=round(tokens / times, 1),
        parameters=parameters,
        flops_counted={"passes": passes, "checkpointing": checkpointing},
        flop_share=float(f"{share:.4g}"),
        saved=save,
        peak_bytes=_peak_since(device, base),
        peak_reserved_bytes=torch.cuda.max_memory_reserved() if device == "cuda" else None,
        peak_host_bytes=_host_peak_bytes(),
        first_step={
            k: first.get(k) for k in ("loss", "kl", "ratio_mean", "ratio_min", "ratio_max")
        },
        estimate_bytes=round(estimate.total_gib * 2**30),
        estimate_host_bytes=round(estimate.host_gib * 2**30),
        estimate_parts_gib={
            k: round(v, 3)
            for k, v in asdict(estimate).items()
            if k != "host_gib" and k.endswith("_gib")
        },
    )


def _memory_estimate(spag_args: list[str]):
    """``spag training-memory``'s estimate for this job (spag.ops.capacity), to set
    beside the peak it measured."""
    from spag.ops.capacity import ZeroLayout, model_config, training_memory
    from spag.training.distributed import resolve_deepspeed

    def value(flag: str) -> str | None:
        return spag_args[spag_args.index(flag) + 1] if flag in spag_args else None

    ds = resolve_deepspeed(value("--deepspeed"))
    peft = {}
    if "--peft" in spag_args:
        for word in spag_args[spag_args.index("--peft") + 1 :]:
            if word.startswith("--"):
                break
            key, _, v = word.partition("=")
            peft[key] = v
    config, parameters = model_config(value("--model"))
    return training_memory(
        config,
        per_device_batch_size=int(value("--per-device-batch-size")),
        max_length=int(value("--max-length")),
        bf16="--bf16" in spag_args,
        activation_checkpointing="--activation-checkpointing" in spag_args,
        zero=ZeroLayout.from_config(json.loads(Path(ds).read_text()) if ds else None),
        lora_rank=int(peft["r"]) if peft else None,
        parameters=parameters,
    )


def step_selfplay(args: argparse.Namespace, rec: Recorder) -> None:
    sizes = args.sizes
    before = os.environ.get("GFC_BEFORE")
    lengths = sorted(str(p) for p in (REPO / "perf/results/smollm2/seed42/games").glob("*.parquet"))
    for batch, games in ((max(sizes.batches), max(sizes.batches)), (1, sizes.batch1_games)):
        # Its tables stay in WORK (OUT brings back 8 files a call): rows to results.jsonl,
        # the Markdown table to the log.
        out = args.work / f"selfplay_decoding_batch{batch}.md"
        cmd = [
            sys.executable, str(REPO / "perf/bench_selfplay_decoding.py"),
            "--model", str(args.work / "big"), "--device", _device(args.cpu),
            "--games", str(games), "--batch-size", str(batch),
            "--max-new-tokens", str(sizes.max_new_tokens), "--max-turns", "2",
            "--repeats", "1", "--threads", str(os.cpu_count() or 1),
            "--output", str(out), "--stop-lengths", *lengths,
        ]  # fmt: skip
        if before:
            cmd[2:2] = ["--before", before]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            rec("selfplay", batch=batch, ok=False, error=proc.stderr[-2000:])
            continue
        print(out.read_text(), flush=True)
        runs = json.loads(out.with_suffix(".json").read_text())
        for side, results in runs.items():
            for r in results:
                rec("selfplay", batch=batch, side=side, **r)
        rec("selfplay", batch=batch, seconds=round(time.perf_counter() - start, 1))


# ------------------------------------------------------------------ shape7b


def _stop_lengths() -> list[str]:
    """The committed SmolLM2 games whose mean message length stops random-weight replies."""
    return sorted(str(p) for p in (REPO / "perf/results/smollm2/seed42/games").glob("*.parquet"))


def step_shape7b_build(args: argparse.Namespace, rec: Recorder) -> None:
    """LLaMA-2-7B's configuration with random weights, built on the device in bf16 (no
    float32 copy, no initialisation on the CPU) and saved as a model folder with the
    ``big`` model's tokenizer and generation config."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from spag.data.tables import atomic_dir
    from spag.training.output import copy_tokenizer_files

    shape, device = args.sizes.shape7b, _device(args.cpu)
    folder = args.work / "shape7b"
    if folder.is_dir():
        rec("built", model="shape7b", cached=True, parameters=_parameters(folder))
        return
    tokenizer = AutoTokenizer.from_pretrained(args.work / "big")
    config = LlamaConfig(
        **shape.model,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    _sync(device)
    start = time.perf_counter()
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    _sync(device)
    init_seconds = time.perf_counter() - start
    with atomic_dir(folder) as tmp:
        start = time.perf_counter()
        model.save_pretrained(tmp)
        save_seconds = time.perf_counter() - start
        copy_tokenizer_files(args.work / "big", tmp)
    files = list(folder.glob("*.safetensors"))
    rec("built", model="shape7b", cached=False, device=device, dtype="bfloat16",
        init_seconds=round(init_seconds, 2), save_seconds=round(save_seconds, 2),
        parameters=_parameters(folder), files=len(files),
        bytes=sum(f.stat().st_size for f in files), **shape.model)  # fmt: skip


def step_shape7b_cpu_adam(args: argparse.Namespace, rec: Recorder) -> None:
    """DeepSpeed's CPU Adam (the offload pairing's optimizer) built in the node's folder:
    DeepSpeed compiles it with ninja and the C++ compiler the first time
    (``spag.training.extensions``); where it is built already, the offload pairing loads
    it (or builds it again if it must). The sh runs this beside the other steps."""
    if args.cpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from torch.utils.cpp_extension import get_cxx_compiler

    from spag.training.extensions import (
        CPU_ADAM,
        build_ops,
        build_tools_problem,
        use_node_extensions_dir,
    )

    root = use_node_extensions_dir()
    cached = sorted((root / "cpu_adam").glob("*.so"))
    if cached:
        rec("cpu_adam", cached=True, seconds=None, library=str(cached[0]), cpus=os.cpu_count())
        return
    tools = {"problem": build_tools_problem(), "cxx": get_cxx_compiler()}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        tools["ninja"] = subprocess.run(
            ["ninja", "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    start = time.perf_counter()
    built = build_ops([CPU_ADAM], setting="shape7b")
    rec("cpu_adam", cached=False, seconds=round(time.perf_counter() - start, 1),
        library=built[CPU_ADAM], cpus=os.cpu_count(), **tools)  # fmt: skip


def step_shape7b_generate(args: argparse.Namespace, rec: Recorder) -> None:
    """Taboo self-play of the 7B shape (perf/bench_selfplay_decoding.py's worker, in this
    process) with as many slots as the backend's sizing (``RowMemory``) fits, at most
    ``games``: each generate call's slots recorded as chosen, then the shard's figures.
    Decoding steps are captured as CUDA graphs as in a shard (the worker's stop hook stays
    capturable; its step timer times each replayed or eager step, captures apart)."""
    sys.path.insert(0, str(REPO / "perf"))
    from bench_selfplay_decoding import worker

    from spag.generation.hf_backend import HFBackend

    shape, device = args.sizes.shape7b, _device(args.cpu)
    sizing: list[dict] = []
    batch_rows, draw = HFBackend.batch_rows, HFBackend.draw

    def sized(self, prompt_len, max_new_tokens, shared_len=0):
        rows, pass_rows = batch_rows(self, prompt_len, max_new_tokens, shared_len)
        memory = self._memory
        fit, _ = memory.batch_rows(prompt_len, max_new_tokens, self.reuse_kv,
                                   self.batch_memory_bytes, 10**9, shared_len=shared_len)  # fmt: skip
        sizing.append(dict(
            prompt_len=prompt_len, shared_len=shared_len, rows=rows, pass_rows=pass_rows,
            fit_rows=fit, reuse_kv=self.reuse_kv, batch_memory_bytes=self.batch_memory_bytes,
            estimate_bytes=rows * memory.slot_bytes(prompt_len - shared_len, max_new_tokens)
            + pass_rows * memory.pass_bytes(prompt_len, self.reuse_kv),
        ))  # fmt: skip
        return rows, pass_rows

    def timed(self, prompts, sampling, seeds, game_ids):
        captured = self.stats["graphs_captured"]
        _sync(device)
        start = time.perf_counter()
        replies = draw(self, prompts, sampling, seeds, game_ids)
        _sync(device)
        seconds = time.perf_counter() - start
        tokens = sum(r.num_tokens for r in replies)
        rec("call", prompts=len(prompts), seconds=round(seconds, 3), new_tokens=tokens,
            tokens_per_s=round(tokens / seconds, 1), sizing=sizing[-1] if sizing else None,
            cuda_graphs=self.cuda_graphs,
            graphs_captured=self.stats["graphs_captured"] - captured)  # fmt: skip
        return replies

    HFBackend.batch_rows, HFBackend.draw = sized, timed
    base = _peak_reset(device)
    run = worker(argparse.Namespace(
        model=str(args.work / "shape7b"), device=device, games=shape.games,
        batch_size=shape.games, max_new_tokens=shape.max_new_tokens, max_turns=shape.max_turns,
        temperature=1.2, seed=1, threads=os.cpu_count() or 1, stop_lengths=_stop_lengths(),
    ))  # fmt: skip
    peak = _peak_since(device, base)
    run.pop("histories")
    parameters = _parameters(args.work / "shape7b")
    computed = run["generated_tokens"] + run["prompt_tokens_computed"]
    rec(
        "selfplay",
        batch_size=shape.games,
        batch_chosen=max((s["rows"] for s in sizing), default=None),
        fit_rows=max((s["fit_rows"] for s in sizing), default=None),
        max_new_tokens=shape.max_new_tokens,
        max_turns=shape.max_turns,
        flop_share=float(f"{flop_share(parameters, computed, run['wall_s']):.4g}"),
        peak_bytes=peak,
        weights_bytes=2 * parameters,
        estimate_bytes=max((s["estimate_bytes"] for s in sizing), default=None),
        **run,
    )


def step_shape7b_score(args: argparse.Namespace, rec: Recorder) -> None:
    """Reference scoring of samples up to max_length tokens, packed (padding_free), in
    training's precision (``spag score-ref``'s ``score_file``), with its model load and
    its forward passes timed apart; it writes the file the training sub-steps read."""
    import spag.training.scoring as scoring

    shape, device = args.sizes.shape7b, _device(args.cpu)
    dtype = "float32" if args.cpu else "bfloat16"
    samples = _samples(args.work / "samples_shape7b.parquet", shape.samples, shape.max_length, 0.8)
    parts: dict = {}
    load, score = scoring.load_model_and_tokenizer, scoring.score_features

    def timed_load(*a, **k):
        start = time.perf_counter()
        out = load(*a, **k)
        _sync(device)
        parts["load_seconds"] = round(time.perf_counter() - start, 2)
        return out

    def timed_score(model, features, *a, **k):
        lengths = [len(f["input_ids"]) for f in features]
        _sync(device)
        start = time.perf_counter()
        out = score(model, features, *a, **k)
        _sync(device)
        parts.update(score_seconds=round(time.perf_counter() - start, 3), samples=len(lengths),
                     tokens=sum(lengths), longest=max(lengths), shortest=min(lengths))  # fmt: skip
        return out

    scoring.load_model_and_tokenizer, scoring.score_features = timed_load, timed_score
    base = _peak_reset(device)
    start = time.perf_counter()
    scoring.score_file(args.work / "shape7b", samples, args.work / "scored_shape7b.parquet",
                       batch_size=shape.score_batch, max_length=shape.max_length, dtype=dtype,
                       prompt_format="raw", device=device, padding_free=True)  # fmt: skip
    seconds = time.perf_counter() - start
    parameters = _parameters(args.work / "shape7b")
    rec("score_file", dtype=dtype, packed=True, batch_size=shape.score_batch,
        max_length=shape.max_length, seconds=round(seconds, 2), **parts,
        tokens_per_s=round(parts["tokens"] / parts["score_seconds"]),
        flop_share=float(f"{flop_share(parameters, parts['tokens'], parts['score_seconds']):.4g}"),
        peak_bytes=_peak_since(device, base))  # fmt: skip


def _shape7b_train(args: argparse.Namespace, rec: Recorder, name: str, flags: list[str]) -> None:
    """One training pairing of the 7B shape at the paper's micro-batch, with activation
    checkpointing, on the scores of ``shape7b_score``; skipped where ``spag
    training-memory``'s estimate is above the card (or the states alone above the host's
    memory, offloaded), recorded as ``plan`` first so that a killed run keeps it."""
    shape = args.sizes.shape7b
    scores = "float32" if args.cpu else "bfloat16"
    steps = shape.offload_steps if name == "offload" else shape.train_steps
    # LoRA's last step is profiled, one step more, left out of the throughput.
    profile = steps + 1 if name == "lora" else None
    precision = [] if args.cpu else ["--bf16"]  # bf16 weights: DeepSpeed's or LoRA's
    spag_args = _train_args(
        args, f"shape7b_{name}", args.work / "shape7b", args.work / "scored_shape7b.parquet",
        shape.max_length, shape.train_batch, shape.train_accum, profile or steps,
        [*precision, "--activation-checkpointing", *flags],
    )  # fmt: skip
    estimate = _memory_estimate(spag_args)
    card = host = None
    if not args.cpu:
        import torch

        card = torch.cuda.get_device_properties(0).total_memory
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                host = int(line.split()[1]) * 1024
    need, need_host = estimate.total_gib * 2**30, estimate.host_gib * 2**30
    plan = dict(name=name, flags=flags, estimate_bytes=round(need),
                estimate_host_bytes=round(need_host), card_bytes=card,
                host_available_bytes=host)  # fmt: skip
    rec("plan", **plan)
    # The host estimate holds DeepSpeed's 1.5x of buffers: the states alone are 1/1.5.
    if (card and need > card) or (host and need_host / 1.5 > host):
        rec("skipped", **plan, reason="the estimate is above the card's or the host's memory")
        return
    one = argparse.Namespace(**{**vars(args), "name": name, "scores": scores})
    train_one(one, rec, spag_args, save=False, step_rows=True, profile_step=profile)


def step_shape7b_lora(args: argparse.Namespace, rec: Recorder) -> None:
    """LoRA on the bf16 base, no DeepSpeed (configs/paper-llama2-7b-lora.yaml)."""
    _shape7b_train(args, rec, "lora", ["--peft", *args.sizes.shape7b.lora])


def step_shape7b_full(args: argparse.Namespace, rec: Recorder) -> None:
    """Full fine-tuning in bf16 under ZeRO-3 without offload on one GPU."""
    _shape7b_train(args, rec, "full", ["--deepspeed", "zero3"])


def step_shape7b_offload(args: argparse.Namespace, rec: Recorder) -> None:
    """The paper's ZeRO-3 with optimizer and parameters offloaded to the CPU (CPU Adam)."""
    _shape7b_train(args, rec, "offload", ["--deepspeed", "zero3_offload"])


STEPS = {
    "env": step_env,
    "models": step_models,
    "generation": step_generation,
    "graphs": step_graphs,
    "selfplay": step_selfplay,
    "invariance": step_invariance,
    "scoring": step_scoring,
    "training": step_training,
    "shape7b_build": step_shape7b_build,
    "shape7b_cpu_adam": step_shape7b_cpu_adam,
    "shape7b_generate": step_shape7b_generate,
    "shape7b_score": step_shape7b_score,
    "shape7b_lora": step_shape7b_lora,
    "shape7b_full": step_shape7b_full,
    "shape7b_offload": step_shape7b_offload,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spag_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, spag_args = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=[*STEPS, "train-one"])
    p.add_argument("--out", required=True, type=Path, help="results folder")
    p.add_argument("--work", required=True, type=Path, help="models and samples")
    p.add_argument("--cpu", action="store_true", help="toy sizes on the CPU")
    p.add_argument("--pairings", nargs="*", default=None, help="training pairings to run")
    p.add_argument("--step-limit", type=int, default=600, help="seconds per training pairing")
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--scores", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sizes = CPU if args.cpu else GPU
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "workflow_scripts"))
    if args.step == "train-one":
        train_one(args, Recorder(args.out, "training"), spag_args)
        return 0
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: run with --cpu for the toy sizes", file=sys.stderr)
            return 2
    STEPS[args.step](args, Recorder(args.out, args.step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
