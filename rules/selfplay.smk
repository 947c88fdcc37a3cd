# Self-play: M(e-1) plays itself, one job per shard of the target words.
#
# rule            spag step        package module (spag.)
# selfplay        play             commands/play.py, game/selfplay.py, generation/
# merge_episodes  merge-episodes   commands/merge_episodes.py, game/merge.py, judge.py


rule selfplay:
    input:
        model=previous_model,
        words=WORDS_TRAIN,
        prompts=config["game"]["prompts"],
    output:
        SHARD,
    log:
        log_path("epoch{epoch}", "selfplay", "shard_{shard}.log"),
    benchmark:
        SHARD_BENCHMARK
    priority: LOOP_PRIORITY
    conda:
        backend_env()
    threads: job_threads("selfplay")
    resources:
        **job_resources("selfplay"),
    params:
        **algorithm("game"),
        threads=threads_arg,
        seed=config["seed"],
        num_shards=NUM_SHARDS,
        shard=lambda wildcards: int(wildcards.shard),
        args=play_args(),
    shell:
        "exec "
        + ENGINE_SPAG
        + " play --model {input.model:q} --words {input.words:q} --prompts {input.prompts:q}"
        " --output {output:q} --shard-index {params.shard} --num-shards {params.num_shards}"
        " --epoch {wildcards.epoch} --seed {params.seed} --threads {params.threads} {params.args}"
        " > {log:q} 2>&1"


rule merge_episodes:
    input:
        shards_of_epoch,
    output:
        episodes=EPISODES,
        counts=OUTCOMES,
    log:
        log_path("epoch{epoch}", "merge_episodes.log"),
    benchmark:
        bench_path("epoch{epoch}", "merge_episodes.tsv")
    priority: LOOP_PRIORITY
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        **algorithm("game"),
        game=config["game"]["name"],
    shell:
        "exec spag merge-episodes --inputs {input:q} --output {output.episodes:q}"
        " --counts {output.counts:q} --epoch {wildcards.epoch} --game {params.game}"
        " > {log:q} 2>&1"
