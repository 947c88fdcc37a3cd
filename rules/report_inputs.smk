# What `spag plot-run` reads: every epoch's samples and training log, and every job's
# benchmark, labelled for the plots. Included by report.smk; no rules.

# How a wildcard shows in a benchmark's label: train_spag/epoch1, selfplay/epoch1/shard_000,
# eval_play_baseline/base/shard_000.
BENCHMARK_LABEL_PARTS = {
    "epoch": "epoch{epoch}",
    "model": "{model}",
    "shard": "shard_{shard}",
}


def labelled(entries):
    """LABEL=PATH arguments of `spag plot-run` from a dict label -> path."""
    return [f"{label}={path}" for label, path in entries.items()]


def run_samples():
    """Training samples of every epoch, labelled by the epoch's number."""
    return {str(e): expand(SAMPLES, epoch=e)[0] for e in range(1, EPOCHS + 1)}


def run_losses():
    """Training logs of M0 and every epoch, labelled by stage (the training plot's legend)."""
    epochs = {f"epoch{e}": expand(LOSS, epoch=e)[0] for e in range(1, EPOCHS + 1)}
    return {"imitation": IMITATION_LOSS, **epochs}


def run_benchmarks():
    """Benchmark file of every job of the run (the rules' own paths), for the runtime plot.

    Labelled by the rule and its wildcards (train_spag/epoch1,
    eval_play_baseline/base/shard_000).
    """
    once = (
        "target_words",
        "base_model",
        "sft_data",
        "imitation_samples",
        "score_imitation",
        "train_imitation",
        *(["scripted_games"] if SCRIPTED else []),
    )
    per_epoch = (
        "selfplay",
        "merge_episodes",
        "assign_rewards",
        "score_ref",
        "train_spag",
        "eval_play",
        "eval_merge",
        "eval_games",
        *(
            ["eval_play_sampled", "eval_merge_sampled", "eval_games_sampled"]
            if SAMPLED
            else []
        ),
    )
    per_model = {
        **({"eval_reasoning": REASONING_MODELS} if REASONED else {}),
        "eval_play_baseline": BASELINE_MODELS,
        "eval_merge_baseline": BASELINE_MODELS,
        "eval_games_baseline": BASELINE_MODELS,
        # The evaluations a game has (graded hints: Taboo; the exact strategy: Kuhn Poker).
        **(
            {"eval_hints": REASONING_MODELS, "eval_inference": REASONING_MODELS}
            if GRADED
            else {}
        ),
        **({"eval_strategy": REASONING_MODELS} if SOLVED else {}),
        **(
            {
                "eval_play_sampled_baseline": BASELINE_MODELS,
                "eval_merge_sampled_baseline": BASELINE_MODELS,
                "eval_games_sampled_baseline": BASELINE_MODELS,
            }
            if SAMPLED
            else {}
        ),
    }
    # Self-play and evaluation games are sharded apart.
    eval_rules = (
        "eval_play",
        "eval_play_baseline",
        "eval_play_sampled",
        "eval_play_sampled_baseline",
    )
    entries = {}
    for name in (*once, *per_epoch, *per_model):
        if not hasattr(rules, name):
            continue
        pattern = getattr(rules, name).benchmark
        if not pattern:
            continue
        wildcards = getattr(rules, name).rule.wildcard_names
        parts = [p for w, p in BENCHMARK_LABEL_PARTS.items() if w in wildcards]
        label = "/".join([name, *parts])
        for entry in expand(
            f"{label}={pattern}",
            epoch=range(1, EPOCHS + 1),
            shard=map(
                shard_name, range(EVAL_NUM_SHARDS if name in eval_rules else NUM_SHARDS)
            ),
            model=per_model.get(name, ()),
            allow_missing=True,
        ):
            job, _, path = entry.partition("=")
            entries.setdefault(job, path)
    return entries
