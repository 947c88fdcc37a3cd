"""How a step loads a model, declared once for every step that loads one (play, scoring,
training, the reasoning evaluation): model code from the folder stays off unless the
config's ``base_model.trust_remote_code`` says so, and the device is chosen per job."""

from __future__ import annotations

from dataclasses import dataclass

from spag.ops import DEVICES
from spag.settings import opt


@dataclass(frozen=True, kw_only=True)
class ModelLoading:
    """The defaults of every step's ``--trust-remote-code`` and ``--device``."""

    trust_remote_code: bool = opt(False, "let transformers run the model folder's own code")
    device: str = opt(
        "auto",
        "cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
        choices=DEVICES,
    )
