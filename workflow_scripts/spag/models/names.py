"""The run's models by name: ``base``, ``imitation`` (M0), ``epoch<e>`` (M(e)).

The rules name evaluation jobs and tables by these names, and the tables order their
rows by the position this module gives.
"""

from __future__ import annotations

import re

from spag.errors import SpagInputError


def model_order(name: str) -> int:
    """Position of a model in the run: base -1, imitation (M0) 0, epoch e -> e."""
    if name == "base":
        return -1
    if name in ("imitation", "epoch0", "M0"):
        return 0
    m = re.fullmatch(r"(?:epoch|M)(\d+)", name)
    if m:
        return int(m.group(1))
    raise SpagInputError(f"model name '{name}': expected base, imitation or epoch<N>")
