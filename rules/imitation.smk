# Imitation learning (SFTwithKL): M0 imitates the winners of demonstration games,
# with a KL term against the base model. The games come from a file, or are played
# by a teacher (data.imitation "teacher"), one job per shard of the words.
#
# rule               spag step             package module (spag.)
# teacher_play       play                  commands/play.py, game/teacher.py
# teacher_games      merge-episodes        commands/merge_episodes.py, game/merge.py
# scripted_games     scripted-games        commands/scripted_games.py, game/scripted.py
# imitation_samples  imitation-samples     commands/imitation_samples.py, data/imitation.py
# score_imitation    score-ref             commands/score_ref.py, training/scoring.py
# train_imitation    train                 commands/train.py, training/


include: "teacher.smk"


rule teacher_play:
    input:
        unpack(teacher_inputs),
    output:
        TEACHER_SHARD,
    log:
        log_path("teacher", "shard_{shard}.log"),
    benchmark:
        bench_path("teacher", "shard_{shard}.tsv")
    priority: LOOP_PRIORITY
    conda:
        teacher_env()
    threads: job_threads(teacher_family())
    resources:
        **job_resources(teacher_family()),
    params:
        **algorithm("game"),
        seed=config["seed"],
        num_shards=config["data"]["teacher"]["num_shards"],
        shard=lambda wildcards: int(wildcards.shard),
        args=teacher_play_args,
    shell:
        "exec "
        + TEACHER_SPAG
        + " play --words {input.words:q} --prompts {input.prompts:q} --output {output:q}"
        " --shard-index {params.shard} --num-shards {params.num_shards} --epoch 0"
        " --seed {params.seed} {params.args} > {log:q} 2>&1"


rule teacher_games:
    input:
        teacher_shards,
    output:
        episodes=TEACHER_EPISODES,
        counts=report(
            TEACHER_OUTCOMES,
            caption="../report/teacher_outcomes.rst",
            category="Imitation",
            subcategory="Teacher games",
        ),
    log:
        log_path("teacher", "merge_episodes.log"),
    benchmark:
        bench_path("teacher", "merge_episodes.tsv")
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
        " --counts {output.counts:q} --epoch 0 --game {params.game} > {log:q} 2>&1"


# data.imitation "scripted": the game's scripted player in every seat, for every
# training secret (Kuhn Poker: random legal moves).
rule scripted_games:
    input:
        words=WORDS_TRAIN,
    output:
        SCRIPTED_GAMES,
    log:
        log_path("imitation", "scripted_games.log"),
    benchmark:
        bench_path("imitation", "scripted_games.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        **algorithm("game"),
        args=cli_flags(
            game=config["game"]["name"],
            games_per_word=config["data"]["scripted"]["games_per_secret"],
            max_turns=config["game"]["max_turns"],
            seed=config["seed"],
        ),
    shell:
        "exec spag scripted-games --words {input.words:q} --output {output:q} {params.args}"
        " > {log:q} 2>&1"


rule imitation_samples:
    input:
        data=imitation_input,
        prompts=config["game"]["prompts"],
    output:
        IMITATION_SAMPLES,
    log:
        log_path("imitation", "samples.log"),
    benchmark:
        bench_path("imitation", "samples.tsv")
    priority: LOOP_PRIORITY
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        **algorithm("imitation"),
        game=config["game"]["name"],
        seed=config["seed"],
        # Teacher games must show both roles won (a released file is taken as it is).
        both_roles="--require-both-roles data.teacher" if TEACHER else "",
        # Only where set: with the winners the command stays that of earlier runs.
        imitate=(
            " --imitate every"
            if SCRIPTED and config["data"]["scripted"]["imitate"] == "every"
            else ""
        ),
    shell:
        "exec spag imitation-samples --input {input.data:q} --prompts {input.prompts:q}"
        " --output {output:q} --seed {params.seed} {params.both_roles} --game {params.game}"
        "{params.imitate} > {log:q} 2>&1"


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
    priority: LOOP_PRIORITY
    conda:
        gpu_env("train")
    threads: job_threads("score")
    resources:
        **job_resources("score"),
    params:
        args=score_args("imitation"),
    shell:
        "exec spag score-ref --model {input.model:q} --samples {input.samples:q}"
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
    priority: LOOP_PRIORITY
    conda:
        gpu_env("train")
    threads: job_threads("train")
    resources:
        **job_resources("train"),
    params:
        **algorithm("objective", "imitation"),
        launch=train_launcher(),
        checkpoints=str(CHECKPOINTS / "imitation"),
        args=train_args("imitation"),
    shell:
        "exec {params.launch} spag train --model {input.model:q}"
        " --samples {input.samples:q} --output {output.model:q} --loss-log {output.loss:q}"
        " --checkpoint-dir {params.checkpoints:q} {params.args} > {log:q} 2>&1"
