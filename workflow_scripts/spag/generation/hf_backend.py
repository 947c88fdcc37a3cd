"""The ``hf`` backend: batched transformers generation with a KV cache (CPU or one GPU).

All prompts of a call are encoded (one BOS, left truncation), sorted longest
first and decoded in a fixed set of slots (at most ``batch_size``, as many as fit
the batch memory): a slot whose reply ends (EOS, no earlier than
``min_new_tokens``, or ``max_new_tokens``) takes the next waiting prompt, so the
batch stays full until the call runs out of prompts, and then shrinks to the
slots still decoding (:class:`_Slots`). The prompt prefix that all prompts share
(the game rules) is computed once, kept across calls, and read once per decoding
step for all slots (:mod:`spag.generation.slot_attention`); a game's keys/values
are kept between its turns within ``kv_reuse_gib``. Each game samples from its
own ``torch.Generator`` seeded from the call's seed and its episode id: its draws
do not depend on the other games of the call, and the global RNG is untouched.
Its logits are computed in a batch that other games shape: the same up to
rounding in float32 on CPU, not on CUDA in bf16 (``spag.generation.base.Backend
.generate`` says what a resumed shard can promise).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from spag.errors import SpagInputError
from spag.generation.base import (
    Backend,
    Reply,
    context_budget,
    cpu_available_bytes,
    stop_token_ids,
)
from spag.generation.settings import DTYPES, Sampling, SelfplaySettings
from spag.generation.slot_attention import use_slot_attention
from spag.models.rendering import PromptRenderer
from spag.ops import DEVICES, select_device

log = logging.getLogger(__name__)


class HFBackend(Backend):
    """Batched decoding of a call's prompts in slots refilled as replies end (:class:`_Slots`)."""

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
        kv_reuse_gib: float = SelfplaySettings.kv_reuse_gib,
        cuda_graphs: bool = SelfplaySettings.cuda_graphs,
        batch_memory_gib: float | None = SelfplaySettings.batch_memory_gib,
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
        # The config's knobs by their names and units (GiB); bytes from here on.
        reuse_kv_bytes = int(kv_reuse_gib * 2**30)
        batch_memory_bytes = int(batch_memory_gib * 2**30) if batch_memory_gib else None
        self.reuse_kv = bool(reuse_kv) and reuse_kv_bytes > 0
        self._kv_store: dict[str, tuple[list[int], list[tuple]]] = {}
        # Kept keys/values stay under this many bytes (a large model keeps few or none).
        self.reuse_kv_bytes = int(reuse_kv_bytes)
        self.cuda_graphs = bool(cuda_graphs)
        self._graph_pool = None
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
        # What the slots and a prompt pass may take together; there are as many slots
        # as fit, at most --batch-size.
        if batch_memory_gib is not None and batch_memory_gib <= 0:
            raise SpagInputError(f"--batch-memory-gib must be positive, got {batch_memory_gib}")
        self._batch_memory_bytes = int(batch_memory_bytes) if batch_memory_bytes else None
        self._batch_memory_configured = self._batch_memory_bytes
        config = self.model.config.get_text_config()
        _, self._kv_heads, self._head_dim = attention_heads(config)
        self._memory = RowMemory.of(
            config,
            torch.finfo(self.model.dtype).bits // 8,
            fused_attention=self.device.type == "cuda"
            and getattr(config, "_attn_implementation", None) in FUSED_ATTENTION,
        )
        use_slot_attention(self.model)
        # Work done, for the job's log: prompt tokens, those run through the model
        # (the rest came from kept keys/values), rows x decoding steps, and those of
        # them that made a token (the rest decoded an empty slot or past an EOS).
        self.stats = {
            "prompt_tokens": 0,
            "prompt_tokens_computed": 0,
            "decode_row_steps": 0,
            "decode_tokens": 0,
            "graphs_captured": 0,
        }
        # The prompt prefix of the last call (the rules) and its keys/values.
        self._prefix: tuple[list[int], list[tuple]] | None = None

    def draw(
        self, prompts: list[str], sampling: Sampling, seeds: list[int], game_ids: list[str] | None
    ) -> list[Reply]:
        import torch

        max_new_tokens = sampling.max_new_tokens
        encoded = self.encoder.encode(prompts, self.max_length - max_new_tokens)
        seqs = [ids for ids, _ in encoded]
        # Longest first: the first rows fix the slot width, and similar lengths share a
        # prompt pass, so little padding.
        order = sorted(range(len(seqs)), key=lambda i: (-len(seqs[i]), i))
        keys = game_ids if game_ids and self.reuse_kv else None
        with torch.inference_mode():
            tokens = _Slots(self, seqs, order, keys, sampling, seeds).run()
        replies = [self._reply(tokens[i], encoded[i][1]) for i in range(len(seqs))]
        self.stats["decode_tokens"] += sum(r.num_tokens for r in replies)
        return replies

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

    def batch_rows(
        self, prompt_len: int, max_new_tokens: int, shared_len: int = 0
    ) -> tuple[int, int]:
        """Slots of a call (at most ``batch_size``) and rows of one prompt pass, for
        prompts of at most ``prompt_len`` tokens whose first ``shared_len`` are stored
        once for all slots (:meth:`RowMemory.batch_rows`)."""

        def fit() -> tuple[int, int]:
            return self._memory.batch_rows(
                prompt_len,
                max_new_tokens,
                self.reuse_kv,
                self.batch_memory_bytes,
                self.batch_size,
                shared_len=shared_len,
            )

        rows, pass_rows = fit()
        if (
            self.reuse_kv
            and rows > 0
            and not self._memory.keeping_pays(self.reuse_kv_bytes, rows, prompt_len)
        ):
            # Too few games' keys/values fit what may be kept: the memory and the
            # prompt pass's second padded part serve more slots instead.
            log.info(
                "keys/values not kept between turns: %.2f GiB holds the prompts of %d of "
                "%d slots (selfplay.kv_reuse_gib)",
                self.reuse_kv_bytes / 2**30,
                self.reuse_kv_bytes // (prompt_len * self._memory.kv_bytes_per_token),
                rows,
            )
            self.reuse_kv = False
            self.release(list(self._kv_store))
            if self._batch_memory_configured is None:
                self._batch_memory_bytes = None  # asked again, without the kept part
            rows, pass_rows = fit()
        if rows < 1:
            need = self._memory.slot_bytes(
                prompt_len - shared_len, max_new_tokens
            ) + self._memory.pass_bytes(prompt_len, self.reuse_kv)
            raise SpagInputError(
                f"one game needs {need / 2**30:.2f} GiB for a {prompt_len}-token "
                f"prompt and {max_new_tokens} new tokens, more than the batch memory "
                f"({self.batch_memory_bytes / 2**30:.2f} GiB, selfplay.batch_memory_gib); "
                "raise it or lower selfplay.max_length"
            )
        return rows, pass_rows

    def release(self, game_ids: list[str]) -> None:
        """Forget the stored keys/values of finished games."""
        for key in game_ids:
            entry = self._kv_store.pop(key, None)
            if entry is not None:
                self._kv_stored_bytes -= _nbytes(entry[1])

    def _prefix_kv(self, prefix: list[int], keep: bool = True) -> list[tuple]:
        """Keys and values (heads, tokens, dim) of a prompt prefix, computed at batch size 1
        (from the kept prefix where it starts this one) and, with ``keep``, kept for the
        next call with the same prefix (the game rules)."""
        import torch
        from transformers import DynamicCache

        base = self._prefix
        if base is not None and base[0][: len(prefix)] == prefix:
            if len(prefix) == len(base[0]):
                return base[1]
            return [(k[:, : len(prefix)], v[:, : len(prefix)]) for k, v in base[1]]
        cache = DynamicCache(config=self.model.config)
        start = 0
        if base is not None and len(base[0]) < len(prefix) and prefix[: len(base[0])] == base[0]:
            start = len(base[0])
            for layer_idx, (k, v) in enumerate(base[1]):
                cache.update(k[None], v[None], layer_idx)
        ids = torch.tensor([prefix[start:]], dtype=torch.long, device=self.device)
        positions = torch.arange(start, len(prefix), device=self.device)[None]
        self.model(
            input_ids=ids,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.stats["prompt_tokens_computed"] += len(prefix) - start
        kv = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
        if keep:
            self._prefix = (list(prefix), kv)
        return kv

    def _prompt_pass(self, seqs: list[list[int]], keys: list[str] | None, shared_len: int):
        """Run the prompts ``seqs`` of one admission through the model.

        Returns the logits of each prompt's last token, the pass's cache and, per row,
        the columns of its keys/values there, in token order.

        Layout per row: ``[pad][known part][pad][own part]``. The known part is a
        prompt prefix whose keys/values are already there: the same game's previous
        prompt (history is append-only) or else the prefix that every prompt of the
        call shares (the game rules, computed once). Only the own part is run through
        the model. Padding is masked out and positions count real tokens only, so each
        row sees exactly its prompt.
        """
        import torch
        from transformers import StaticCache

        dev = self.device
        batch = len(seqs)
        call_len = shared_len
        # Each row's part already computed: its game's previous prompt, where that goes
        # beyond the call's prefix.
        known: list[tuple[int, list[tuple] | None]] = []
        for row, s in enumerate(seqs):
            stored = self._kv_store.get(keys[row]) if keys else None
            n = 0
            if stored is not None:
                old = stored[0]
                limit = min(len(old), len(s) - 1)
                while n < limit and old[n] == s[n]:
                    n += 1
            known.append((n, stored[1]) if n > call_len else (call_len, None))
        # The other prompts of the pass (similar lengths) may share more than the call
        # does: that part too is computed once, on top of the call's prefix.
        fresh = [s for s, (_, kv) in zip(seqs, known, strict=True) if kv is None]
        if len(fresh) > 1:
            group_len = min(len(os.path.commonprefix(fresh)), min(len(s) for s in fresh) - 1)
            if group_len > call_len:
                shared_len = group_len
                known = [(n, kv) if kv is not None else (shared_len, None) for n, kv in known]
        shared = (
            self._prefix_kv(
                next(s for s, (_, kv) in zip(seqs, known, strict=True) if kv is None)[:shared_len],
                keep=False,
            )
            if any(kv is None and n for n, kv in known)
            else None
        )
        known_w = max(n for n, _ in known)
        own_w = max(len(s) - n for s, (n, _) in zip(seqs, known, strict=True))
        width = known_w + own_w
        ids = torch.full((batch, own_w), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
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

        cache = StaticCache(config=self.model.config, max_cache_len=width)
        if known_w:
            # Each row's known part copied once into a left-padded block (no pad/stack
            # copies). The cache copies the block, so one block serves every layer: each
            # layer writes the same row spans, and the padding stays zero.
            shape = (batch, self._kv_heads, known_w, self._head_dim)
            block_k = torch.zeros(shape, dtype=self.model.dtype, device=dev)
            block_v = torch.zeros(shape, dtype=self.model.dtype, device=dev)
            for layer_idx, layer in enumerate(cache.layers):
                for row, (n, kv) in enumerate(known):
                    if n == 0:  # nothing known (no shared first token)
                        continue
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
        # Each row's columns in the pass's cache, in token order: known part, own part.
        spans = [
            torch.cat(
                (
                    torch.arange(known_w - n, known_w, device=dev),
                    torch.arange(width - (len(s) - n), width, device=dev),
                )
            )
            for s, (n, _) in zip(seqs, known, strict=True)
        ]
        if keys:
            self.release(keys)
            per_token = _nbytes(
                [(layer.keys[0, :, :1], layer.values[0, :, :1]) for layer in cache.layers]
            )
            for row, s in enumerate(seqs):
                if self._kv_stored_bytes + per_token * len(s) > self.reuse_kv_bytes:
                    continue
                self._kv_stored_bytes += per_token * len(s)
                self._kv_store[keys[row]] = (
                    list(s),
                    [
                        (
                            layer.keys[row].index_select(1, spans[row]),
                            layer.values[row].index_select(1, spans[row]),
                        )
                        for layer in cache.layers
                    ],
                )
        return logits, cache, spans

    def _noise(self, sampling: Sampling, generator, steps: int, vocab: int):
        """A game's exponential draws for every decoding step of its reply, drawn up
        front from its own generator: one random-number kernel per game instead of per
        game and step (2.0 ms against 0.16 ms a step for 128 rows on an H200,
        perf/results/gpu/). Only under top-k, where a step draws k numbers; None
        otherwise (each step draws over the vocabulary, :meth:`_pick`)."""
        import torch

        if not sampling.samples or not 0 < sampling.top_k < vocab:
            return None
        return torch.empty(steps, sampling.top_k, device=self.device).exponential_(
            generator=generator
        )

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


# Steps between two looks at which rows have finished: each look waits for the device.
CHECK_EVERY = {"cpu": 1, "cuda": 4}
# Calls of fewer new tokens than this decode eagerly: a capture costs about three steps.
GRAPH_MIN_STEPS = 16
# Waiting prompts enter once 1/ADMIT_EVERY of the slots are free (or as many as wait):
# a prompt pass of one row costs nearly what one of several rows costs.
ADMIT_EVERY = 8
# Once no prompt waits, the batch drops its empty slots when at most this share of them
# still decodes: on CPU at once (a step's cost follows its rows), on CUDA at half (a
# smaller batch saves little there until the step is bound by its rows).
SHRINK_AT = {"cpu": 1.0, "cuda": 0.5}


class _Slots:
    """One ``draw`` call decoded in a fixed set of slots that are refilled as replies end.

    The prefix that every prompt of the call shares (the rules) is stored once and read
    once per step for all slots (:mod:`spag.generation.slot_attention`). Every slot
    holds the rest of one game's prompt and its reply in a ring of ``width`` key/value
    columns (the longest prompt of the call less that prefix, plus
    ``max_new_tokens``). A decoding step
    writes every slot's new token at one shared column, then the column moves on. A
    game admitted into a slot has its prompt's keys/values copied into the columns just
    behind the write column, so its reply never reaches them before it ends; a mask per
    slot marks its own columns (attention does not depend on the order of its keys, and
    positions go with each token). When a slot's reply ends (EOS, or
    ``max_new_tokens``), the next waiting prompt of the call, longest first, takes it:
    the slots stay full until the call runs out of prompts, then the batch shrinks to
    the slots still decoding.
    """

    def __init__(self, backend: HFBackend, seqs, order, keys, sampling: Sampling, seeds):
        import torch

        self.b, self.seqs, self.keys, self.sampling = backend, seqs, keys, sampling
        self.seeds = seeds
        self.queue = list(order)
        self.max_new = sampling.max_new_tokens
        # The prefix every prompt of the call shares (the rules), leaving each prompt
        # at least one token of its own: stored once, outside the slots. A call of one
        # prompt shares with the kept prefix only (its own history is no rules prefix).
        shortest = min(len(s) for s in seqs)
        kept = backend._prefix[0] if backend._prefix is not None else []
        common = seqs if len(seqs) > 1 else [seqs[0], kept]
        self.shared_len = min(len(os.path.commonprefix(common)), shortest - 1)
        longest = len(seqs[order[0]])
        self.width = longest - self.shared_len + self.max_new
        rows, self.pass_rows = backend.batch_rows(longest, self.max_new, self.shared_len)
        if not backend.reuse_kv:  # turned off for this backend (HFBackend.batch_rows)
            self.keys = None
        self.rows = min(rows, len(order))
        self.prefix = (
            backend._prefix_kv(seqs[order[0]][: self.shared_len]) if self.shared_len else []
        )
        dev = backend.device
        model = backend.model
        self.eos = torch.tensor(backend.eos_ids, device=dev)
        vocab = model.get_output_embeddings().weight.shape[0]
        self.vocab = vocab
        self.eos_columns = self.eos[self.eos < vocab]  # the stop ids the logits have
        n, heads, dim = self.rows, backend._kv_heads, backend._head_dim
        layers = model.config.get_text_config().num_hidden_layers
        self.column = torch.zeros(1, dtype=torch.long, device=dev)
        self.cache = _slot_cache(
            [
                (
                    torch.zeros((n, heads, self.width, dim), dtype=model.dtype, device=dev),
                    torch.zeros((n, heads, self.width, dim), dtype=model.dtype, device=dev),
                )
                for _ in range(layers)
            ],
            self.column,
        )
        # Each slot's own columns, as the additive mask every attention kernel takes.
        self.low = torch.finfo(model.dtype).min
        self.mask = torch.full((n, self.width), self.low, dtype=model.dtype, device=dev)
        self.pos = torch.zeros(n, dtype=torch.long, device=dev)
        self.pos_limit = (
            int(getattr(model.config.get_text_config(), "max_position_embeddings", 0) or 2**31) - 1
        )
        self.age = torch.zeros(n, dtype=torch.long, device=dev)
        self.stopped = torch.zeros(n, dtype=torch.bool, device=dev)
        self.out = torch.full((n, self.max_new), backend.pad_id, dtype=torch.long, device=dev)
        self.logits = torch.zeros((n, vocab), dtype=torch.float32, device=dev)
        self.noise = (
            torch.ones((n, self.max_new, sampling.top_k), device=dev)
            if sampling.samples and 0 < sampling.top_k < vocab
            else None
        )
        # Host side: the prompt index in each slot (None: empty) and its reply's length.
        self.slot: list[int | None] = [None] * n
        self.steps = [0] * n
        self.generators: list = [None] * n
        self.tokens: dict[int, list[int]] = {}
        self.col = 0  # the write column, as the host counts it
        # On CUDA a decoding step is replayed from a graph captured for this call and
        # batch size: one launch instead of one per operation and layer.
        self.graphs = backend.cuda_graphs and dev.type == "cuda" and self.max_new >= GRAPH_MIN_STEPS
        self.graph = None

    def run(self) -> list[list[int]]:
        import torch

        b, sampling = self.b, self.sampling
        every = CHECK_EVERY.get(b.device.type, 4)
        shrink = SHRINK_AT.get(b.device.type, 0.5)
        admit_at = max(1, len(self.slot) // ADMIT_EVERY)
        self._admit(list(range(self.rows)))
        since = 0
        while True:
            logits = self.logits
            # EOS is forbidden for a slot's first tokens (Sampling.min_new_tokens).
            young = [
                r
                for r, i in enumerate(self.slot)
                if i is not None and self.steps[r] < sampling.min_new_tokens
            ]
            if young:
                rows = torch.tensor(young, device=b.device)
                logits[rows[:, None], self.eos_columns[None, :]] = float("-inf")
            step = self.age.clamp(max=self.max_new - 1)
            race = None
            if self.noise is not None:
                race = self.noise[torch.arange(len(self.slot), device=b.device), step]
            elif sampling.samples:
                race = torch.stack(
                    [
                        torch.empty(self.vocab, device=b.device).exponential_(generator=g)
                        if g is not None
                        else torch.ones(self.vocab, device=b.device)
                        for g in self.generators
                    ]
                )
            token = b._pick(logits, sampling, self.generators, race)
            self.out.scatter_(1, step[:, None], token[:, None])
            self.stopped |= torch.isin(token, self.eos)
            self.age += 1
            live = [r for r, i in enumerate(self.slot) if i is not None]
            b.stats["decode_row_steps"] += len(self.slot)
            for r in live:
                self.steps[r] += 1
            since += 1
            if since >= every or any(self.steps[r] >= self.max_new for r in live):
                since = 0
                self._collect(live)
                if all(i is None for i in self.slot) and not self.queue:
                    break
            # The next step's logits for every slot (a slot refilled below gets its own).
            self.mask[:, self.col] = 0
            self.column.fill_(self.col)
            self.logits = self._step(token)
            self.pos += 1
            # Empty slots keep stepping until the batch shrinks: keep their positions in
            # range for models with learned position tables.
            self.pos.clamp_(max=self.pos_limit)
            self.col = (self.col + 1) % self.width
            free = [r for r, i in enumerate(self.slot) if i is None]
            if self.queue and len(free) >= min(admit_at, len(self.queue)):
                self._admit(free)
            elif not self.queue and sum(i is not None for i in self.slot) <= shrink * len(
                self.slot
            ):
                self._shrink()
        return [self.tokens[i] for i in range(len(self.seqs))]

    def _step(self, token):
        """Every slot's logits after ``token``: one decoding step, replayed or eager."""
        if self.graphs and self.graph is None:
            self._capture()
        if self.graph is None:
            return self._forward(token[:, None])
        self.graph_tokens.copy_(token[:, None])
        self.graph.replay()
        return self.graph_logits

    def _forward(self, tokens):
        return (
            self.b.model(
                input_ids=tokens,
                attention_mask=self.mask[:, None, None, :],
                position_ids=self.pos[:, None],
                past_key_values=self.cache,
                use_cache=True,
                slot_prefix=self.prefix,
            )
            .logits[:, -1, :]
            .float()
        )

    def _capture(self) -> None:
        """Capture the decoding step as a CUDA graph over the slots' tensors, which keep
        their addresses for the call (the write column, positions and mask change in
        place). A warm-up step first, on a side stream as capture needs; it writes its
        pad token's keys/values at the write column, which the real step overwrites. A
        failed capture leaves the call eager."""
        import torch

        dev = self.b.device
        tokens = torch.full((len(self.slot), 1), self.b.pad_id, dtype=torch.long, device=dev)
        try:
            stream = torch.cuda.Stream(dev)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                self._forward(tokens)
            torch.cuda.current_stream(dev).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            if self.b._graph_pool is None:  # one memory pool for every capture
                self.b._graph_pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self.b._graph_pool):
                logits = self._forward(tokens)
        except RuntimeError as exc:
            log.warning("decoding step not captured as a CUDA graph (%s); eager steps", exc)
            self.graphs = False
            return
        self.graph, self.graph_tokens, self.graph_logits = graph, tokens, logits
        self.b.stats["graphs_captured"] += 1

    def _collect(self, live: list[int]) -> None:
        """Take the replies that have ended out of their slots."""
        stopped = self.stopped.tolist()
        ended = [r for r in live if stopped[r] or self.steps[r] >= self.max_new]
        if not ended:
            return
        rows = self.out[ended].tolist()
        for r, tokens in zip(ended, rows, strict=True):
            self.tokens[self.slot[r]] = tokens[: self.steps[r]]  # type: ignore[index]
            self.slot[r] = None
            self.generators[r] = None

    def _admit(self, free: list[int]) -> None:
        """Fill the free slots with the next prompts of the call: their prompt pass, in
        groups of at most ``pass_rows``, and their keys/values copied into the ring."""
        import torch

        b = self.b
        while free and self.queue:
            take = min(len(free), self.pass_rows, len(self.queue))
            slots, free = free[:take], free[take:]
            idx, self.queue = self.queue[:take], self.queue[take:]
            keys = [self.keys[i] for i in idx] if self.keys else None
            logits, cache, spans = b._prompt_pass(
                [self.seqs[i] for i in idx], keys, self.shared_len
            )
            sl = torch.tensor(slots, device=b.device)
            self.logits[sl] = logits.float()
            # Every row's prompt into the columns just behind the write column, one copy
            # per layer for the whole admission.
            skip = self.shared_len
            lengths = [len(self.seqs[i]) - skip for i in idx]
            src_rows = torch.repeat_interleave(
                torch.arange(take, device=b.device), torch.tensor(lengths, device=b.device)
            )
            dst_rows = sl[src_rows]
            src_cols = torch.cat([span[skip:] for span in spans])
            dst_cols = (
                torch.cat([torch.arange(self.col - n, self.col, device=b.device) for n in lengths])
                % self.width
            )
            for (ring_k, ring_v), layer in zip(self.cache.kv, cache.layers, strict=True):
                ring_k[dst_rows, :, dst_cols] = layer.keys[src_rows, :, src_cols]
                ring_v[dst_rows, :, dst_cols] = layer.values[src_rows, :, src_cols]
            self.mask[sl] = self.low
            self.mask[dst_rows, dst_cols] = 0
            self.pos[sl] = torch.tensor(lengths, device=b.device) + skip
            for r, i in zip(slots, idx, strict=True):
                self.slot[r] = i
                self.steps[r] = 0
                if self.sampling.samples:
                    self.generators[r] = b._generator(self.seeds[i])
                    if self.noise is not None:
                        self.noise[r] = b._noise(
                            self.sampling, self.generators[r], self.max_new, self.vocab
                        )
            self.age[sl] = 0
            self.stopped[sl] = False
            # The pass's cache goes before the next pass takes its memory (one is budgeted).
            del logits, cache, spans

    def _shrink(self) -> None:
        """Drop the empty slots once no prompt waits: the slots still decoding beyond the
        first ``n`` (their count) move into the empty ones before them, and the batch
        becomes the first ``n`` rows (views: only the moved rows are copied)."""
        import torch

        n = sum(i is not None for i in self.slot)
        if n == 0 or n == len(self.slot):
            return
        self.graph = None  # captured for the larger batch
        empty = [r for r in range(n) if self.slot[r] is None]
        moved = [r for r in range(n, len(self.slot)) if self.slot[r] is not None]
        src = torch.tensor(moved, dtype=torch.long, device=self.b.device)
        dst = torch.tensor(empty, dtype=torch.long, device=self.b.device)
        tensors = [t for kv in self.cache.kv for t in kv]
        names = ["mask", "pos", "age", "stopped", "out", "logits"]
        names += ["noise"] if self.noise is not None else []
        for t in tensors + [getattr(self, name) for name in names]:
            t[dst] = t[src]
        self.cache.kv = [(k[:n], v[:n]) for k, v in self.cache.kv]
        self.cache.rebind()
        for name in names:
            setattr(self, name, getattr(self, name)[:n])
        for e, m in zip(empty, moved, strict=True):
            self.slot[e], self.steps[e], self.generators[e] = (
                self.slot[m],
                self.steps[m],
                self.generators[m],
            )
        del self.slot[n:], self.steps[n:], self.generators[n:]


def _slot_cache(kv, column):
    """A transformers cache over the slots' ring: every layer writes its new keys/values
    at ``column`` (one column for all rows) and attends over the whole ring."""
    from transformers.cache_utils import Cache, StaticLayer

    class SlotLayer(StaticLayer):
        def __init__(self, keys, values):
            super().__init__(max_cache_len=keys.shape[2])
            self.bind(keys, values)

        def bind(self, keys, values) -> None:
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.batch_size, self.num_heads = keys.shape[:2]
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            self.keys.index_copy_(2, column, key_states)
            self.values.index_copy_(2, column, value_states)
            return self.keys, self.values

    class SlotCache(Cache):
        def __init__(self) -> None:
            super().__init__(layers=[SlotLayer(k, v) for k, v in kv])
            self.kv = kv

        def rebind(self) -> None:
            for layer, (k, v) in zip(self.layers, self.kv, strict=True):
                layer.bind(k, v)

    return SlotCache()


def attention_heads(config) -> tuple[int, int, int]:
    """Query heads, key/value heads and head size of a model's text config."""
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return heads, int(getattr(config, "num_key_value_heads", None) or heads), head_dim


# Attention implementations whose CUDA kernels never store the prompt pass's scores.
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")


@dataclass(frozen=True)
class RowMemory:
    """What a slot and a prompt pass's row take: keys/values, the prompt pass's
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

    def slot_bytes(self, prompt_len: int, max_new_tokens: int) -> int:
        """One slot's keys/values: its prompt (less the prefix all slots share, stored
        once) and its reply, nothing padded."""
        return (prompt_len + max_new_tokens) * self.kv_bytes_per_token

    def keeping_pays(self, kept_bytes: int, rows: int, prompt_len: int) -> bool:
        """Whether keeping games' keys/values between turns pays for what it takes (its
        memory, and a prompt pass padded in two parts): when ``kept_bytes`` hold the
        prompts of at least a quarter of the ``rows`` slots. Below that most games
        recompute their history anyway (LLaMA-2-7B: 2 GiB holds about 8 prompts of 500
        tokens, for some 100 slots), so the memory serves more slots instead."""
        return kept_bytes >= rows * prompt_len * self.kv_bytes_per_token / KEEP_SHARE

    def pass_bytes(self, prompt_len: int, reuse_kv: bool) -> int:
        """One row of a prompt pass: its keys/values (with kept keys/values the known and
        own parts are padded separately), its scores where stored, its activations."""
        width = (2 if reuse_kv else 1) * prompt_len
        return (
            width * (self.kv_bytes_per_token + self.score_bytes_per_pair * prompt_len)
            + prompt_len * self.activation_bytes_per_token
        )

    def batch_rows(
        self,
        prompt_len: int,
        max_new_tokens: int,
        reuse_kv: bool,
        budget: int,
        most: int,
        shared_len: int = 0,
    ) -> tuple[int, int]:
        """At most ``most`` slots and the rows of one prompt pass that fit ``budget``
        together. Slots are counted as if a prompt pass took a quarter of them (prompts
        enter a few at a time as replies end; only the first admission fills every
        slot); a prompt pass then takes what the slots leave, at least that quarter."""
        slot = self.slot_bytes(prompt_len - shared_len, max_new_tokens)
        row = self.pass_bytes(prompt_len, reuse_kv)

        def passes(n: int) -> int:
            return -(-n // PASS_SHARE)

        rows = min(int(budget // (slot + row / PASS_SHARE)), most) if slot + row <= budget else 0
        while rows > 0 and rows * slot + passes(rows) * row > budget:
            rows -= 1
        if rows < 1:
            return 0, 1
        return rows, min(rows, max(passes(rows), (budget - rows * slot) // row))


# Kept keys/values pay when they hold the prompts of 1/KEEP_SHARE of the slots.
KEEP_SHARE = 4
# Slots are sized as if a prompt pass took 1/PASS_SHARE of them (RowMemory.batch_rows).
PASS_SHARE = 4


def default_batch_memory(device, kept_bytes: int) -> int:
    """Memory for a call's slots and prompt pass when none is configured: on a GPU, 80% of what is free
    (with what torch's allocator holds unused), on CPU half of what this process may
    still use (its cgroup's limit where one is set); less the keys/values kept between
    turns, which may take at most half of it."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        budget = int(0.8 * free)
    else:
        budget = cpu_available_bytes() // 2
    return max(budget - min(kept_bytes, budget // 2), 1)


def _nbytes(kv: list[tuple]) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
