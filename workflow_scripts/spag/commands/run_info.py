"""``spag run-info``: what produced this run's results, in one JSON file.

The project's version and commit (and whether the checkout had uncommitted
changes), this host's library versions, the config digest and the full resolved
config, and the job record of every output (host, GPUs, versions, seconds).
"""

from __future__ import annotations

import argparse
import json
import logging
import os

from spag.ops.provenance import ENV_CONFIG

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--outputs", nargs="+", required=True, help="the run's outputs")
    p.add_argument(
        "--config-json",
        default=os.environ.get(ENV_CONFIG),
        help=f"the resolved config, as JSON text (default: the environment's {ENV_CONFIG}, "
        "which the workflow sets)",
    )
    p.add_argument("--project-dir", required=True, help="the workflow's checkout (git)")
    p.add_argument("--output", required=True, help="run_info.json to write")


def run(args: argparse.Namespace) -> int:
    from spag.data.tables import atomic_path
    from spag.errors import SpagInputError
    from spag.ops.provenance import git_info, host_info, read_job_records
    from spag.ops.tracking import config_digest

    if not args.config_json:
        raise SpagInputError(f"--config-json not given and {ENV_CONFIG} not set")
    try:
        config = json.loads(args.config_json)
    except ValueError as exc:
        raise SpagInputError(f"--config-json: not JSON ({exc})") from None
    jobs = read_job_records(args.outputs)
    info = {
        "git": git_info(args.project_dir),
        "config_digest": config_digest(config),
        "summary_host": host_info(),
        "jobs": sorted(jobs, key=lambda j: j["output"]),
        "hosts": sorted({j["hostname"] for j in jobs}),
        "gpus": sorted({g for j in jobs for g in j.get("gpus", [])}),
        "config": config,
    }
    with atomic_path(args.output, suffix=".json.tmp") as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")
    log.info(
        "wrote %s: commit %s, config %s, %d job records",
        args.output,
        (info["git"] or {}).get("commit"),
        info["config_digest"],
        len(jobs),
    )
    return 0
