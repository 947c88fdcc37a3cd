# Evaluation of M(e): greedy games (and, where configured, sampled ones) against a fixed
# opponent on the held-out words (one job per shard of the words, merged), reasoning
# benchmarks (lm-evaluation-harness), and the epoch's summary row. The base model and
# M0 play the same games against the same opponent: the rows M(e) is read against.
#
# rule                 spag step        package module (spag.)
# eval_play            play             commands/play.py, game/selfplay.py, generation/
# eval_play_baseline   play             commands/play.py, game/selfplay.py, generation/
# eval_merge           merge-episodes   commands/merge_episodes.py, game/merge.py
# eval_merge_baseline  merge-episodes   commands/merge_episodes.py, game/merge.py
# eval_games           eval-games       commands/eval_games.py, evaluation/games.py
# eval_games_baseline  eval-games       commands/eval_games.py, evaluation/games.py
# eval_*_sampled       (the three above for sampled games: evaluation.sampled_games_per_secret)
# eval_reasoning       eval-reasoning   commands/eval_reasoning.py, evaluation/reasoning.py
# eval_hints           score-hints      commands/score_hints.py, evaluation/hints.py
# eval_inference       score-hints      (a game with a guess: Taboo)
# eval_strategy        read-strategy    commands/read_strategy.py, evaluation/strategy.py
#                      (a solved game: Kuhn Poker)
# epoch_summary        summarize-epoch  commands/summarize_epoch.py, report/summary.py


from spag.ops.device import family_device


include: "opponent.smk"


rule eval_play:
    input:
        model=current_model,
        opponent=opponent_model,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        EVAL_SHARD,
    log:
        log_path("epoch{epoch}", "eval_play", "shard_{shard}.log"),
    benchmark:
        EVAL_SHARD_BENCHMARK
    conda:
        backend_env()
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        **algorithm("game"),
        threads=threads_arg,
        seed=config["seed"],
        num_shards=EVAL_NUM_SHARDS,
        shard=lambda wildcards: int(wildcards.shard),
        epoch=epoch_arg,
        model_name=evaluated_name,
        opponent=opponent_arg,
        opponent_name=opponent_name_arg(),
        args=eval_play_args(),
    shell:
        "exec "
        + ENGINE_SPAG
        + " play --model {input.model:q} --opponent {params.opponent:q}"
        " --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --shard-index {params.shard} --num-shards {params.num_shards}"
        " {params.epoch} --seed {params.seed} --model-name {params.model_name}"
        " {params.opponent_name} --threads {params.threads} {params.args} > {log:q} 2>&1"


