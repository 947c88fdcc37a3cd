# Run-wide summary tables and the plots of `snakemake --report report.html`.
# The plot files are spag.report.names' (RUN_PLOTS, EPOCH_PLOTS); every plot is
# marked for the report with its caption report/<key>.rst or report/epoch_<key>.rst.
#
# rule            spag step      package module (spag.)
# summary_tables  summarize-run  commands/summarize_run.py, report/summary.py, report/inputs.py
# plots           plot-run       commands/plot_run.py, report/plots.py, report/names.py
# epoch_plots     plot-epoch     commands/plot_epoch.py, report/plots.py, report/names.py
# run_info        run-info       commands/run_info.py, provenance.py
# sampled_games_table  summarize-run  (sampled evaluation games: evaluation.sampled_games_per_secret)
# hints_table     summarize-hints       commands/summarize_hints.py, evaluation/hints.py
#                 (a game with a guess: Taboo)
# strategy_table  summarize-strategies  commands/summarize_strategies.py, evaluation/strategy.py
#                 (a solved game: Kuhn Poker)

from pathlib import Path

from spag.ops.provenance import git_info
from spag.report.names import EPOCH_PLOTS, RUN_PLOTS
from spag.ops.tracking import config_digest

# What produced the results, on the summary tables (spag.ops.provenance).
_git = git_info(workflow.basedir)
PROJECT_COMMIT = (
    f"{_git['commit'][:12]}{'-dirty' if _git['dirty'] else ''}" if _git else "unknown"
)
CONFIG_DIGEST = config_digest(config)

REPORT_TARGETS = [
    RUN_INFO,
    SUMMARY_EPOCHS,
    SUMMARY_REASONING,
    SUMMARY_EVAL_GAMES,
    *([TEACHER_OUTCOMES] if TEACHER else []),
    *(
        [SUMMARY_STRATEGIES, str(Path(PLOTS_DIR, "exploitability.png"))]
        if SOLVED
        else []
    ),
    *([SUMMARY_HINTS, SUMMARY_INFERENCE] if GRADED else []),
    *([SUMMARY_EVAL_SAMPLED] if SAMPLED else []),
    *(str(Path(PLOTS_DIR, name)) for name in RUN_PLOTS),
    *expand(
        str(Path(PLOTS_DIR, "epoch{epoch}", "{plot}")),
        epoch=range(1, EPOCHS + 1),
        plot=EPOCH_PLOTS,
    ),
]


include: "report_inputs.smk"


