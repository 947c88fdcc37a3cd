"""The ``hf`` backend: batched transformers generation with a KV cache (CPU or one GPU).

All prompts of a call are encoded (one BOS, left truncation), sorted by length
and decoded in sub-batches of ``batch_size``. Per sub-batch the prompt prefix
that all rows share (the game rules) is computed once, the KV cache is
preallocated, and a row stops at EOS (no earlier than ``MIN_NEW_TOKENS``).
Sub-batches are also cut so that one fits the batch memory (static cache and
prompt pass), so a large ``batch_size`` never runs out of memory. Each game
samples from its own ``torch.Generator`` seeded from the call's seed and its
episode id: its draws do not depend on the other games of the call, and the
global RNG is untouched. Its logits are computed in a sub-batch that other games
shape and pad: the same up to rounding in float32 on CPU, not on CUDA in bf16
(``spag.generation.base.Backend.generate`` says what a resumed shard can promise).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from spag.errors import SpagInputError
from spag.generation.base import (
    MIN_NEW_TOKENS,
    Backend,
    Reply,
    context_budget,
    stop_token_ids,
)
from spag.generation.settings import DTYPES, Sampling, SelfplaySettings
from spag.models.rendering import PromptRenderer
from spag.ops import DEVICES, select_device

log = logging.getLogger(__name__)


class HFBackend(Backend):
    """Batched ``model.generate`` over left-padded sub-batches."""

    name = "hf"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        prompt_format: str,
        trust_remote_code: bool,
        batch_size: int | None = None,
        max_length: int | None = None,
        dtype: str = SelfplaySettings.dtype,
        device: str | None = None,
        reuse_kv: bool = True,
        reuse_kv_bytes: int = int(SelfplaySettings.kv_reuse_gib * 1024**3),
        batch_memory_bytes: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise SpagInputError(f"unknown --dtype '{dtype}' (choose from {', '.join(DTYPES)})")
        self.model_dir = Path(model_dir)
        self.batch_size = int(batch_size or SelfplaySettings.batch_size)
        if self.batch_size < 1:
            raise SpagInputError(f"--batch-size must be at least 1, got {self.batch_size}")
        self.max_length = context_budget(model_dir, max_length)
        # Per game (cache key): the prompt ids of its last call and their keys/values,
        # so that the next prompt of the game recomputes only what changed.
        self.reuse_kv = bool(reuse_kv) and reuse_kv_bytes > 0
        self._kv_store: dict[str, tuple[list[int], list[tuple]]] = {}
        # Kept keys/values stay under this many bytes (a large model keeps few or none).
        self.reuse_kv_bytes = int(reuse_kv_bytes)
        self._kv_stored_bytes = 0
        if device is None or device in DEVICES:
            device = select_device(device, f"hf backend ({model_dir})")
        self.device = torch.device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                model_dir, trust_remote_code=trust_remote_code
            )
        except (OSError, ValueError) as exc:
            raise SpagInputError(f"{model_dir}: cannot load the tokenizer: {exc}") from exc
        if dtype == "auto":
            # bf16 on CPU is slow and changes the numbers; keep float32 there.
            torch_dtype = "auto" if self.device.type == "cuda" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        # On a GPU the weights load straight onto it (device_map), not through host memory.
        on_gpu = self.device.type == "cuda"
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir,
            dtype=torch_dtype,
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
            # A torch.device, not "cuda": transformers would take that as cuda:LOCAL_RANK.
            device_map=self.device if on_gpu else None,
        )
        if not on_gpu:
            self.model.to(self.device)
        self.model.eval()
        self.encoder = PromptRenderer(self.tokenizer, prompt_format, source=str(model_dir))
        self.eos_ids = stop_token_ids(self.encoder, model_dir)
        # No pad token (Llama): pad with EOS, never grow the vocabulary.
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]
        # What one sub-batch may take (static KV cache + prompt pass); the batch is
        # split so that it fits, whatever --batch-size says.
        if batch_memory_bytes is not None and batch_memory_bytes <= 0:
            raise SpagInputError(f"--batch-memory-gib must be positive, got {batch_memory_bytes}")
        self._batch_memory_bytes = int(batch_memory_bytes) if batch_memory_bytes else None
        config = self.model.config.get_text_config()
        _, self._kv_heads, self._head_dim = attention_heads(config)
        self._memory = RowMemory.of(
            config,
            torch.finfo(self.model.dtype).bits // 8,
            fused_attention=self.device.type == "cuda"
            and getattr(config, "_attn_implementation", None) in FUSED_ATTENTION,
        )
        # Work done, for the job's log: prompt tokens, those run through the model
        # (the rest came from kept keys/values), and rows x decoding steps.
        self.stats = {"prompt_tokens": 0, "prompt_tokens_computed": 0, "decode_row_steps": 0}

    def draw(
        self, prompts: list[str], sampling: Sampling, seeds: list[int], game_ids: list[str] | None
    ) -> list[Reply]:
        import torch

        max_new_tokens = sampling.max_new_tokens
        encoded = self.encoder.encode(prompts, self.max_length - max_new_tokens)
        sample = sampling.samples
        # Longest first: similar lengths share a sub-batch, so little padding.
        order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i][0]), i))
        replies: list[Reply | None] = [None] * len(encoded)
        with torch.inference_mode():
            for idx in self._sub_batches(order, [len(ids) for ids, _ in encoded], max_new_tokens):
                keys = [game_ids[i] for i in idx] if game_ids and self.reuse_kv else None
                # One random stream per game: its draws do not depend on its neighbours.
                generators = [self._generator(seeds[i]) for i in idx] if sample else None
                rows = self._decode(
                    [encoded[i][0] for i in idx],
                    keys,
                    sampling=sampling,
                    generators=generators,
                )
                for i, tokens in zip(idx, rows, strict=True):
                    replies[i] = self._reply(tokens, encoded[i][1])
        return replies  # type: ignore[return-value]

    def _generator(self, seed: int):
        import torch

        generator = torch.Generator(device=self.device)
        generator.manual_seed(int(seed))
        return generator

    @property
    def batch_memory_bytes(self) -> int:
        """The configured batch memory, or else what is free when first asked: by then
        every model of the job (an opponent's too) is loaded."""
        if self._batch_memory_bytes is None:
            kept = self.reuse_kv_bytes if self.reuse_kv else 0
            self._batch_memory_bytes = default_batch_memory(self.device, kept)
        return self._batch_memory_bytes

    def row_bytes(self, prompt_len: int, max_new_tokens: int) -> int:
        """One row's memory in a sub-batch whose longest prompt has ``prompt_len``
        tokens (:class:`RowMemory`)."""
        return self._memory.row_bytes(prompt_len, max_new_tokens, self.reuse_kv)

    def _sub_batches(self, order: list[int], lengths: list[int], max_new_tokens: int):
        """Split ``order`` (longest prompt first) into sub-batches of at most
        ``batch_size`` rows that fit ``batch_memory_bytes``."""
        start = 0
        while start < len(order):
            per_row = self.row_bytes(lengths[order[start]], max_new_tokens)
            fit = self.batch_memory_bytes // per_row
            if fit < 1:
                raise SpagInputError(
                    f"one game needs {per_row / 2**30:.2f} GiB for a {lengths[order[start]]}-token "
                    f"prompt and {max_new_tokens} new tokens, more than the batch memory "
                    f"({self.batch_memory_bytes / 2**30:.2f} GiB, selfplay.batch_memory_gib); "
                    "raise it or lower selfplay.max_length"
                )
            size = min(self.batch_size, fit)
            yield order[start : start + size]
            start += size

    def release(self, game_ids: list[str]) -> None:
        """Forget the stored keys/values of finished games."""
        for key in game_ids:
            entry = self._kv_store.pop(key, None)
            if entry is not None:
                self._kv_stored_bytes -= _nbytes(entry[1])

    def _prefix_kv(self, prefix: list[int]) -> list[tuple]:
        """Keys and values (heads, tokens, dim) of a prompt prefix, computed at batch size 1."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return [(layer.keys[0], layer.values[0]) for layer in cache.layers]

    def _decode(
        self,
        seqs: list[list[int]],
        keys: list[str] | None,
        *,
        sampling: Sampling,
        generators,
    ) -> list[list[int]]:
        """Generate for one sub-batch; return each row's new tokens (EOS, then padding).

        Layout per row: ``[pad][known part][pad][own part][new tokens]``. The known
        part is a prompt prefix whose keys/values are already there: the same game's
        previous prompt (history is append-only) or else the prefix that all rows
        share (the game rules, computed once). Only the own part is run through the
        model before decoding. Padding is masked out and positions count real
        tokens only, so each row sees exactly its prompt. The cache is preallocated
        (static): no re-copying at every step.
        """
        import torch
        from transformers import StaticCache

        dev = self.device
        batch = len(seqs)
        max_new_tokens = sampling.max_new_tokens
        first = seqs[0]
        shortest = min(len(s) for s in seqs)
        # The longest common prefix, leaving at least one own token per row.
        shared_len = 0
        while shared_len < shortest - 1 and all(s[shared_len] == first[shared_len] for s in seqs):
            shared_len += 1
        known: list[tuple[int, list[tuple] | None]] = []
        for row, s in enumerate(seqs):
            stored = self._kv_store.get(keys[row]) if keys else None
            n = 0
            if stored is not None:
                old = stored[0]
                limit = min(len(old), len(s) - 1)
                while n < limit and old[n] == s[n]:
                    n += 1
            known.append((n, stored[1]) if n > shared_len else (shared_len, None))
        shared = (
            self._prefix_kv(first[:shared_len])
            if any(kv is None and n for n, kv in known)
            else None
        )
        known_w = max(n for n, _ in known)
        own_w = max(len(s) - n for s, (n, _) in zip(seqs, known, strict=True))
        width = known_w + own_w
        total = width + max_new_tokens
        ids = torch.full((batch, own_w), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, total), dtype=torch.long)
        positions = torch.zeros((batch, own_w), dtype=torch.long)
        for row, (s, (n, _)) in enumerate(zip(seqs, known, strict=True)):
            own = s[n:]
            ids[row, own_w - len(own) :] = torch.tensor(own, dtype=torch.long)
            positions[row, own_w - len(own) :] = torch.arange(n, len(s))
            mask[row, known_w - n : known_w] = 1
            mask[row, width - len(own) : width] = 1
        ids, mask, positions = ids.to(dev), mask.to(dev), positions.to(dev)
        self.stats["prompt_tokens"] += sum(len(s) for s in seqs)
        self.stats["prompt_tokens_computed"] += sum(
            len(s) - n for s, (n, _) in zip(seqs, known, strict=True)
        )

        cache = StaticCache(config=self.model.config, max_cache_len=total)
        if known_w:
            # Each row's known part copied once into a left-padded block (no pad/stack
            # copies). The cache copies the block, so one block serves every layer: each
            # layer writes the same row spans, and the padding stays zero.
            shape = (batch, self._kv_heads, known_w, self._head_dim)
            block_k = torch.zeros(shape, dtype=self.model.dtype, device=dev)
            block_v = torch.zeros(shape, dtype=self.model.dtype, device=dev)
            for layer_idx, layer in enumerate(cache.layers):
                for row, (n, kv) in enumerate(known):
                    k, v = (kv if kv is not None else shared)[layer_idx]  # type: ignore[index]
                    block_k[row, :, known_w - n :] = k[:, :n]
                    block_v[row, :, known_w - n :] = v[:, :n]
                layer.update(block_k, block_v)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        if keys:
            self.release(keys)
            per_token = _nbytes(
                [(layer.keys[0, :, :1], layer.values[0, :, :1]) for layer in cache.layers]
            )
            for row, (s, (n, _)) in enumerate(zip(seqs, known, strict=True)):
                own = len(s) - n
                if self._kv_stored_bytes + per_token * len(s) > self.reuse_kv_bytes:
                    continue
                self._kv_stored_bytes += per_token * len(s)
                self._kv_store[keys[row]] = (
                    list(s),
                    [
                        (
                            torch.cat(
                                (
                                    layer.keys[row, :, known_w - n : known_w],
                                    layer.keys[row, :, width - own : width],
                                ),
                                dim=1,
                            ),
                            torch.cat(
                                (
                                    layer.values[row, :, known_w - n : known_w],
                                    layer.values[row, :, width - own : width],
                                ),
                                dim=1,
                            ),
                        )
                        for layer in cache.layers
                    ],
                )
        next_pos = positions[:, -1] + 1
        eos = torch.tensor(self.eos_ids, device=dev)
        pad = torch.full((batch,), self.pad_id, dtype=torch.long, device=dev)
        done = torch.zeros(batch, dtype=torch.bool, device=dev)
        out = torch.full((batch, max_new_tokens), self.pad_id, dtype=torch.long, device=dev)
        noise = self._noise(sampling, generators, batch, max_new_tokens, logits.shape[-1])
        for t in range(max_new_tokens):
            logits = logits.float()
            if t < MIN_NEW_TOKENS:
                logits[:, eos] = float("-inf")  # no reply may be empty
            race = None if noise is None else noise[:, t]
            token = torch.where(done, pad, self._pick(logits, sampling, generators, race))
            out[:, t] = token
            self.stats["decode_row_steps"] += batch
            done |= torch.isin(token, eos)
            if t + 1 == max_new_tokens or bool(done.all()):
                break
            mask[:, width + t] = 1
            logits = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=(next_pos + t)[:, None],
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1, :]
        return out.tolist()

    def _noise(self, sampling: Sampling, generators, batch: int, steps: int, vocab: int):
        """Each row's exponential draws for every decoding step of a sub-batch, drawn up
        front from its own generator: one random-number kernel per row and sub-batch
        instead of per row and step (2.0 ms against 0.16 ms a step for 128 rows on an
        H200, perf/results/gpu/). Only under top-k, where a step draws k numbers; None
        otherwise (each step draws over the vocabulary, :meth:`_pick`)."""
        import torch

        if not sampling.samples or not 0 < sampling.top_k < vocab:
            return None
        noise = torch.empty(batch, steps, sampling.top_k, device=self.device)
        for row, generator in enumerate(generators):
            noise[row].exponential_(generator=generator)
        return noise

    @staticmethod
    def _pick(logits, sampling: Sampling, generators, race=None):
        """Greedy or temperature / top-k / nucleus sampling, row ``r`` drawing from
        ``generators[r]`` (or from ``race[r]``, its exponential draws for this step).

        The filters apply in transformers' order: temperature, top-k, then top-p.
        """
        import torch

        if not sampling.samples:
            return logits.argmax(-1)
        top_k, top_p = sampling.top_k, sampling.top_p
        logits = logits / sampling.temperature
        index = None
        if 0 < top_k < logits.shape[-1]:
            # Draw among the k best only (sorted): the same distribution as masking the
            # rest to -inf, at a fraction of the cost over a 50k-token vocabulary.
            logits, index = torch.topk(logits, top_k, dim=-1)
        probs = torch.softmax(logits, dim=-1)
        if top_p < 1.0:
            if index is None:
                probs, index = probs.sort(dim=-1, descending=True)
            # Keep the smallest set whose mass reaches top_p (the top token always stays).
            probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0)
        # Exponential race: argmax(p / E), E ~ Exp(1), is a draw from p (no sort, one pass).
        if race is None:
            race = torch.stack(
                [torch.empty_like(probs[0]).exponential_(generator=g) for g in generators]
            )
        choice = (probs / race).argmax(-1)
        return choice if index is None else index.gather(-1, choice[:, None])[:, 0]

    def _reply(self, tokens: list[int], prompt_truncated: bool) -> Reply:
        eos_at = next((k for k, t in enumerate(tokens) if t in self.eos_ids), None)
        if eos_at is None:
            kept, num, by_eos = tokens, len(tokens), False
        else:
            kept, num, by_eos = tokens[:eos_at], eos_at + 1, True
        text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
        return Reply(
            text=text, num_tokens=num, finished_by_eos=by_eos, prompt_truncated=prompt_truncated
        )


def attention_heads(config) -> tuple[int, int, int]:
    """Query heads, key/value heads and head size of a model's text config."""
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return heads, int(getattr(config, "num_key_value_heads", None) or heads), head_dim


# Attention implementations whose CUDA kernels never store the prompt pass's scores.
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")


@dataclass(frozen=True)
class RowMemory:
    """What one row of a sub-batch takes: its static-cache slots, the prompt pass's
    activations and, where the attention kernel stores them, its float32 scores.

    Measured on an H200 (perf/results/gpu/, 0.85B Llama in bf16, 1.3k-token prompts):
    about 96 MB a row at batch 128, of which the cache is 45 MB and the rest the MLP's
    activations of the prompt pass; CUDA's fused SDPA kernels store no scores. Counting
    fp32 scores there estimated 158 MB, 39% fewer rows than fit.
    """

    kv_bytes_per_token: int
    activation_bytes_per_token: int
    score_bytes_per_pair: int

    @classmethod
    def of(cls, config, elem: int, fused_attention: bool) -> RowMemory:
        """The figures of a model ``config`` whose weights take ``elem`` bytes each."""
        heads, kv_heads, head_dim = attention_heads(config)
        hidden = int(config.hidden_size)
        inter = int(getattr(config, "intermediate_size", None) or 4 * hidden)
        return cls(
            kv_bytes_per_token=2 * int(config.num_hidden_layers) * kv_heads * head_dim * elem,
            # The MLP's gate, up and product, and a few hidden-size tensors, per prompt token.
            activation_bytes_per_token=(3 * inter + 4 * hidden) * elem,
            score_bytes_per_pair=0 if fused_attention else heads * 4,
        )

    def row_bytes(self, prompt_len: int, max_new_tokens: int, reuse_kv: bool) -> int:
        # With kept keys/values the known and own parts are padded separately.
        width = (2 if reuse_kv else 1) * prompt_len + max_new_tokens
        return (
            width * (self.kv_bytes_per_token + self.score_bytes_per_pair * prompt_len)
            + prompt_len * self.activation_bytes_per_token
        )


def default_batch_memory(device, kept_bytes: int) -> int:
    """Memory for one sub-batch when none is configured: on a GPU, 80% of what is free
    (with what torch's allocator holds unused), on CPU half of what this process may
    still use (its cgroup's limit where one is set); less the keys/values kept between
    turns, which may take at most half of it."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        budget = int(0.8 * free)
    else:
        budget = _cpu_available_bytes() // 2
    return max(budget - min(kept_bytes, budget // 2), 1)


def _cpu_available_bytes() -> int:
    """MemAvailable, or less where the process's cgroup (v2, or v1 memory) limits it."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    for limit, used in _cgroup_limits():
        available = min(available, max(limit - used, 0))
    return available


def _cgroup_limits(
    proc_cgroup: Path = Path("/proc/self/cgroup"), fs: Path = Path("/sys/fs/cgroup")
) -> list[tuple[int, int]]:
    """(limit, used) of this process's memory cgroup and its ancestors; page cache that
    can be dropped (inactive_file) does not count as used."""
    out: list[tuple[int, int]] = []
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            root, names = fs, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            root = fs / "memory"
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        here = root / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                limit = (here / names[0]).read_text(encoding="ascii").strip()
                if limit.isdigit() and int(limit) < 2**60:
                    used = int((here / names[1]).read_text(encoding="ascii"))
                    out.append((int(limit), used - _inactive_file(here)))
            if here == root or root not in here.parents:
                break
            here = here.parent
    return out


def _inactive_file(folder: Path) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in (folder / "memory.stat").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file"):
                return int(value)
    return 0


def _nbytes(kv: list[tuple]) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
