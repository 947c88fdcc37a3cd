"""What makes a folder carry a tokenizer (one list for the base model's checks and the backends)."""

from __future__ import annotations

# Files any one of which makes a folder carry its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
