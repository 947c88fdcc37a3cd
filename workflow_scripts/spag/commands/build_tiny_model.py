"""``spag build-tiny-model``: the embedded default's base model."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from spag.models.settings import TinyModelSettings
from spag.settings import add_arguments as add_setting_arguments
from spag.settings import from_arguments, opt, req


@dataclass(frozen=True, kw_only=True)
class BuildTinyModelConfig(TinyModelSettings):
    """One ``spag build-tiny-model`` job: the config's ``base_model.tiny`` and a few
    shapes only a by-hand build sets."""

    output: str = req("model folder to create")
    num_kv_heads: int | None = opt(None, "key/value heads (default: --num-heads)", ge=1)
    vocab_rows: int | None = opt(None, "embedding rows (default: the tokenizer's)", ge=1)
    max_position_embeddings: int = opt(2048, "longest position", ge=1)
    seed: int = opt(0, "seed of the initial weights")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_arguments(p, BuildTinyModelConfig)


def run(args: argparse.Namespace) -> int:
    from spag.models.tiny import build_tiny_model

    c: BuildTinyModelConfig = from_arguments(BuildTinyModelConfig, args)
    build_tiny_model(
        list(c.corpus),
        c.output,
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_layers=c.num_layers,
        num_heads=c.num_heads,
        head_dim=c.head_dim,
        num_kv_heads=c.num_kv_heads,
        vocab_rows=c.vocab_rows,
        max_position_embeddings=c.max_position_embeddings,
        seed=c.seed,
    )
    return 0