rule eval_merge:
    input:
        eval_shards,
    output:
        EVAL_GAMES,
    log:
        log_path("epoch{epoch}", "eval_merge.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_merge.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        **algorithm("game"),
        game=config["game"]["name"],
    shell:
        "exec spag merge-episodes --inputs {input:q} --output {output:q} --game {params.game}"
        " > {log:q} 2>&1"


rule eval_games:
    input:
        EVAL_GAMES,
    output:
        EVAL_TABLE,
    log:
        log_path("epoch{epoch}", "eval_games.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_games.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
        epoch=epoch_arg,
        model_name=evaluated_name,
    shell:
        "exec spag eval-games --episodes {input:q} --output {output:q} {params.epoch}"
        " --model-name {params.model_name} --game {params.game} > {log:q} 2>&1"


# The base model and M0 play M(e)'s games and get its table.
use rule eval_play as eval_play_baseline with:
    input:
        model=named_model,
        opponent=opponent_model,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        BASELINE_SHARD,
    log:
        log_path("eval", "play_{model}", "shard_{shard}.log"),
    benchmark:
        BASELINE_SHARD_BENCHMARK
    wildcard_constraints:
        model="|".join(BASELINE_MODELS),


# `use rule ... with:` does not carry `localrule` over (Snakemake 9.27): each says it.
use rule eval_merge as eval_merge_baseline with:
    output:
        BASELINE_GAMES,
    log:
        log_path("eval", "merge_{model}.log"),
    benchmark:
        bench_path("eval", "merge_{model}.tsv")
    wildcard_constraints:
        model="|".join(BASELINE_MODELS),
    localrule: True


use rule eval_games as eval_games_baseline with:
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
    localrule: True


# Sampled games (evaluation.sampled_games_per_secret > 0): the same opponent, words
# and shards, several games per secret and role drawn as self-play draws.
use rule eval_play as eval_play_sampled with:
    output:
        SAMPLED_SHARD,
    log:
        log_path("epoch{epoch}", "eval_sampled", "shard_{shard}.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_sampled", "shard_{shard}.tsv")
    params:
        args=eval_sampled_play_args(),


use rule eval_merge as eval_merge_sampled with:
    input:
        sampled_shards,
    output:
        SAMPLED_GAMES,
    log:
        log_path("epoch{epoch}", "eval_merge_sampled.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_merge_sampled.tsv")
    localrule: True


use rule eval_games as eval_games_sampled with:
    input:
        SAMPLED_GAMES,
    output:
        SAMPLED_TABLE,
    log:
        log_path("epoch{epoch}", "eval_games_sampled.log"),
    benchmark:
        bench_path("epoch{epoch}", "eval_games_sampled.tsv")
    localrule: True


use rule eval_play_baseline as eval_play_sampled_baseline with:
    output:
        SAMPLED_BASELINE_SHARD,
    log:
        log_path("eval", "sampled_{model}", "shard_{shard}.log"),
    benchmark:
        bench_path("eval", "sampled_{model}", "shard_{shard}.tsv")
    params:
        args=eval_sampled_play_args(),


use rule eval_merge_baseline as eval_merge_sampled_baseline with:
    input:
        sampled_shards,
    output:
        SAMPLED_BASELINE_GAMES,
    log:
        log_path("eval", "merge_sampled_{model}.log"),
    benchmark:
        bench_path("eval", "merge_sampled_{model}.tsv")
    localrule: True


use rule eval_games_baseline as eval_games_sampled_baseline with:
    input:
        SAMPLED_BASELINE_GAMES,
    output:
        SAMPLED_BASELINE_TABLE,
    log:
        log_path("eval", "games_sampled_{model}.log"),
    benchmark:
        bench_path("eval", "games_sampled_{model}.tsv")
    localrule: True


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
        gpu_env("eval")
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        args=reasoning_args(),
    shell:
        "exec spag eval-reasoning --model {input.model:q} --model-name {wildcards.model}"
        " --output {output:q} {params.args} > {log:q} 2>&1"


# Graded hints: a fixed listener ranks the secret among held-out words after each
# attacker message of {model}'s evaluation games.
rule eval_hints:
    input:
        games=games_of_model,
        listener=hints_listener,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        HINTS,
    log:
        log_path("eval", "hints_{model}.log"),
    benchmark:
        bench_path("eval", "hints_{model}.tsv")
    conda:
        gpu_env("train")
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        threads=threads_arg,
        args=cli_flags(
            k=config["evaluation"]["hints"]["k"],
            seed=config["seed"],
            game=config["game"]["name"],
            prompt_format=config["game"]["prompt_format"],
            dtype=config["scoring"]["dtype"],
            device=family_device(config, "evaluate"),
            trust_remote_code=config["base_model"]["trust_remote_code"],
        ),
    shell:
        "exec spag score-hints --listener {input.listener:q} --episodes {input.games:q}"
        " --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --threads {params.threads} {params.args} > {log:q} 2>&1"


# The defender's inference: {model} itself reads fixed dialogues (the same clues for
# every model) and ranks the secret among the same held-out words.
rule eval_inference:
    input:
        dialogues=inference_dialogues,
        listener=named_model,
        words=WORDS_TEST,
        prompts=config["game"]["prompts"],
    output:
        INFERENCE,
    log:
        log_path("eval", "inference_{model}.log"),
    benchmark:
        bench_path("eval", "inference_{model}.tsv")
    conda:
        gpu_env("train")
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        threads=threads_arg,
        sources=" ".join(config["evaluation"]["hints"]["inference_sources"]),
        args=cli_flags(
            k=config["evaluation"]["hints"]["k"],
            seed=config["seed"],
            game=config["game"]["name"],
            prompt_format=config["game"]["prompt_format"],
            dtype=config["scoring"]["dtype"],
            device=family_device(config, "evaluate"),
            trust_remote_code=config["base_model"]["trust_remote_code"],
        ),
    shell:
        "exec spag score-hints --listener {input.listener:q}"
        " --episodes {input.dialogues:q} --sources {params.sources} --unique-dialogues"
        " --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --threads {params.threads} {params.args} > {log:q} 2>&1"


# A solved game's exact evaluation: each model's strategy from its own probabilities.
rule eval_strategy:
    input:
        model=named_model,
        prompts=config["game"]["prompts"],
    output:
        STRATEGY,
    log:
        log_path("eval", "strategy_{model}.log"),
    benchmark:
        bench_path("eval", "strategy_{model}.tsv")
    conda:
        gpu_env("train")
    threads: job_threads("evaluate")
    resources:
        **job_resources("evaluate"),
    params:
        threads=threads_arg,
        args=cli_flags(
            game=config["game"]["name"],
            max_turns=config["game"]["max_turns"],
            prompt_format=config["game"]["prompt_format"],
            dtype=config["scoring"]["dtype"],
            device=family_device(config, "evaluate"),
            trust_remote_code=config["base_model"]["trust_remote_code"],
        ),
    shell:
        "exec spag read-strategy --model {input.model:q} --prompts {input.prompts:q}"
        " --output {output:q} --threads {params.threads} {params.args} > {log:q} 2>&1"


rule epoch_summary:
    input:
        outcomes=OUTCOMES,
        samples=SAMPLES,
        loss=LOSS,
        eval_games=EVAL_TABLE,
        # No file in a run without reasoning tasks: `--reasoning` then names none.
        reasoning=REASONING.replace("{model}", "epoch{epoch}") if REASONED else [],
        shards=shards_of_epoch,
        shard_benchmarks=shard_benchmarks_of_epoch,
    output:
        EPOCH_SUMMARY,
    log:
        log_path("epoch{epoch}", "summary.log"),
    benchmark:
        bench_path("epoch{epoch}", "summary.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
    shell:
        "exec spag summarize-epoch --epoch {wildcards.epoch} --outcomes {input.outcomes:q}"
        " --samples {input.samples:q} --loss {input.loss:q} --eval-games {input.eval_games:q}"
        " --reasoning {input.reasoning:q} --selfplay {input.shards:q}"
        " --selfplay-benchmarks {input.shard_benchmarks:q} --output {output:q}"
        " --game {params.game}"
        " > {log:q} 2>&1"
