"""``spag prepare-base-model``: check a local model folder or fetch a hub model."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name-or-path",
        required=True,
        help="local Hugging Face model folder (linked, not copied) or a hub id owner/name",
    )
    p.add_argument("--output", required=True, help="model folder (or link) to create")
    p.add_argument("--revision", default=None, help="hub branch, tag or commit (hub ids only)")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="accept a model that ships its own code (config auto_map); off by default",
    )


def run(args: argparse.Namespace) -> int:
    from spag.base_model import prepare_base_model

    prepare_base_model(
        args.name_or_path,
        args.output,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
    )
    return 0
