"""The DAG: job counts of a dry run, target rules, config validation before any job."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_utils import job_counts, make_workdir, snakemake

PER_EPOCH = {
    "merge_episodes": 1,
    "assign_rewards": 1,
    "score_ref": 1,
    "train_spag": 1,
    "eval_merge": 1,
    "eval_games": 1,
    "epoch_summary": 1,
}
ONCE = {
    "target_words": 1,
    "base_model": 1,
    "sft_data": 1,
    "imitation_samples": 1,
    "score_imitation": 1,
    "train_imitation": 1,
}
# The base model and M0 against the opponent: the rows that M(e) is read against.
BASELINES = {"eval_merge_baseline": 2, "eval_games_baseline": 2}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("dag"))


@pytest.mark.parametrize("epochs,shards,eval_shards", [(3, 3, 1), (3, 5, 2), (2, 1, 3)])
def test_dry_run_job_counts(workdir, epochs, shards, eval_shards):
    res = snakemake(
        workdir,
        f"spag_epoch{epochs}",
        "-n",
        config={
            "epochs": epochs,
            "selfplay": {"num_shards": shards},
            "evaluation": {"num_shards": eval_shards},
        },
    )
    assert res.returncode == 0, res.stderr + res.stdout
    counts = job_counts(res.stdout + res.stderr)
    expected = {**ONCE, **BASELINES, "selfplay": epochs * shards}
    # every evaluated model's games: one job per shard of the test words
    expected["eval_play"] = epochs * eval_shards
    expected["eval_play_baseline"] = 2 * eval_shards  # the base model and M0
    expected.update({rule: n * epochs for rule, n in PER_EPOCH.items()})
    # base model, M0, and M1..M(epochs)
    expected["eval_reasoning"] = epochs + 2
    expected["eval_hints"] = expected["eval_inference"] = epochs + 2
    expected[f"spag_epoch{epochs}"] = 1
    assert dict(counts) == expected


def test_epoch_targets_exist_up_to_configured_epochs(workdir):
    res = snakemake(workdir, "--list-target-rules", config={"epochs": 4})
    assert res.returncode == 0, res.stderr
    listed = set(res.stdout.split())
    assert {"all", "imitation", "spag_epoch1", "spag_epoch4"} <= listed
    assert "spag_epoch5" not in listed


def test_imitation_target_builds_m0_only(workdir):
    res = snakemake(workdir, "imitation", "-n")
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout + res.stderr)
    assert set(counts) == set(ONCE) - {"target_words", "sft_data"} | {"imitation"}


def test_shard_outputs_follow_the_design_layout(workdir):
    res = snakemake(workdir, "spag_epoch1", "-n", config={"epochs": 1})
    out = res.stdout + res.stderr
    for s in ("000", "001", "002"):
        assert f"results/epoch1/selfplay/shard_{s}.parquet" in out
    for path in (
        "results/imitation/model",
        "results/epoch1/episodes.parquet",
        "results/epoch1/samples.parquet",
        "results/epoch1/scored.parquet",
        "results/epoch1/model",
    ):
        assert path in out


def _shell_lines(stdout: str, command: str) -> list[str]:
    return [line for line in stdout.splitlines() if command in line]


def test_epoch_target_plans_baseline_games(workdir):
    """spag_epoch1 plays the base model and M0 against the opponent on the held-out words."""
    res = snakemake(workdir, "spag_epoch1", "-n", "-p", config={"epochs": 1})
    assert res.returncode == 0, res.stderr
    plays = _shell_lines(res.stdout, "spag play")
    evals = [line for line in plays if "--opponent " in line]
    assert len(evals) == 3  # M1, base, M0
    model = {
        name: next(line for line in evals if f"--model-name {name} " in line)
        for name in ("epoch1", "base", "imitation")
    }
    opponent = "--opponent results/imitation/model "
    for name, folder, out in (
        ("epoch1", "results/epoch1/model", "results/epoch1/eval/shard_000.parquet"),
        ("base", "results/base_model", "results/eval/games/base/shard_000.parquet"),
        ("imitation", "results/imitation/model", "results/eval/games/imitation/shard_000.parquet"),
    ):
        line = model[name]
        assert f"--model {folder} " in line and opponent in line, line
        assert "--opponent-name imitation " in line
        assert f"--output {out} " in line and "--words results/words/test.txt" in line
        assert "--greedy" in line and "--shard-index 0 --num-shards 1 " in line
    # Same words, same settings: the lines differ only in model, output, epoch and names.
    assert "--epoch=-1 " in model["base"] and "--epoch=0 " in model["imitation"]
    tables = _shell_lines(res.stdout, "spag eval-games")
    for name in ("base", "imitation"):
        line = next(t for t in tables if f"--model-name {name}" in t)
        assert f"--output results/eval/games/{name}.tsv" in line


def test_evaluation_games_are_played_in_shards_and_merged(workdir):
    """evaluation.num_shards splits every evaluated model's test words into jobs; the
    merge writes the one games file the tables and the report read."""
    res = snakemake(
        workdir, "spag_epoch1", "-n", "-p",
        config={"epochs": 1, "evaluation": {"num_shards": 2}},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    evals = [ln for ln in _shell_lines(res.stdout, "spag play") if "--opponent " in ln]
    assert len(evals) == 6  # M1, base, M0: two shards each
    for folder in ("results/epoch1/eval", "results/eval/games/base"):
        for index in (0, 1):
            assert any(
                f"--output {folder}/shard_00{index}.parquet --shard-index {index} "
                "--num-shards 2 " in ln
                for ln in evals
            ), folder
    merges = _shell_lines(res.stdout, "spag merge-episodes")
    assert any(
        "--inputs results/epoch1/eval/shard_000.parquet results/epoch1/eval/shard_001.parquet"
        " --output results/epoch1/eval/games.parquet " in ln
        for ln in merges
    )
    assert any(
        "--inputs results/eval/games/imitation/shard_000.parquet "
        "results/eval/games/imitation/shard_001.parquet "
        "--output results/eval/games/imitation.parquet " in ln
        for ln in merges
    )


def test_sampled_evaluation_games_beside_the_greedy_ones(workdir):
    """evaluation.sampled_games_per_secret plays every model's sampled games in the same
    shards against the same opponent, drawn as self-play draws, and summarises them
    paired with M0's; off by default."""
    plain = snakemake(workdir, "all", "-n", "-p", config={"epochs": 1})
    assert plain.returncode == 0, plain.stderr
    assert "sampled" not in plain.stdout
    res = snakemake(
        workdir, "all", "-n", "-p",
        config={"epochs": 1, "evaluation": {"num_shards": 2, "sampled_games_per_secret": 3},
                "selfplay": {"temperature": 0.9, "top_k": 20}},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    plays = [ln for ln in _shell_lines(res.stdout, "spag play") if "--opponent " in ln]
    sampled = [ln for ln in plays if "/sampled/" in ln]
    greedy = [ln for ln in plays if "/sampled/" not in ln]
    assert len(sampled) == len(greedy) == 6  # M1, base, M0: two shards each
    for line in sampled:
        assert "--no-greedy" in line and "--games-per-word 3" in line, line
        assert "--temperature 0.9 " in line and "--top-k 20 " in line, line
    for line in greedy:
        assert " --greedy" in line and "--games-per-word" not in line, line

    # Apart from sampling, the same games: model, opponent, words, shards, seed, length.
    def game_flags(line):
        words = line.split()
        keys = ("--model", "--opponent", "--words", "--shard-index", "--num-shards", "--seed",
                "--model-name", "--max-new-tokens", "--max-turns")  # fmt: skip
        # a flag at the step's default is left out of both
        return tuple(words[words.index(k) + 1] if k in words else None for k in keys)

    assert {game_flags(ln) for ln in sampled} == {game_flags(ln) for ln in greedy}
    summary = _shell_lines(res.stdout, "--eval-games-output results/summary/eval_sampled.tsv")
    assert len(summary) == 1
    for table in ("results/eval/sampled/base.tsv", "results/epoch1/eval/sampled/games.tsv"):
        assert table in summary[0]
    assert "results/eval/sampled/imitation.parquet" in summary[0]
    # The runtime plot counts the sampled games' jobs too.
    plots = res.stdout.split("rule plots:", 1)[1].split("\n\n", 1)[0]
    for bench in ("epoch1/eval_sampled/shard_001.tsv", "eval/sampled_base/shard_000.tsv",
                  "eval/games_sampled_imitation.tsv"):  # fmt: skip
        assert f"results/benchmarks/{bench}" in plots, bench


def test_the_defenders_inference_reads_the_configured_dialogues(workdir):
    """Every model reads the demonstrations and M0's evaluation games as the defender;
    evaluation.hints.inference_sources keeps one of them."""
    for sources, files in (
        (None, ["data/demo_games.json", "results/eval/games/imitation.parquet"]),
        (["m0_games"], ["results/eval/games/imitation.parquet"]),
    ):
        extra = {"evaluation": {"hints": {"inference_sources": sources}}} if sources else {}
        res = snakemake(workdir, "spag_epoch1", "-n", "-p", config={"epochs": 1, **extra})
        assert res.returncode == 0, res.stderr
        lines = _shell_lines(res.stdout, "exec spag score-hints --listener results/")
        lines = [ln for ln in lines if "results/eval/inference/" in ln]
        assert len(lines) == 3  # base, M0, M1
        for line in lines:
            words = line.split()
            at = words.index("--episodes") + 1
            assert words[at : at + len(files)] == files and words[at + len(files)] == "--sources"
            named = words[words.index("--sources") + 1 : words.index("--sources") + 1 + len(files)]
            assert named == (sources or ["demonstrations", "m0_games"]), line


def test_the_loop_goes_before_the_evaluations(workdir):
    """Jobs on the way to the next model are scheduled before evaluation jobs that wait
    for the same cores: evaluations are leaves of the plan."""
    res = snakemake(workdir, "spag_epoch2", "-n", config={"epochs": 2})
    assert res.returncode == 0, res.stderr
    priority = {}
    for block in res.stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        line = next((ln for ln in block.splitlines() if "priority:" in ln), "priority: 0")
        priority.setdefault(rule, set()).add(int(line.split(":")[1]))
    loop = ("imitation_samples", "score_imitation", "train_imitation", "selfplay",
            "merge_episodes", "assign_rewards", "score_ref", "train_spag")  # fmt: skip
    evaluation = ("eval_play", "eval_play_baseline", "eval_reasoning", "eval_merge")
    assert all(priority[r] == priority[loop[0]] for r in loop), priority
    assert all(max(priority[r]) < min(priority[loop[0]]) for r in evaluation), priority


def test_report_tables_and_plots_take_every_model(workdir):
    res = snakemake(workdir, "all", "-n", "-p", config={"epochs": 2})
    assert res.returncode == 0, res.stderr
    (collect,) = _shell_lines(res.stdout, "spag summarize-run")
    tables = collect.split("--eval-games ")[1].split(" --")[0].split()
    assert tables == [
        "results/eval/games/base.tsv",
        "results/eval/games/imitation.tsv",
        "results/epoch1/eval/games.tsv",
        "results/epoch2/eval/games.tsv",
    ]
    assert "--eval-games-output results/summary/eval_games.tsv" in collect
    (plots,) = _shell_lines(res.stdout, "spag plot-run --output-dir results/plots ")
    assert "--eval-games results/summary/eval_games.tsv" in plots
    # The runtime plot counts the baseline games with the other evaluation games.
    for bench in ("eval/play_base/shard_000.tsv", "eval/games_imitation.tsv"):
        assert f"results/benchmarks/{bench}" in plots


def test_a_run_without_reasoning_tasks_plans_no_reasoning_job(workdir):
    """evaluation.reasoning.tasks: [] turns the reasoning benchmarks off; the summaries,
    tables and plots are planned as before, reading no reasoning result."""
    res = snakemake(
        workdir, "all", "-n", "-p",
        config={"epochs": 2, "evaluation": {"reasoning": {"tasks": []}}},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout + res.stderr)
    assert "eval_reasoning" not in counts, counts
    assert counts["epoch_summary"] == 2 and counts["summary_tables"] == counts["plots"] == 1
    assert "results/eval/reasoning/" not in res.stdout
    (collect,) = _shell_lines(res.stdout, "spag summarize-run --epoch-summaries")
    assert "--reasoning  --output " in collect
    assert "--reasoning-output results/summary/reasoning.tsv" in collect
    for line in _shell_lines(res.stdout, "spag summarize-epoch"):
        assert "--reasoning  --selfplay " in line, line


@pytest.mark.parametrize(
    "bad,key",
    [
        ({"selfplay": {"num_shard": 2}}, "selfplay.num_shard"),
        ({"bogus": 1}, "bogus"),
        ({"epochs": 0}, "epochs"),
        ({"selfplay": {"backend": "tgi"}}, "selfplay.backend"),
        # refused by spag.ops.cluster.family_resources when the rules are parsed
        ({"resources": {"train": {"mem_mb": 5000, "max_mem_mb": 1000}}}, "train.max_mem_mb"),
        ({"resources": {"selfplay": {"slurm_extra": "--qos=high"}}}, "resources.selfplay.qos"),
        # more words than the source gives (spag.config.check_word_source)
        ({"words": {"num_train": 30000}}, "'words.num_train' + 'words.num_test'"),
        (
            {"evaluation": {"hints": {"inference_sources": ["m1_games"]}}},
            "evaluation.hints.inference_sources",
        ),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(workdir, bad, key):
    res = snakemake(workdir, "spag_epoch1", "-n", config=bad)
    assert res.returncode != 0
    assert key in res.stderr + res.stdout
    assert "Job stats" not in res.stdout


def test_dag_and_rulegraph_render(workdir):
    for flag in ("--dag", "--rulegraph"):
        res = snakemake(workdir, "spag_epoch2", flag)
        assert res.returncode == 0, res.stderr
        assert res.stdout.lstrip().startswith("digraph"), res.stdout[:200]


def test_missing_data_file_fails_before_any_job_naming_it(workdir):
    res = snakemake(workdir, "spag_epoch1", "-n", config={"data": {"sft": "data/nowhere.json"}})
    assert res.returncode != 0
    assert "data/nowhere.json" in res.stderr + res.stdout
    assert "Job stats" not in res.stdout


def test_user_word_list_with_bad_word_fails_before_any_job_naming_the_line(tmp_path):
    """A word list with a shell metacharacter is refused when the plan is made."""
    wd = make_workdir(tmp_path / "words")
    (wd / "words.txt").write_text("apple\n\nbanana\napple\n$(reboot)\n")
    res = snakemake(wd, "results/words/train.txt", config={"words": {"source": "words.txt"}})
    assert res.returncode != 0
    out = res.stderr + res.stdout
    assert "key 'words.source'" in out and "words.txt:5" in out and "$(reboot)" in out
    assert "Job stats" not in res.stdout
    assert not (wd / "results/words/train.txt").exists()


def test_endpoint_opponent_is_passed_through_not_an_input(workdir):
    spec = "openai:http://127.0.0.1:9/v1?model=gpt-4"
    res = snakemake(workdir, "spag_epoch1", "-n", config={"evaluation": {"opponent": spec}})
    assert res.returncode == 0, res.stderr
    assert f"--opponent '{spec}'" in res.stdout
    # named by spag play from its spec (the endpoint's model), as any endpoint player
    assert "--opponent-name" not in res.stdout


def test_the_base_model_as_the_evaluation_opponent(workdir):
    """``evaluation.opponent: base``: every evaluated model (M0 among them) plays the
    prepared base model, named ``base`` in the games."""
    res = snakemake(
        workdir, "spag_epoch1", "-n", "-p", config={"epochs": 1, "evaluation": {"opponent": "base"}}
    )
    assert res.returncode == 0, res.stderr
    evals = [line for line in _shell_lines(res.stdout, "spag play") if "--opponent " in line]
    assert len(evals) == 3
    for line in evals:
        assert "--opponent results/base_model " in line and "--opponent-name base " in line


def test_multi_node_training_launches_srun_torchrun(workdir):
    res = snakemake(
        workdir,
        "spag_epoch1",
        "-n",
        "-p",
        config={"resources": {"train": {"gpus": 4, "nodes": 2, "cpus": 16}}},
    )
    assert res.returncode == 0, res.stderr
    train = next(
        line
        for line in res.stdout.splitlines()
        if "spag train" in line and "--objective sft_kl" in line
    )
    assert "srun --nodes 2" in train and "--nproc_per_node 4" in train
    assert "--rdzv_backend c10d" in train
    assert "gres=gpu:4" in res.stdout and "cpus_per_task=16" in res.stdout


def test_local_play_threads_are_the_rules(workdir):
    """Locally (also inside a SLURM allocation) a job takes the scheduler's threads; only
    a remote job step reads SLURM_CPUS_PER_TASK (rules/resources.smk: threads_arg)."""
    res = snakemake(
        workdir, "spag_epoch1", "-n", "-p", config={"resources": {"selfplay": {"cpus": 2}}}
    )
    assert res.returncode == 0, res.stderr
    plays = [line for line in res.stdout.splitlines() if "spag play" in line]
    assert plays and "SLURM_CPUS_PER_TASK" not in res.stdout
    selfplay = [p for p in plays if "--opponent" not in p]
    assert selfplay and all("--threads 2 " in p for p in selfplay)


STANDIN_CONDA = Path(__file__).resolve().parent / "conda_standin"


def _rule_commands(output: str, rule: str) -> list[str]:
    """The shell commands a dry run (-p) prints for ``rule``'s jobs."""
    blocks = output.split("\nrule ")
    return [
        line.split(":", 1)[1].strip()
        for block in blocks
        if block.startswith(f"{rule}:")
        for line in block.splitlines()
        if line.startswith("Shell command:")
    ]


def test_vllm_backend_without_its_env_is_refused_before_any_job(workdir):
    res = snakemake(workdir, "spag_epoch1", "-n", config={"selfplay": {"backend": "vllm"}})
    out = res.stdout + res.stderr  # Snakemake prints a parse error on stdout
    assert res.returncode != 0
    assert "key 'selfplay.backend' is 'vllm'" in out
    assert "--software-deployment-method conda" in out


def test_vllm_engines_take_their_configured_memory(workdir):
    """With the conda envs the vLLM plan is accepted; each engine's share of the GPU comes
    from the config (self-play one engine; evaluation the model and the opponent)."""
    import os

    env = {"PATH": f"{STANDIN_CONDA}{os.pathsep}{os.environ['PATH']}"}
    res = snakemake(
        workdir, "spag_epoch1", "-n", "-p", "--sdm", "conda",
        # heads of 64: the embedded default plays on the CPU, whose attention refuses 16
        config={"base_model": {"tiny": {"head_dim": 64}},
                "selfplay": {"backend": "vllm", "gpu_memory_utilization": 0.8},
                "evaluation": {"gpu_memory_utilization": 0.5,
                               "opponent_gpu_memory_utilization": 0.3}},
        env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    play = _rule_commands(res.stdout, "selfplay")[0]
    assert "--backend vllm" in play and "--gpu-memory-utilization 0.8" in play
    assert "--opponent-gpu-memory-utilization" not in play
    (evaluation,) = _rule_commands(res.stdout, "eval_play")
    assert "--gpu-memory-utilization 0.5 --opponent-gpu-memory-utilization 0.3" in evaluation
    # the family's device: the embedded default asks for no GPU
    assert "--device cpu" in play and "--device cpu" in evaluation


def test_two_engines_beyond_one_gpu_are_refused(workdir):
    res = snakemake(
        workdir, "spag_epoch1", "-n",
        config={"selfplay": {"backend": "vllm"},
                "evaluation": {"gpu_memory_utilization": 0.6,
                               "opponent_gpu_memory_utilization": 0.6}},
    )  # fmt: skip
    assert res.returncode != 0
    assert "opponent_gpu_memory_utilization' = 1.2" in res.stdout + res.stderr


def test_an_endpoint_opponent_leaves_the_gpu_to_the_model(workdir):
    import os

    env = {"PATH": f"{STANDIN_CONDA}{os.pathsep}{os.environ['PATH']}"}
    res = snakemake(
        workdir, "spag_epoch1", "-n", "--sdm", "conda",
        config={"base_model": {"tiny": {"head_dim": 64}}, "selfplay": {"backend": "vllm"},
                "evaluation": {"opponent": "openai:http://127.0.0.1:9/v1?model=m",
                               "gpu_memory_utilization": 0.9}},
        env=env,
    )  # fmt: skip
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]


def test_every_rule_execs_its_step(workdir):
    """No shell stays between Snakemake and a step (tests/test_faults.py kills one)."""
    res = snakemake(
        workdir,
        "all",
        "preflight",
        "-n",
        "-p",
        config={"resources": {"train": {"gpus": 2, "cpus": 4}}},
    )
    assert res.returncode == 0, res.stderr
    commands = [
        line.removeprefix("Shell command: ")
        for line in res.stdout.splitlines()
        if line.startswith("Shell command: ") and line != "Shell command: None"
    ]
    assert len(commands) > 20
    assert [c for c in commands if not c.startswith("exec ")] == []
    assert any(
        c.startswith("exec env OMP_NUM_THREADS=2 spag gpu-lease 2 torchrun") for c in commands
    )


def test_nested_config_on_the_command_line_plans(workdir):
    res = snakemake(
        workdir,
        "spag_epoch1",
        "-n",
        "--config",
        "selfplay={num_shards: 4}",
        "resources={selfplay: {cpus: 2}}",
    )
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout)["selfplay"] == 4
