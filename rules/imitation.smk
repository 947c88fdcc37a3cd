# Imitation learning (SFTwithKL): M0 imitates the winners of demonstration games,
# with a KL term against the base model.


rule imitation_samples:
    input:
        data=config["data"]["imitation"],
        prompts=config["game"]["prompts"],
    output:
        IMITATION_SAMPLES,
    log:
        log_path("imitation", "samples.log"),
    benchmark:
        bench_path("imitation", "samples.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        seed=config["seed"],
    shell:
        "spag imitation-samples --input {input.data:q} --prompts {input.prompts:q}"
        " --output {output:q} --seed {params.seed} > {log:q} 2>&1"


rule score_imitation:
    input:
        samples=IMITATION_SAMPLES,
        model=BASE_MODEL,
    output:
        IMITATION_SCORED,
    log:
        log_path("imitation", "score.log"),
    benchmark:
        bench_path("imitation", "score.tsv")
    conda:
        "../envs/train.yaml"
    threads: job_threads("score")
    resources:
        **job_resources("score"),
    params:
        args=score_args(config["imitation"]["max_length"]),
    shell:
        "spag score-ref --model {input.model:q} --samples {input.samples:q}"
        " --output {output:q} {params.args} > {log:q} 2>&1"


rule train_imitation:
    input:
        samples=IMITATION_SCORED,
        model=BASE_MODEL,
    output:
        model=directory(IMITATION_MODEL),
        loss=IMITATION_LOSS,
    log:
        log_path("imitation", "train.log"),
    benchmark:
        bench_path("imitation", "train.tsv")
    conda:
        "../envs/train.yaml"
    threads: job_threads("train")
    resources:
        **job_resources("train"),
    params:
        launch=train_launcher(),
        checkpoints=str(CHECKPOINTS / "imitation"),
        args=train_args("imitation"),
    shell:
        "{params.launch} spag train --model {input.model:q}"
        " --samples {input.samples:q} --output {output.model:q} --loss-log {output.loss:q}"
        " --checkpoint-dir {params.checkpoints:q} {params.args} > {log:q} 2>&1"
