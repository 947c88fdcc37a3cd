# Inputs of the run: target words, the base model, instruction (SFT) data.


rule target_words:
    input:
        stopwords=config["words"]["stopwords"],
        source=(
            []
            if config["words"]["source"] == "wordfreq"
            else config["words"]["source"]
        ),
    output:
        train=WORDS_TRAIN,
        test=WORDS_TEST,
    log:
        log_path("target_words.log"),
    benchmark:
        bench_path("target_words.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        source=config["words"]["source"],
        args=cli_args(
            num_train=config["words"]["num_train"],
            num_test=config["words"]["num_test"],
            min_length=config["words"]["min_length"],
            max_length=config["words"]["max_length"],
            seed=config["seed"],
        ),
    shell:
        "exec spag target-words --source {params.source:q} --stopwords {input.stopwords:q}"
        " --output-train {output.train:q} --output-test {output.test:q} {params.args}"
        " > {log:q} 2>&1"


if TINY_BASE:

    rule base_model:
        input:
            corpus=config["base_model"]["tiny"]["corpus"],
        output:
            directory(BASE_MODEL),
        log:
            log_path("base_model.log"),
        benchmark:
            bench_path("base_model.tsv")
        conda:
            "../envs/train.yaml"
        resources:
            **job_resources("cpu"),
        params:
            args=cli_args(
                vocab_size=config["base_model"]["tiny"]["vocab_size"],
                hidden_size=config["base_model"]["tiny"]["hidden_size"],
                intermediate_size=config["base_model"]["tiny"]["intermediate_size"],
                num_layers=config["base_model"]["tiny"]["num_layers"],
                num_heads=config["base_model"]["tiny"]["num_heads"],
                seed=config["seed"],
            ),
        shell:
            "exec spag build-tiny-model --corpus {input.corpus:q} --output {output:q} {params.args}"
            " > {log:q} 2>&1"

else:

    rule base_model:
        input:
            gguf=base_model_gguf(),
        output:
            directory(BASE_MODEL),
        log:
            log_path("base_model.log"),
        benchmark:
            bench_path("base_model.tsv")
        conda:
            "../envs/train.yaml"
        resources:
            **job_resources("cpu"),
        params:
            name=config["base_model"]["name_or_path"],
            args=cli_args(
                revision=config["base_model"]["revision"],
                trust_remote_code=config["base_model"]["trust_remote_code"],
                gguf_file=config["base_model"]["gguf_file"],
            ),
        shell:
            "exec spag prepare-base-model --name-or-path {params.name:q} --output {output:q}"
            " {params.args} > {log:q} 2>&1"


rule sft_data:
    input:
        config["data"]["sft"],
    output:
        SFT_DATA,
    log:
        log_path("sft_data.log"),
    benchmark:
        bench_path("sft_data.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        args=cli_args(max_rows=config["data"]["sft_max_rows"], seed=config["seed"]),
    shell:
        "exec spag prepare-sft --input {input:q} --output {output:q} {params.args} > {log:q} 2>&1"
