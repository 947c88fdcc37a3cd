"""``spag score-ref``: add ``ref_logprob`` (sequence mean log-prob) under the reference model.

The flags, their defaults and help come from ``spag.training.settings.ScoreRefConfig``.
"""

from __future__ import annotations

import argparse
import dataclasses

from spag.settings import add_arguments as add_settings
from spag.settings import from_arguments
from spag.training.settings import ScoreRefConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings(p, ScoreRefConfig)


def run(args: argparse.Namespace) -> int:
    from spag.training.scoring import score_file

    settings = dataclasses.asdict(from_arguments(ScoreRefConfig, args))
    score_file(settings.pop("model"), settings.pop("samples"), settings.pop("output"), **settings)
    return 0
