# Run-wide summary tables and the plots of `snakemake --report report.html`.
# Every plot is marked for the report with its caption under report/.

SUMMARY_EPOCHS = result("summary", "epochs.tsv")
SUMMARY_REASONING = result("summary", "reasoning.tsv")
SUMMARY_EVAL_GAMES = result("summary", "eval_games.tsv")
PLOTS_DIR = result("plots")
RUN_PLOT_FILES = {
    "reasoning": ("reasoning.png", "Reasoning"),
    "eval_win_rates": ("eval_win_rates.png", "Games against the opponent"),
    "selfplay_outcomes": ("selfplay_outcomes.png", "Self-play"),
    "decisive_games": ("decisive_games.png", "Self-play"),
    "rewards": ("rewards.png", "Self-play"),
    "training_curves": ("training_curves.png", "Training"),
    "generation_speed": ("generation_speed.png", "Speed"),
    "step_runtime": ("step_runtime.png", "Speed"),
}
EPOCH_PLOT_FILES = ("rewards", "training", "game_lengths")
REASONING_MODELS = ["base", "imitation"] + [f"epoch{e}" for e in range(1, EPOCHS + 1)]
REPORT_TARGETS = [
    SUMMARY_EPOCHS,
    SUMMARY_REASONING,
    SUMMARY_EVAL_GAMES,
    *(str(Path(PLOTS_DIR, name)) for name, _ in RUN_PLOT_FILES.values()),
    *expand(
        str(Path(PLOTS_DIR, "epoch{epoch}", "{plot}.png")),
        epoch=range(1, EPOCHS + 1),
        plot=EPOCH_PLOT_FILES,
    ),
]


rule summary_tables:
    input:
        epochs=expand(EPOCH_SUMMARY, epoch=range(1, EPOCHS + 1)),
        reasoning=expand(REASONING, model=REASONING_MODELS),
        eval_games=[
            *expand(BASELINE_TABLE, model=BASELINE_MODELS),
            *expand(EVAL_TABLE, epoch=range(1, EPOCHS + 1)),
        ],
    output:
        epochs=report(
            SUMMARY_EPOCHS,
            caption="../report/summary_epochs.rst",
            category="Summary",
            subcategory="Tables",
        ),
        reasoning=report(
            SUMMARY_REASONING,
            caption="../report/summary_reasoning.rst",
            category="Summary",
            subcategory="Tables",
        ),
        eval_games=report(
            SUMMARY_EVAL_GAMES,
            caption="../report/summary_eval_games.rst",
            category="Summary",
            subcategory="Tables",
        ),
    log:
        log_path("summary_tables.log"),
    benchmark:
        bench_path("summary_tables.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    shell:
        "spag summarize --collect --epoch-summaries {input.epochs:q}"
        " --reasoning {input.reasoning:q} --output {output.epochs:q}"
        " --reasoning-output {output.reasoning:q} --eval-games {input.eval_games:q}"
        " --eval-games-output {output.eval_games:q} > {log:q} 2>&1"


rule plots:
    input:
        summary=SUMMARY_EPOCHS,
        reasoning=SUMMARY_REASONING,
        eval_games=SUMMARY_EVAL_GAMES,
        samples=expand(SAMPLES, epoch=range(1, EPOCHS + 1)),
        loss=[IMITATION_LOSS, *expand(LOSS, epoch=range(1, EPOCHS + 1))],
        benchmarks=run_benchmarks,
    output:
        **{
            key: report(
                str(Path(PLOTS_DIR, name)),
                caption=f"../report/{key}.rst",
                category="Summary",
                subcategory=sub,
            )
            for key, (name, sub) in RUN_PLOT_FILES.items()
        },
    log:
        log_path("plots.log"),
    benchmark:
        bench_path("plots.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        outdir=lambda wildcards, output: Path(output[0]).parent,
    shell:
        "spag plots --output-dir {params.outdir:q} --summary {input.summary:q}"
        " --reasoning {input.reasoning:q} --eval-games {input.eval_games:q}"
        " --samples {input.samples:q} --loss {input.loss:q}"
        " --benchmarks {input.benchmarks:q} > {log:q} 2>&1"


rule epoch_plots:
    input:
        samples=SAMPLES,
        loss=LOSS,
        episodes=EPISODES,
    output:
        **{
            key: report(
                str(Path(PLOTS_DIR, "epoch{epoch}", f"{key}.png")),
                caption=f"../report/epoch_{key}.rst",
                category="Epoch {epoch}",
                subcategory="Self-play and training",
            )
            for key in EPOCH_PLOT_FILES
        },
    log:
        log_path("epoch{epoch}", "plots.log"),
    benchmark:
        bench_path("epoch{epoch}", "plots.tsv")
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        outdir=lambda wildcards, output: Path(output[0]).parent,
    shell:
        "spag plots --epoch {wildcards.epoch} --output-dir {params.outdir:q}"
        " --samples {input.samples:q} --loss {input.loss:q} --episodes {input.episodes:q}"
        " > {log:q} 2>&1"


rule report_inputs:
    input:
        REPORT_TARGETS,
