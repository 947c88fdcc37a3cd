"""Generation backends for self-play: ``hf`` (transformers, CPU or GPU) and ``vllm`` (GPU)."""

from spag.generation.base import BACKENDS, Backend, Reply, derive_seed, load_backend

__all__ = ["BACKENDS", "Backend", "Reply", "derive_seed", "load_backend"]
