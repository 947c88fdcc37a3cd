"""The ``hf`` backend: batched transformers generation with KV cache (CPU or one GPU).

All prompts of a call are encoded (one BOS, left truncation), sorted by length
and generated in sub-batches of ``batch_size`` with left padding, so that
padding stays small. The global RNG is seeded per call inside a forked RNG
state: the same prompts and seed give the same replies, and the caller's RNG is
left untouched.
"""

from __future__ import annotations

import logging
from pathlib import Path

from spag.errors import SpagInputError
from spag.generation.base import (
    MIN_NEW_TOKENS,
    PromptEncoder,
    Reply,
    context_budget,
    eos_token_ids,
)

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "bfloat16", "float16")


class HFBackend:
    """Batched ``model.generate`` over left-padded sub-batches."""

    name = "hf"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        batch_size: int | None = None,
        max_length: int | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        device: str | None = None,
        **_ignored: object,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise SpagInputError(f"unknown --dtype '{dtype}' (choose from {', '.join(DTYPES)})")
        self.model_dir = Path(model_dir)
        self.batch_size = int(batch_size or 64)
        if self.batch_size < 1:
            raise SpagInputError(f"--batch-size must be at least 1, got {self.batch_size}")
        self.max_length = context_budget(model_dir, max_length)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir,
            dtype=torch_dtype,
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
        ).to(self.device)
        self.model.eval()
        self.encoder = PromptEncoder(self.tokenizer)
        self.eos_ids = eos_token_ids(self.tokenizer, model_dir)
        # No pad token (Llama): pad with EOS, never grow the vocabulary.
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

    def _generation_config(
        self, max_new_tokens: int, temperature: float, top_p: float, greedy: bool
    ):
        from transformers import GenerationConfig

        common = dict(
            max_new_tokens=max_new_tokens,
            min_new_tokens=min(MIN_NEW_TOKENS, max_new_tokens),
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            bos_token_id=self.encoder.bos_id,
            use_cache=True,
        )
        if greedy or temperature <= 0:
            return GenerationConfig(do_sample=False, **common)
        # Plain temperature / nucleus sampling, as vLLM does it: no top-k cut.
        return GenerationConfig(
            do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0, **common
        )

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        greedy: bool,
        seed: int,
    ) -> list[Reply]:
        import torch

        if not prompts:
            return []
        if max_new_tokens < 1:
            raise SpagInputError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
        encoded = self.encoder.encode(prompts, self.max_length - max_new_tokens)
        config = self._generation_config(max_new_tokens, temperature, top_p, greedy)
        # Longest first: similar lengths share a sub-batch, so little padding.
        order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i][0]), i))
        replies: list[Reply | None] = [None] * len(encoded)
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                width = max(len(encoded[i][0]) for i in idx)
                ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for row, i in enumerate(idx):
                    seq = encoded[i][0]
                    ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
                    mask[row, width - len(seq) :] = 1
                out = self.model.generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=config,
                )
                new = out[:, width:].tolist()
                for row, i in enumerate(idx):
                    replies[i] = self._reply(new[row], encoded[i][1])
        return replies  # type: ignore[return-value]

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
