# Calibration: `snakemake calibrate` (with or without --profile slurm) runs a few minutes
# of each GPU family's real work on the run's own machines, model, engine and settings,
# before the run: the real rules on a small input, each job stopped after
# calibration.minutes (spag.ops.calibration). Its jobs need only the base model, the
# target words and the imitation samples, which are the run's own first jobs and stay
# done. `spag estimate` and `spag status` read results/calibration/<family>.json.
#
# rule                        spag step            package module (spag.)
# calibration_plan            (printf)             ops/calibration.py (the cost bound)
# calibrate_selfplay          play                 as the rule selfplay
# calibration_samples         calibration-samples  commands/calibration_samples.py
# calibrate_score             score-ref            as the rule score_imitation
# calibrate_train_<stage>     train                as the rule train_imitation
# calibrate                   calibration-report   commands/calibration_report.py, ops/calibration.py

from spag.config import num_secrets
from spag.ops.calibration import (
    calibration_gpus,
    calibration_shards,
    calibration_train_flags,
    cost_bound,
)
from spag.ops.preflight import training_memory_plan

CAL = RESULTS / "calibration"
CAL_MINUTES = config["calibration"]["minutes"]
CAL_PLAN = str(CAL / "plan.txt")


localrules:
    calibration_plan,
    calibration_samples,
    calibrate,


# The bound, printed before any calibration job starts (each job takes it as input).
rule calibration_plan:
    output:
        CAL_PLAN,
    log:
        log_path("calibration", "plan.log"),
    conda:
        "../envs/spag.yaml"
    params:
        text=cost_bound(config, calibration_gpus(config)),
    shell:
        "printf '%s\\n' {params.text:q} > {output:q} && tee {log:q} < {output:q}"


# One engine batch of the first epoch's games: shard 0 of as many shards as hold it.
use rule selfplay as calibrate_selfplay with:
    input:
        model=BASE_MODEL,
        words=WORDS_TRAIN,
        prompts=config["game"]["prompts"],
        plan=CAL_PLAN,
    output:
        str(CAL / "epoch{epoch}" / "selfplay.parquet"),
    log:
        log_path("calibration", "epoch{epoch}", "selfplay.log"),
    benchmark:
        bench_path("calibration", "epoch{epoch}", "selfplay.tsv")
    resources:
        **{**job_resources("selfplay"), "runtime": CAL_MINUTES},
    params:
        num_shards=calibration_shards(config, num_secrets(config, "train")),
        shard=0,


rule calibration_samples:
    input:
        samples=IMITATION_SAMPLES,
        plan=CAL_PLAN,
    output:
        str(CAL / "samples.parquet"),
    log:
        log_path("calibration", "samples.log"),
    conda:
        "../envs/spag.yaml"
    params:
        rows=config["calibration"]["samples"],
        seed=config["seed"],
    shell:
        "exec spag calibration-samples --input {input.samples:q} --output {output:q}"
        " --rows {params.rows} --seed {params.seed} > {log:q} 2>&1"


use rule score_imitation as calibrate_score with:
    input:
        samples=rules.calibration_samples.output[0],
        model=BASE_MODEL,
    output:
        str(CAL / "scored.parquet"),
    log:
        log_path("calibration", "score.log"),
    benchmark:
        bench_path("calibration", "score.tsv")
    resources:
        **{**job_resources("score"), "runtime": CAL_MINUTES},


# Each training stage: a few optimizer steps at its shape on the scored samples.
use rule train_imitation as calibrate_train_imitation with:
    input:
        samples=rules.calibrate_score.output[0],
        model=BASE_MODEL,
    output:
        model=temp(directory(str(CAL / "train_imitation" / "model"))),
        loss=str(CAL / "train_imitation" / "loss_log.tsv"),
    log:
        log_path("calibration", "train_imitation.log"),
    benchmark:
        bench_path("calibration", "train_imitation.tsv")
    resources:
        **{**job_resources("train"), "runtime": CAL_MINUTES},
    params:
        checkpoints=str(CAL / "train_imitation" / "checkpoints"),
        args=calibration_train_flags(config, "imitation"),


use rule train_imitation as calibrate_train_spag with:
    input:
        samples=rules.calibrate_score.output[0],
        model=BASE_MODEL,
    output:
        model=temp(directory(str(CAL / "train_spag" / "model"))),
        loss=str(CAL / "train_spag" / "loss_log.tsv"),
    log:
        log_path("calibration", "train_spag.log"),
    benchmark:
        bench_path("calibration", "train_spag.tsv")
    resources:
        **{**job_resources("train"), "runtime": CAL_MINUTES},
    params:
        **algorithm("objective", "spag"),
        checkpoints=str(CAL / "train_spag" / "checkpoints"),
        args=calibration_train_flags(config, "spag"),


rule calibrate:
    input:
        selfplay=rules.calibrate_selfplay.output[0].format(epoch=1),
        selfplay_log=log_path("calibration", "epoch1", "selfplay.log"),
        selfplay_bench=bench_path("calibration", "epoch1", "selfplay.tsv"),
        score=rules.calibrate_score.output[0],
        score_log=log_path("calibration", "score.log"),
        score_bench=bench_path("calibration", "score.tsv"),
        imitation=str(CAL / "train_imitation" / "model"),
        imitation_loss=str(CAL / "train_imitation" / "loss_log.tsv"),
        imitation_log=log_path("calibration", "train_imitation.log"),
        imitation_bench=bench_path("calibration", "train_imitation.tsv"),
        spag=str(CAL / "train_spag" / "model"),
        spag_loss=str(CAL / "train_spag" / "loss_log.tsv"),
        spag_log=log_path("calibration", "train_spag.log"),
        spag_bench=bench_path("calibration", "train_spag.tsv"),
    output:
        expand(str(CAL / "{family}.json"), family=calibration_gpus(config)),
    log:
        log_path("calibration", "report.log"),
    conda:
        "../envs/spag.yaml"
    params:
        out=lambda wildcards, output: os.path.dirname(output[0]),
        training_gib=lambda wildcards: cli_flags(
            training_gib=training_memory_plan(config, BASE_MODEL)
        ),
    shell:
        "exec spag calibration-report --selfplay {input.selfplay:q} {input.selfplay_log:q}"
        " {input.selfplay_bench:q} --score {input.score:q} {input.score_log:q}"
        " {input.score_bench:q} --train-imitation {input.imitation:q}"
        " {input.imitation_loss:q} {input.imitation_log:q} {input.imitation_bench:q}"
        " --train-spag {input.spag:q} {input.spag_loss:q} {input.spag_log:q}"
        " {input.spag_bench:q} --output-dir {params.out:q} {params.training_gib}"
        " 2>&1 | tee {log:q}"
