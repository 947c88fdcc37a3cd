"""Loader of the spag_tiny_reasoning task: the JSONL file beside this module, no hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("spag_tiny_reasoning.jsonl")


def load_local(**_options: Any):
    """Return the task's DatasetDict (one ``test`` split) from the shipped JSONL file."""
    import datasets

    with DATA_FILE.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
