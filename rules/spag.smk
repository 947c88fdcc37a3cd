# SPAG policy optimisation of one epoch: rewards, reference scores, OfflinePO.
# The scoring and training rules are M0's (imitation.smk) on the epoch's files.
#
# rule            spag step        package module (spag.)
# assign_rewards  assign-rewards   commands/assign_rewards.py, game/rewards.py, game/<game>.py
# score_ref       score-ref        commands/score_ref.py, training/scoring.py
# train_spag      train            commands/train.py, training/


rule assign_rewards:
    input:
        episodes=EPISODES,
        sft=SFT_DATA,
        prompts=config["game"]["prompts"],
        baselines=previous_baselines,
    output:
        **({"baselines": ROLE_BASELINES} if RAE else {}),
        samples=SAMPLES,
    log:
        log_path("epoch{epoch}", "assign_rewards.log"),
    benchmark:
        bench_path("epoch{epoch}", "assign_rewards.tsv")
    priority: LOOP_PRIORITY
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        # Only under rae, so that the params of the other schemes' finished runs stay
        # as they were (no rerun).
        **(
            {
                "baselines": lambda wildcards, input, output: cli_flags(
                    baseline_in=input.baselines or None, baseline_out=output.baselines
                )
            }
            if RAE
            else {}
        ),
        **algorithm("rewards"),
        # Each epoch draws its own randomised training prompts.
        rewards=rewards_args(),
        seed=lambda wildcards: config["seed"] * 1000 + int(wildcards.epoch),
    shell:
        "exec spag assign-rewards --episodes {input.episodes:q} --output {output.samples:q}"
        " --sft-data {input.sft:q} {params.rewards} --seed {params.seed}"
        " --prompts {input.prompts:q}"
        + (" {params.baselines}" if RAE else "")
        + " > {log:q} 2>&1"


# Reference log-probabilities of the epoch's samples under M(e-1).
use rule score_imitation as score_ref with:
    input:
        samples=SAMPLES,
        model=previous_model,
    output:
        SCORED,
    log:
        log_path("epoch{epoch}", "score_ref.log"),
    benchmark:
        bench_path("epoch{epoch}", "score_ref.tsv")
    params:
        args=score_args("spag"),


# M(e): M(e-1) trained on the epoch's scored samples.
use rule train_imitation as train_spag with:
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
    params:
        **algorithm("objective", "spag"),
        checkpoints=str(CHECKPOINTS / "epoch{epoch}"),
        args=train_args("spag"),
