# Evaluation of M(e): greedy games against a fixed opponent on the held-out words,
# reasoning benchmarks (lm-evaluation-harness), and the epoch's summary row. The base
# model and M0 play the same games against the same opponent: the rows M(e) is read
# against.

from spag.report.summary import model_order


rule eval_play:
    input:
        model=current_model,
        opponent=opponent_model,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        EVAL_GAMES,
    log:
        log_path("epoch{epoch}", "eval_play.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_play.tsv")
    conda:
        backend_env()
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        threads=threads_arg,
        seed=config["seed"],
        opponent=opponent_arg,
        opponent_name=opponent_name_arg(),
        args=eval_play_args(),
    shell:
        "exec spag play --model {input.model:q} --opponent {params.opponent:q}"
        " --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --epoch {wildcards.epoch} --seed {params.seed} --model-name epoch{wildcards.epoch}"
        " {params.opponent_name} --threads {params.threads} {params.args} > {log:q} 2>&1"


rule eval_games:
    input:
        EVAL_GAMES,
    output:
        EVAL_TABLE,
    log:
        log_path("epoch{epoch}", "eval_games.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_games.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    shell:
        "exec spag eval-games --episodes {input:q} --output {output:q} --epoch {wildcards.epoch}"
        " --model-name epoch{wildcards.epoch} > {log:q} 2>&1"


rule eval_play_baseline:
    input:
        model=named_model,
        opponent=opponent_model,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        BASELINE_GAMES,
    log:
        log_path("eval", "play_{model}.log"),
    benchmark:
        bench_path("eval", "play_{model}.tsv")
    wildcard_constraints:
        model="|".join(BASELINE_MODELS),
    conda:
        backend_env()
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        threads=threads_arg,
        seed=config["seed"],
        # -1 for the base model, 0 for M0: the epoch column of the tables.
        epoch=lambda wildcards: model_order(wildcards.model),
        opponent=opponent_arg,
        opponent_name=opponent_name_arg(),
        args=eval_play_args(),
    shell:
        "exec spag play --model {input.model:q} --opponent {params.opponent:q}"
        " --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --epoch={params.epoch} --seed {params.seed} --model-name {wildcards.model}"
        " {params.opponent_name} --threads {params.threads} {params.args} > {log:q} 2>&1"


rule eval_games_baseline:
    input:
        BASELINE_GAMES,
    output:
        BASELINE_TABLE,
    log:
        log_path("eval", "games_{model}.log"),
    benchmark:
        bench_path("eval", "games_{model}.tsv")
    wildcard_constraints:
        model="|".join(BASELINE_MODELS),
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        epoch=lambda wildcards: model_order(wildcards.model),
    shell:
        "exec spag eval-games --episodes {input:q} --output {output:q} --epoch={params.epoch}"
        " --model-name {wildcards.model} > {log:q} 2>&1"


rule eval_reasoning:
    input:
        model=named_model,
    output:
        REASONING,
    log:
        log_path("eval", "reasoning_{model}.log"),
    benchmark:
        bench_path("eval", "reasoning_{model}.tsv")
    conda:
        "../envs/eval.yaml"
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        args=reasoning_args(),
    shell:
        "exec spag eval-reasoning --model {input.model:q} --model-name {wildcards.model}"
        " --output {output:q} {params.args} > {log:q} 2>&1"


rule epoch_summary:
    input:
        outcomes=OUTCOMES,
        samples=SAMPLES,
        loss=LOSS,
        eval_games=EVAL_TABLE,
        reasoning=REASONING.replace("{model}", "epoch{epoch}"),
        shards=shards_of_epoch,
        shard_benchmarks=shard_benchmarks_of_epoch,
    output:
        EPOCH_SUMMARY,
    log:
        log_path("epoch{epoch}", "summary.log"),
    benchmark:
        bench_path("epoch{epoch}", "summary.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    shell:
        "exec spag summarize-epoch --epoch {wildcards.epoch} --outcomes {input.outcomes:q}"
        " --samples {input.samples:q} --loss {input.loss:q} --eval-games {input.eval_games:q}"
        " --reasoning {input.reasoning:q} --selfplay {input.shards:q}"
        " --selfplay-benchmarks {input.shard_benchmarks:q} --output {output:q}"
        " > {log:q} 2>&1"
