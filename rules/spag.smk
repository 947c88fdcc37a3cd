# SPAG policy optimisation of one epoch: rewards, reference scores, OfflinePO.


rule assign_rewards:
    input:
        episodes=EPISODES,
        sft=SFT_DATA,
        prompts=config["game"]["prompts"],
    output:
        SAMPLES,
    log:
        log_path("epoch{epoch}", "assign_rewards.log"),
    benchmark:
        bench_path("epoch{epoch}", "assign_rewards.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        decay=config["rewards"]["decay"],
        seed=epoch_seed,
    shell:
        "exec spag assign-rewards --episodes {input.episodes:q} --output {output:q}"
        " --sft-data {input.sft:q} --decay-weight {params.decay} --seed {params.seed}"
        " --prompts {input.prompts:q} > {log:q} 2>&1"


rule score_ref:
    input:
        samples=SAMPLES,
        model=previous_model,
    output:
        SCORED,
    log:
        log_path("epoch{epoch}", "score_ref.log"),
    benchmark:
        bench_path("epoch{epoch}", "score_ref.tsv")
    conda:
        "../envs/train.yaml"
    threads: job_threads("score")
    resources:
        **job_resources("score"),
    params:
        args=score_args("spag"),
    shell:
        "exec spag score-ref --model {input.model:q} --samples {input.samples:q}"
        " --output {output:q} {params.args} > {log:q} 2>&1"


rule train_spag:
    input:
        samples=SCORED,
        model=previous_model,
    output:
        model=directory(MODEL),
        loss=LOSS,
    log:
        log_path("epoch{epoch}", "train.log"),
    benchmark:
        bench_path("epoch{epoch}", "train.tsv")
    conda:
        "../envs/train.yaml"
    threads: job_threads("train")
    resources:
        **job_resources("train"),
    params:
        launch=train_launcher(),
        checkpoints=str(CHECKPOINTS / "epoch{epoch}"),
        args=train_args("spag"),
    shell:
        "exec {params.launch} spag train --model {input.model:q}"
        " --samples {input.samples:q} --output {output.model:q} --loss-log {output.loss:q}"
        " --checkpoint-dir {params.checkpoints:q} {params.args} > {log:q} 2>&1"
