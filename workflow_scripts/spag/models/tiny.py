"""The embedded default's base model: a tiny Llama with a byte-level BPE tokenizer.

Both are built from shipped text only, so the pipeline runs with no hub access.
The folder is a normal Hugging Face checkpoint (safetensors, config, tokenizer,
generation config), loadable by ``from_pretrained``, vLLM and lm-eval.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from spag.data.tables import atomic_dir
from spag.errors import SpagInputError
from spag.models.settings import TinyModelSettings

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


def iter_corpus_text(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    """Yield every string found in the given text, JSON or YAML files."""
    import yaml

    def walk(obj) -> Iterator[str]:
        if isinstance(obj, str):
            yield obj
        elif isinstance(obj, dict):
            for v in obj.values():
                yield from walk(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from walk(v)

    for p in map(Path, paths):
        if not p.is_file():
            raise SpagInputError(f"tokenizer corpus file not found: {p}")
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            yield from walk(json.loads(text))
        elif p.suffix in (".yaml", ".yml"):
            yield from walk(yaml.safe_load(text))
        else:
            yield from text.splitlines()


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE tokenizer; return a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[UNK, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # BOS is added by the tokenizer itself, as Llama's does: exactly one per encoded text.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=None,  # as Llama: no pad token; training pads with EOS
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )


def tiny_config(
    *,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int | None = None,
    head_dim: int | None = TinyModelSettings.head_dim,
    max_position_embeddings: int = 2048,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
):
    """The tiny model's ``LlamaConfig`` (untied embeddings, float32)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        # Unset, LlamaConfig derives it (hidden_size / num_heads), as before the setting.
        **({"head_dim": head_dim} if head_dim else {}),
        max_position_embeddings=max_position_embeddings,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=None,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )


def build_tiny_model(
    corpus: list[str | os.PathLike],
    output: str | os.PathLike,
    *,
    vocab_size: int = TinyModelSettings.vocab_size,
    hidden_size: int = TinyModelSettings.hidden_size,
    intermediate_size: int = TinyModelSettings.intermediate_size,
    num_layers: int = TinyModelSettings.num_layers,
    num_heads: int = TinyModelSettings.num_heads,
    head_dim: int | None = TinyModelSettings.head_dim,
    num_kv_heads: int | None = None,
    vocab_rows: int | None = None,
    max_position_embeddings: int = 2048,
    seed: int,
) -> Path:
    """Build the tokenizer and a randomly initialised Llama into ``output`` (atomically).

    ``num_kv_heads`` below ``num_heads`` gives grouped-query attention (Llama-3, Qwen,
    SmolLM2); ``vocab_rows`` above the tokenizer's size pads the embedding and output
    layers, as released models do, so that a benchmark model pays a real vocabulary's cost.
    """
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    texts = [t for t in iter_corpus_text(corpus) if t.strip()]
    if not texts:
        raise SpagInputError(f"tokenizer corpus is empty: {', '.join(map(str, corpus))}")
    tokenizer = train_tokenizer(texts, vocab_size)
    kv_heads = num_kv_heads or num_heads
    if num_heads % kv_heads:
        raise SpagInputError(f"--num-kv-heads {kv_heads} must divide --num-heads {num_heads}")
    rows = vocab_rows or len(tokenizer)
    if rows < len(tokenizer):
        raise SpagInputError(
            f"--vocab-rows {rows} is below the tokenizer's {len(tokenizer)} tokens"
        )
    torch.manual_seed(seed)
    config = tiny_config(
        vocab_size=rows,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    gen = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    with atomic_dir(output) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        gen.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(output)
