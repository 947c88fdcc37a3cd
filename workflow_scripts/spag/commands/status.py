"""``spag status``: where the run in this folder stands (see :mod:`spag.ops.status`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--configfile",
        nargs="+",
        default=["config.yaml"],
        help="the run's config files, in the order given to snakemake (default: config.yaml)",
    )
    p.add_argument("--directory", default=".", help="the workflow folder (default: here)")


def run(args: argparse.Namespace) -> int:
    import yaml

    from spag.config import validate_config
    from spag.errors import SpagInputError
    from spag.ops.status import format_status, require_run, run_status

    root = Path(args.directory)
    require_run(root)  # before the config files: their absence would be the lesser news
    config: dict = {}
    given: dict = {}  # the layers over the first (the workflow's own config.yaml)
    for i, name in enumerate(args.configfile):
        path = Path(name) if Path(name).is_absolute() else root / name
        try:
            layer = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise SpagInputError(f"--configfile {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SpagInputError(f"--configfile {path}: not YAML ({exc})") from None
        _merge(config, layer)
        if i:
            _merge(given, layer)
    validate_config(config, source=" + ".join(args.configfile), given=given)
    print(format_status(run_status(config, root)))
    return 0


def _merge(base: dict, layer: dict) -> None:
    # As Snakemake layers config files: nested sections merge, other values replace.
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
