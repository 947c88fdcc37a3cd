# Checks before any job, and the environment that jobs inherit:
# the run's backend and trackers, the config's inputs, offline mode, the `spag` on
# PATH, tracking names and the resolved config. No rules.

import json
import os
import sys
from pathlib import Path

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from spag.config import (
    check_backend_available,
    check_prompts,
    check_run_inputs,
    check_word_source,
)
from spag.ops.provenance import ENV_CONFIG
from spag.ops.tracking import check_trackers_available, workflow_environment

if not workflow.remote_exec:
    # Only conda: no rule names a container.
    _env_per_rule = (
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    )
    check_backend_available(config, env_per_rule=_env_per_rule)
    if not _env_per_rule:
        # Jobs run beside Snakemake: a tracker it cannot import would stop training.
        check_trackers_available(config["tracking"]["report_to"])

if config["offline"]:
    # The embedded default never waits on the hub; jobs inherit this.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Jobs call the `spag` installed beside this Snakemake (e.g. `.venv/bin/snakemake`
# run without activating the environment).
_bindir = Path(sys.executable).parent
if (_bindir / "spag").exists():
    os.environ.update(PATH=os.pathsep.join([str(_bindir), os.environ.get("PATH", "")]))

# The prompts file is read at every start: it is small, and a changed one reruns play.
check_prompts(config)
# The word source is read before any job until the word lists exist.
if not Path(WORDS_TRAIN).exists():
    check_word_source(config)
# The base model's inputs are checked before any job, until the base model is built
# (then they are no longer read, and the check would only slow every start).
if not Path(BASE_MODEL).exists():
    check_run_inputs(config)

# Tracking names reach the jobs through the environment (spag.ops.tracking): renaming a
# run or adding a tracker reruns no job.
os.environ.update(workflow_environment(config, ".", tracking_dir=result("tracking")))
RESOLVED_CONFIG = json.dumps(config, sort_keys=True, default=str)
os.environ[ENV_CONFIG] = RESOLVED_CONFIG
