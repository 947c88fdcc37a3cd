"""SPAG: self-play of Adversarial Taboo to improve an LLM's reasoning."""

__version__ = "0.1.0"
