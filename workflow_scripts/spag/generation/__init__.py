"""Text generation for the game: the backend interface, the sampling settings and the registry
of backends."""

from spag.generation.base import Backend, Reply, derive_seed
from spag.generation.registry import BACKENDS, backend_options, load_backend
from spag.generation.settings import Sampling

__all__ = [
    "BACKENDS",
    "Backend",
    "Reply",
    "Sampling",
    "backend_options",
    "derive_seed",
    "load_backend",
]
