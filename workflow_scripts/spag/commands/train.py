"""``spag train``: imitation (SFTwithKL) or SPAG (OfflinePO) training with the HF Trainer.

Run it directly (one process) or as ``torchrun --no-python --nproc_per_node N spag train ...``.
The flags, their defaults and help come from ``spag.training.settings.TrainConfig``.
"""

from __future__ import annotations

import argparse

from spag.settings import add_arguments as add_settings
from spag.settings import from_arguments
from spag.training.settings import TrainConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings(p, TrainConfig)


def run(args: argparse.Namespace) -> int:
    from spag.training.run import train

    train(from_arguments(TrainConfig, args))
    return 0
