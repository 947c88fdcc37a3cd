# Preflight: `snakemake preflight` (with or without --profile slurm) submits one short
# job per rule family, exactly like the family's real jobs (resources, environment,
# launch prefix), and prints one table of what each found (spag.ops.preflight). It runs
# every time it is asked for: the family reports are temporary inputs that
# `spag preflight-report` moves to results/preflight/<family>.json.
#
# rule                spag step         package module (spag.)
# preflight_<family>  preflight         commands/preflight.py, preflight.py, device.py
# preflight           preflight-report  commands/preflight_report.py, preflight.py

import os
import shutil


include: "preflight_units.smk"


PREFLIGHT_UNITS = preflight_units()
PREFLIGHT_WORK = result("preflight", ".work", "{family}.json")
if not workflow.remote_exec:
    # Reports of a preflight that stopped before its table are stale: checked anew.
    shutil.rmtree(os.path.dirname(PREFLIGHT_WORK), ignore_errors=True)

for _unit, (_family, _env, _launch, _spag, _flags) in PREFLIGHT_UNITS.items():

    rule:
        name:
            f"preflight_{_unit}"
        output:
            temp(PREFLIGHT_WORK.format(family=_unit)),
        log:
            log_path("preflight", f"{_unit}.log"),
        conda:
            _env
        threads: job_threads(_family)
        resources:
            **job_resources(_family),
        params:
            unit=_unit,
            launch=_launch,
            spag=_spag,
            flags=_flags,
        shell:
            "exec {params.launch} {params.spag} preflight --family {params.unit} --output {output:q}"
            " {params.flags} > {log:q} 2>&1"


localrules:
    preflight,


# No output: it runs whenever it is a target, and with it the family jobs. The table
# goes to the terminal and to the log.
rule preflight:
    input:
        expand(PREFLIGHT_WORK, family=PREFLIGHT_UNITS),
    log:
        log_path("preflight", "table.log"),
    conda:
        "../envs/spag.yaml"
    params:
        # results/preflight: the reports' folder, above their work folder
        out=lambda wildcards, input: os.path.dirname(os.path.dirname(input[0])),
        base_model=BASE_MODEL,
    shell:
        "exec spag preflight-report --inputs {input:q} --output-dir {params.out:q}"
        " --base-model {params.base_model:q} 2>&1 | tee {log:q}"
