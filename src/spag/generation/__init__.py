"""Text generation for the game: the backend interface and the registry of backends."""

from spag.generation.base import Backend, Reply, derive_seed
from spag.generation.registry import BACKENDS, backend_options, load_backend

__all__ = ["BACKENDS", "Backend", "Reply", "backend_options", "derive_seed", "load_backend"]
