"""``spag estimate``: an epoch's GPU-hours per rule family and its wall time on the
machines given, from the config's token counts and the measured throughputs of
:mod:`spag.ops.estimate`, beside the research code's way (one game at a time)."""

from __future__ import annotations

import argparse

from spag.commands import add_configfile


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_configfile(p)
    p.add_argument(
        "--model",
        default=None,
        help="a model folder or a config.json (default: the config's base model, where "
        "its config can be read before any job)",
    )
    p.add_argument("--card", required=True, help="the GPU family, e.g. H100-80GB, H200, A100-80GB")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs a node (default: resources.train.gpus)",
    )
    p.add_argument("--nodes", type=int, default=None, help="nodes (default: resources.train.nodes)")
    p.add_argument(
        "--reply-tokens",
        type=float,
        default=None,
        help="a message's mean length in tokens (default: selfplay.max_new_tokens, an upper bound)",
    )


def read_model_size(config: dict, model: str | None):
    """The model's :class:`spag.ops.estimate.ModelSize` and where it was read: ``model``
    (a folder or a config.json), else the config's base model where readable now."""
    from spag.config import _base_model_config
    from spag.errors import SpagInputError
    from spag.ops.capacity import read_model, text_config
    from spag.ops.estimate import ModelSize, model_size

    if model:
        cfg, parameters = read_model(model)
        size = model_size(cfg)
        return ModelSize(parameters or size.parameters, size.layers), model
    found = _base_model_config(config["base_model"])
    if found is None:
        raise SpagInputError(
            f"base_model.name_or_path {config['base_model']['name_or_path']}: its config "
            "cannot be read before it is downloaded; give --model (a folder or a config.json)"
        )
    return model_size(text_config(found.to_dict())), config["base_model"]["name_or_path"]


def run(args: argparse.Namespace) -> int:
    from spag.config import read_config_files, validate_config
    from spag.errors import SpagInputError
    from spag.ops.estimate import epoch_estimate

    config, given = read_config_files(args.configfile)
    config = validate_config(config, source=" + ".join(args.configfile), given=given)
    train = config["resources"]["train"]
    gpus = args.gpus_per_node or max(int(train.get("gpus", 0) or 0), 1)
    nodes = args.nodes or max(int(train.get("nodes", 1)), 1)
    if gpus < 1 or nodes < 1:
        raise SpagInputError("--gpus-per-node and --nodes must be at least 1")
    model, where = read_model_size(config, args.model)
    print(f"{' + '.join(args.configfile)}")
    print(epoch_estimate(config, model, args.card, gpus, nodes, args.reply_tokens, where))
    return 0
