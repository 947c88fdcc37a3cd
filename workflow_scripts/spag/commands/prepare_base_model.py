"""``spag prepare-base-model``: check a local model folder, fetch a hub model, or convert a GGUF."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name-or-path",
        required=True,
        help="local Hugging Face model folder (linked, not copied), a hub id owner/name, or a "
        "packaged GGUF model (smollm2-135m-instruct)",
    )
    p.add_argument(
        "--gguf-file",
        default=None,
        help="convert this local GGUF file to safetensors (--name-or-path is then a label)",
    )
    p.add_argument("--output", required=True, help="model folder (or link) to create")
    p.add_argument("--revision", default=None, help="hub branch, tag or commit (hub ids only)")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="accept a model that ships its own code (config auto_map); off by default",
    )


def run(args: argparse.Namespace) -> int:
    from spag.ops.base_model import prepare_base_model

    prepare_base_model(
        args.name_or_path,
        args.output,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
        gguf_file=args.gguf_file,
    )
    return 0
