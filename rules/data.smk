# Inputs of the run: target words, the base model, instruction (SFT) data.
#
# rule          spag step                 package module (spag.)
# target_words  target-words              commands/target_words.py, data/words.py
#               deals (a dealt game)      commands/deals.py
# base_model    build-tiny-model (tiny)   commands/build_tiny_model.py, models/tiny.py
#               prepare-base-model        commands/prepare_base_model.py, ops/base_model.py
# sft_data      prepare-sft               commands/prepare_sft.py, data/formats.py

TINY_BASE = (
    config["base_model"]["name_or_path"] == "tiny"
    and not config["base_model"]["gguf_file"]
)


# A game that deals its secrets (Kuhn Poker) lists them; Taboo's come from the word source.
if GAME.deals is None:
    SECRETS_STEP = dict(
        input=dict(
            stopwords=config["words"]["stopwords"],
            source=(
                []
                if config["words"]["source"] == "wordfreq"
                else config["words"]["source"]
            ),
        ),
        params=dict(source=config["words"]["source"], args=words_args()),
        shell=(
            "exec spag target-words --source {params.source:q} --stopwords {input.stopwords:q}"
            " --output-train {output.train:q} --output-test {output.test:q} {params.args}"
            " > {log:q} 2>&1"
        ),
    )
else:
    SECRETS_STEP = dict(
        input=dict(),
        params=dict(
            args=cli_flags(
                game=GAME.name, game_settings=config["game"]["settings"] or None
            )
        ),
        shell=(
            "exec spag deals --output-train {output.train:q}"
            " --output-test {output.test:q} {params.args} > {log:q} 2>&1"
        ),
    )


rule target_words:
    input:
        **SECRETS_STEP["input"],
    output:
        train=WORDS_TRAIN,
        test=WORDS_TEST,
    log:
        log_path("target_words.log"),
    benchmark:
        bench_path("target_words.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        **SECRETS_STEP["params"],
    shell:
        SECRETS_STEP["shell"]


# The base model is built (the embedded tiny model) or prepared (a hub id, a local
# folder, a GGUF file): one rule, whose inputs, settings and step depend on which.
if TINY_BASE:
    _tiny = config["base_model"]["tiny"]
    BASE_MODEL_STEP = dict(
        input=dict(corpus=_tiny["corpus"]),
        params=dict(
            args=cli_flags(
                vocab_size=_tiny["vocab_size"],
                hidden_size=_tiny["hidden_size"],
                intermediate_size=_tiny["intermediate_size"],
                num_layers=_tiny["num_layers"],
                num_heads=_tiny["num_heads"],
                head_dim=_tiny["head_dim"],
                seed=config["seed"],
            )
        ),
        shell=(
            "exec spag build-tiny-model --corpus {input.corpus:q} --output {output:q} {params.args}"
            " > {log:q} 2>&1"
        ),
    )
else:
    _base = config["base_model"]
    BASE_MODEL_STEP = dict(
        # A local GGUF is an input: a changed file rebuilds the base model and what follows.
        input=dict(gguf=[_base["gguf_file"]] if _base["gguf_file"] else []),
        params=dict(
            name=_base["name_or_path"],
            args=cli_flags(
                revision=_base["revision"],
                trust_remote_code=_base["trust_remote_code"],
                gguf_file=_base["gguf_file"],
            ),
        ),
        shell=(
            "exec spag prepare-base-model --name-or-path {params.name:q} --output {output:q}"
            " {params.args} > {log:q} 2>&1"
        ),
    )


rule base_model:
    input:
        **BASE_MODEL_STEP["input"],
    output:
        directory(BASE_MODEL),
    log:
        log_path("base_model.log"),
    benchmark:
        bench_path("base_model.tsv")
    conda:
        gpu_env("train")
    resources:
        **job_resources("cpu"),
    params:
        **BASE_MODEL_STEP["params"],
    shell:
        BASE_MODEL_STEP["shell"]


rule sft_data:
    input:
        config["data"]["sft"],
    output:
        SFT_DATA,
    log:
        log_path("sft_data.log"),
    benchmark:
        bench_path("sft_data.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        args=cli_flags(max_rows=config["data"]["sft_max_rows"], seed=config["seed"]),
    shell:
        "exec spag prepare-sft --input {input:q} --output {output:q} {params.args} > {log:q} 2>&1"
