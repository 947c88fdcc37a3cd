# SPAG: self-play of Adversarial Taboo to improve an LLM's reasoning.
# `snakemake spag_epoch3` builds M3 and its evaluation; `snakemake -n spag_epoch3`
# shows the plan. See README.md.

import os

from snakemake.utils import min_version

from spag.config import validate_config

min_version("9.14.1")

# envs/*.yaml install this project as `-e "${SPAG_PROJECT_DIR}[extra]"`: conda runs their
# pip lines from the env file's copy under .snakemake/conda/ (or --conda-prefix), where a
# relative path names nothing; pip expands ${VAR} there and conda inherits this environment.
# Set here, not asked of the user (hence no `envvars:`).
os.environ.update(SPAG_PROJECT_DIR=workflow.basedir)


configfile: "config.yaml"


# Every rule file reads the validated config, the schema's defaults filled in.
# Keys a game cannot use are refused where the user gave them: over config.yaml.
validate_config(
    config, source="config", given=workflow.config_settings.overwrite_config
)


# Shared by the stage files below: where files live and the run's targets (paths), the
# checks before any job and the jobs' environment (setup), how jobs run and the flags
# rules pass to `spag` (resources). What one stage alone uses sits in a file it includes.
include: "rules/paths.smk"
include: "rules/setup.smk"
include: "rules/resources.smk"


wildcard_constraints:
    epoch=r"[1-9][0-9]*",
    shard=r"[0-9]{3}",
    model=r"base|imitation|epoch[1-9][0-9]*",


include: "rules/data.smk"
include: "rules/imitation.smk"
include: "rules/selfplay.smk"
include: "rules/spag.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
include: "rules/preflight.smk"
include: "rules/calibrate.smk"


report: "report/workflow.rst"


rule all:
    default_target: True
    input:
        epoch_targets(EPOCHS),
        REPORT_TARGETS,


rule imitation:
    input:
        imitation_targets(),


# spag_epoch1 ... spag_epochN: M(e) and its evaluation.
for _epoch in range(1, EPOCHS + 1):

    rule:
        name:
            f"spag_epoch{_epoch}"
        input:
            epoch_targets(_epoch),