rule summary_tables:
    input:
        epochs=expand(EPOCH_SUMMARY, epoch=range(1, EPOCHS + 1)),
        # No file in a run without reasoning tasks: the table then has its header only.
        reasoning=expand(REASONING, model=REASONING_MODELS) if REASONED else [],
        eval_games=[
            *expand(BASELINE_TABLE, model=BASELINE_MODELS),
            *expand(EVAL_TABLE, epoch=range(1, EPOCHS + 1)),
        ],
        eval_episodes=[
            *expand(BASELINE_GAMES, model=BASELINE_MODELS),
            *expand(EVAL_GAMES, epoch=range(1, EPOCHS + 1)),
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
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
        commit=PROJECT_COMMIT,
        digest=CONFIG_DIGEST,
    shell:
        "exec spag summarize-run --epoch-summaries {input.epochs:q}"
        " --reasoning {input.reasoning:q} --output {output.epochs:q}"
        " --reasoning-output {output.reasoning:q} --eval-games {input.eval_games:q}"
        " --eval-games-output {output.eval_games:q} --eval-episodes {input.eval_episodes:q}"
        " --commit {params.commit:q} --game {params.game}"
        " --config-digest {params.digest:q} > {log:q} 2>&1"


# Sampled evaluation games of every model, each paired with M0's (one row per model
# and role, as eval_games.tsv).
rule sampled_games_table:
    input:
        tables=[
            *expand(SAMPLED_BASELINE_TABLE, model=BASELINE_MODELS),
            *expand(SAMPLED_TABLE, epoch=range(1, EPOCHS + 1)),
        ],
        episodes=[
            *expand(SAMPLED_BASELINE_GAMES, model=BASELINE_MODELS),
            *expand(SAMPLED_GAMES, epoch=range(1, EPOCHS + 1)),
        ],
    output:
        report(
            SUMMARY_EVAL_SAMPLED,
            caption="../report/summary_eval_sampled.rst",
            category="Summary",
            subcategory="Tables",
        ),
    log:
        log_path("sampled_games_table.log"),
    benchmark:
        bench_path("sampled_games_table.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
        commit=PROJECT_COMMIT,
        digest=CONFIG_DIGEST,
    shell:
        "exec spag summarize-run --eval-games {input.tables:q}"
        " --eval-games-output {output:q} --eval-episodes {input.episodes:q}"
        " --commit {params.commit:q} --game {params.game}"
        " --config-digest {params.digest:q} > {log:q} 2>&1"


rule hints_table:
    input:
        expand(HINTS, model=REASONING_MODELS),
    output:
        report(
            SUMMARY_HINTS,
            caption="../report/summary_hints.rst",
            category="Summary",
            subcategory="Tables",
        ),
    log:
        log_path("hints_table.log"),
    benchmark:
        bench_path("hints_table.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        models=REASONING_MODELS,
        by="role",
    shell:
        "exec spag summarize-hints --hints {input:q} --models {params.models}"
        " --by {params.by} --output {output:q} > {log:q} 2>&1"


use rule hints_table as inference_table with:
    input:
        expand(INFERENCE, model=REASONING_MODELS),
    output:
        report(
            SUMMARY_INFERENCE,
            caption="../report/summary_inference.rst",
            category="Summary",
            subcategory="Tables",
        ),
    log:
        log_path("inference_table.log"),
    benchmark:
        bench_path("inference_table.tsv")
    localrule: True
    params:
        models=REASONING_MODELS,
        by="source",


rule strategy_table:
    input:
        expand(STRATEGY, model=REASONING_MODELS),
    output:
        table=report(
            SUMMARY_STRATEGIES,
            caption="../report/summary_poker.rst",
            category="Summary",
            subcategory="Tables",
        ),
        plot=report(
            str(Path(PLOTS_DIR, "exploitability.png")),
            caption="../report/exploitability.rst",
            category="Summary",
            subcategory="Exact evaluation",
        ),
    log:
        log_path("strategy_table.log"),
    benchmark:
        bench_path("strategy_table.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        models=REASONING_MODELS,
    shell:
        "exec spag summarize-strategies --strategies {input:q} --models {params.models}"
        " --output {output.table:q} --plot {output.plot:q} > {log:q} 2>&1"


rule plots:
    input:
        summary=SUMMARY_EPOCHS,
        reasoning=SUMMARY_REASONING,
        eval_games=SUMMARY_EVAL_GAMES,
        samples=lambda wildcards: run_samples().values(),
        loss=lambda wildcards: run_losses().values(),
        benchmarks=lambda wildcards: run_benchmarks().values(),
    output:
        **{
            plot.key: report(
                str(Path(PLOTS_DIR, name)),
                caption=f"../report/{plot.key}.rst",
                category="Summary",
                subcategory=plot.subcategory,
            )
            for name, plot in RUN_PLOTS.items()
        },
    log:
        log_path("plots.log"),
    benchmark:
        bench_path("plots.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
        outdir=lambda wildcards, output: Path(output[0]).parent,
        samples=lambda wildcards: labelled(run_samples()),
        loss=lambda wildcards: labelled(run_losses()),
        benchmarks=lambda wildcards: labelled(run_benchmarks()),
    shell:
        "exec spag plot-run --output-dir {params.outdir:q} --summary {input.summary:q}"
        " --reasoning {input.reasoning:q} --eval-games {input.eval_games:q}"
        " --samples {params.samples:q} --loss {params.loss:q} --game {params.game}"
        " --benchmarks {params.benchmarks:q} > {log:q} 2>&1"


rule epoch_plots:
    input:
        samples=SAMPLES,
        loss=LOSS,
        episodes=EPISODES,
    output:
        **{
            plot.key: report(
                str(Path(PLOTS_DIR, "epoch{epoch}", name)),
                caption=f"../report/epoch_{plot.key}.rst",
                category="Epoch {epoch}",
                subcategory=plot.subcategory,
            )
            for name, plot in EPOCH_PLOTS.items()
        },
    log:
        log_path("epoch{epoch}", "plots.log"),
    benchmark:
        bench_path("epoch{epoch}", "plots.tsv")
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        game=config["game"]["name"],
        outdir=lambda wildcards, output: Path(output[0]).parent,
    shell:
        "exec spag plot-epoch --epoch {wildcards.epoch} --output-dir {params.outdir:q}"
        " --samples {input.samples:q} --loss {input.loss:q} --episodes {input.episodes:q}"
        " --game {params.game}"
        " > {log:q} 2>&1"


rule report_inputs:
    input:
        REPORT_TARGETS,


rule run_info:
    input:
        epoch_targets(EPOCHS),
    output:
        report(
            RUN_INFO,
            caption="../report/run_info.rst",
            category="Summary",
            subcategory="Provenance",
        ),
    log:
        log_path("run_info.log"),
    localrule: True
    conda:
        "../envs/spag.yaml"
    resources:
        **job_resources("cpu"),
    params:
        # a changed config reruns this rule; the job reads it from the environment
        config=RESOLVED_CONFIG,
        project=workflow.basedir,
    shell:
        "exec spag run-info --outputs {input:q}"
        " --project-dir {params.project:q} --output {output:q} > {log:q} 2>&1"
