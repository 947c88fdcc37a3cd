"""``spag build-tiny-model``: the embedded default's base model."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", nargs="+", required=True, help="text/JSON/YAML files")
    p.add_argument("--output", required=True, help="model folder to create")
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--intermediate-size", type=int, default=192)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-kv-heads", type=int, default=None, help="default: --num-heads")
    p.add_argument(
        "--vocab-rows", type=int, default=None, help="embedding rows (default: the tokenizer's)"
    )
    p.add_argument("--max-position-embeddings", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from spag.models.tiny import build_tiny_model

    build_tiny_model(
        args.corpus,
        args.output,
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        vocab_rows=args.vocab_rows,
        max_position_embeddings=args.max_position_embeddings,
        seed=args.seed,
    )
    return 0
