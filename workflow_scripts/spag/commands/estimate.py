"""``spag estimate``: a target's time, rule by rule, from measured figures first (the
calibration's, then the run's own finished jobs: :mod:`spag.ops.timing`), and with
``--card`` an epoch's GPU-hours per rule family from the committed throughputs of
:mod:`spag.ops.estimate`, beside the research code's way (one game at a time)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spag.commands import add_configfile


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_configfile(p)
    p.add_argument("--target", default=None, help="the target timed (default: spag_epoch<epochs>)")
    p.add_argument(
        "--directory",
        default=".",
        help="the workflow folder: its calibration and finished jobs (default: here)",
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="jobs of a rule that run at once, for the wall time"
    )
    p.add_argument(
        "--model",
        default=None,
        help="with --card: a model folder or a config.json (default: the run's prepared base "
        "model, else the config's, where its config can be read before any job)",
    )
    p.add_argument(
        "--card",
        default=None,
        help="also an epoch's GPU-hours from the committed throughputs on this GPU: a "
        "datasheet name (H100-80GB, H200, A100-80GB) or the name nvidia-smi prints",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="with --card: GPUs a node (default: resources.train.gpus)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="with --card: nodes (default: resources.train.nodes)",
    )
    p.add_argument(
        "--reply-tokens",
        type=float,
        default=None,
        help="with --card: a message's mean length in tokens (default: measured, else "
        "selfplay.max_new_tokens, an upper bound)",
    )


def read_model_size(config: dict, model: str | None, directory: Path = Path(".")):
    """The model's :class:`spag.ops.estimate.ModelSize` and where it was read: ``model``
    (a folder or a config.json), else the run's prepared base model, else the config's
    base model where readable now (a folder, the local hub cache)."""
    from spag.config import _base_model_config
    from spag.errors import SpagInputError
    from spag.ops.capacity import read_model, text_config
    from spag.ops.estimate import ModelSize, model_size

    prepared = directory / "results" / "base_model"
    if model or (prepared / "config.json").is_file():
        cfg, parameters = read_model(model or prepared)
        size = model_size(cfg)
        return ModelSize(parameters or size.parameters, size.layers), model or str(prepared)
    found = _base_model_config(config["base_model"])
    if found is None:
        raise SpagInputError(
            f"base_model.name_or_path {config['base_model']['name_or_path']}: not in the local "
            "hub cache and no prepared base model here (results/base_model, made by "
            "`snakemake calibrate`); give --model (a folder or its config.json)"
        )
    return model_size(text_config(found.to_dict())), config["base_model"]["name_or_path"]


def run(args: argparse.Namespace) -> int:
    from spag.config import read_config_files, validate_config
    from spag.errors import SpagInputError
    from spag.ops.estimate import card_name, epoch_estimate

    root = Path(args.directory)
    files = [Path(n) if Path(n).is_absolute() else root / n for n in args.configfile]
    config, given = read_config_files(files)
    config = validate_config(config, source=" + ".join(args.configfile), given=given)
    print(f"{' + '.join(args.configfile)}")
    shape = None
    if (root / "Snakefile").is_file() and (root / "results").is_dir():
        from spag.ops.timing import format_times, rule_times, snakemake_plan

        target = args.target or f"spag_epoch{config['epochs']}"
        jobs = snakemake_plan(target, root, args.configfile)
        times, shape = rule_times(jobs, config, root)
        print(format_times(times, shape, args.jobs, f"{target}, from measured figures:"))
    elif args.card is None:
        raise SpagInputError(
            f"{root.resolve()}: no run here to measure from (a workflow folder with "
            "results/: `snakemake calibrate` starts one); or give --card for the committed "
            "throughputs"
        )
    else:
        print("no measured figures here yet (`snakemake calibrate` measures them)")
    if args.card is None:
        return 0
    card = card_name(args.card)
    train = config["resources"]["train"]
    gpus = args.gpus_per_node or max(int(train.get("gpus", 0) or 0), 1)
    nodes = args.nodes or max(int(train.get("nodes", 1)), 1)
    if gpus < 1 or nodes < 1:
        raise SpagInputError("--gpus-per-node and --nodes must be at least 1")
    model, where = read_model_size(config, args.model, root)
    measured = shape is not None and not shape.source.startswith("the config's caps")
    print(
        epoch_estimate(
            config,
            model,
            card,
            gpus,
            nodes,
            args.reply_tokens or (shape.reply_tokens if measured else None),
            where,
            messages=shape.messages if measured else None,
            measured_from=shape.source if measured and not args.reply_tokens else "",
        )
    )
    return 0
