"""Every generation backend by name, loaded only when chosen (vLLM and torch are heavy).

``hf`` and ``vllm`` play a model folder; ``openai`` asks an OpenAI-compatible endpoint
(``openai:http://host:port/v1?model=NAME``). A backend's constructor takes exactly
the options it uses: an option it does not know is refused, never dropped.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.generation.base import Backend, check_model_dir
from spag.generation.settings import MODEL_BACKENDS

# name -> (module, class)
BACKENDS: dict[str, tuple[str, str]] = {
    "hf": ("spag.generation.hf_backend", "HFBackend"),
    "vllm": ("spag.generation.vllm_backend", "VLLMBackend"),
    "openai": ("spag.generation.openai_backend", "OpenAIBackend"),
}


def backend_class(name: str) -> type:
    """The class of the backend ``name``, imported now."""
    if name not in BACKENDS:
        raise SpagInputError(
            f"unknown generation backend '{name}' (choose from {', '.join(BACKENDS)})"
        )
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def backend_options(name: str) -> tuple[str, ...]:
    """The keyword options the backend ``name`` takes (besides its model or endpoint)."""
    params = list(inspect.signature(backend_class(name)).parameters.values())[1:]
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def load_backend(name: str, source: str | Path, **opts: Any) -> Backend:
    """Load backend ``name`` for ``source``: a model folder (hf, vllm) or an endpoint spec.

    ``opts`` are the backend's keyword options (``backend_options(name)``); an unknown
    one is an error naming the backend and the options it takes.
    """
    cls = backend_class(name)
    unknown = sorted(set(opts) - set(backend_options(name)))
    if unknown:
        raise SpagInputError(
            f"generation backend '{name}' does not take {', '.join(unknown)} "
            f"(it takes {', '.join(backend_options(name))})"
        )
    if name in MODEL_BACKENDS:
        source = check_model_dir(source)
    return cls(source, **opts)
