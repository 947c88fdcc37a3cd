# Helpers shared by the rule files (validated config, result paths, resources,
# and the command-line arguments that rules pass to `spag`).

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from spag.config import (
    check_backend_available,
    check_run_inputs,
    check_word_source,
    validate_config,
)
from spag.training.settings import stage_arguments
from spag.tracking import check_trackers_available, config_digest, workflow_environment
from spag.provenance import ENV_CONFIG, git_info
from spag.cluster import family_resources, threads_per_rank, torchrun_prefix
from spag.device import family_device
from spag.data.words import read_word_list
from spag.game.teacher import teacher_plan, uses_teacher
from spag.generation.openai_backend import is_endpoint_spec

validate_config(config, source="config")
if not workflow.remote_exec:
    # Only conda: no rule names a container.
    _env_per_rule = (
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    )
    check_backend_available(config, env_per_rule=_env_per_rule)
    if not _env_per_rule:
        # Jobs run beside Snakemake: a tracker it cannot import would stop training.
        check_trackers_available(config["tracking"]["report_to"])

if config["offline"]:
    # The embedded default never waits on the hub; jobs inherit this.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Jobs call the `spag` installed beside this Snakemake (e.g. `.venv/bin/snakemake`
# run without activating the environment).
_bindir = Path(sys.executable).parent
if (_bindir / "spag").exists():
    os.environ.update(PATH=os.pathsep.join([str(_bindir), os.environ.get("PATH", "")]))

EPOCHS = config["epochs"]
NUM_SHARDS = config["selfplay"]["num_shards"]
TINY_BASE = (
    config["base_model"]["name_or_path"] == "tiny"
    and not config["base_model"]["gguf_file"]
)


# ---------------------------------------------------------------- paths
RESULTS = Path("results")
CHECKPOINTS = Path(
    "checkpoints"
)  # trainer checkpoints: outside declared outputs, for resume


def result(*parts):
    return str(RESULTS.joinpath(*parts))


def log_path(*parts):
    return str(RESULTS.joinpath("logs", *parts))


def bench_path(*parts):
    return str(RESULTS.joinpath("benchmarks", *parts))


def epoch_path(*parts):
    """A path under results/epoch{epoch}/ (the wildcard is left for Snakemake)."""
    return str(RESULTS.joinpath("epoch{epoch}", *parts))


WORDS_TRAIN = result("words", "train.txt")
WORDS_TEST = result("words", "test.txt")
# The word source is read before any job until the word lists exist.
if not Path(WORDS_TRAIN).exists():
    check_word_source(config)
BASE_MODEL = result("base_model")
# The base model's inputs are checked before any job, until the base model is built
# (then they are no longer read, and the check would only slow every start).
if not Path(BASE_MODEL).exists():
    check_run_inputs(config)
SFT_DATA = result("data", "sft.parquet")
IMITATION_SAMPLES = result("imitation", "samples.parquet")
TEACHER_SHARD = result("teacher", "shard_{shard}.parquet")
TEACHER_EPISODES = result("teacher", "episodes.parquet")
TEACHER_OUTCOMES = result("teacher", "outcomes.tsv")
IMITATION_SCORED = result("imitation", "scored.parquet")
IMITATION_MODEL = result("imitation", "model")
IMITATION_LOSS = result("imitation", "loss.tsv")
SHARD = epoch_path("selfplay", "shard_{shard}.parquet")
SHARD_BENCHMARK = bench_path("epoch{epoch}", "selfplay", "shard_{shard}.tsv")
EPISODES = epoch_path("episodes.parquet")
OUTCOMES = epoch_path("outcomes.tsv")
SAMPLES = epoch_path("samples.parquet")
SCORED = epoch_path("scored.parquet")
MODEL = epoch_path("model")
LOSS = epoch_path("loss.tsv")
EVAL_GAMES = epoch_path("eval", "games.parquet")
EVAL_TABLE = epoch_path("eval", "games.tsv")
EPOCH_SUMMARY = epoch_path("summary.tsv")
REASONING = result("eval", "reasoning", "{model}.json")
# The base model and M0 play the same evaluation games as M(e): the rows that M(e) is
# read against (M0 against itself with the default opponent, `imitation`).
BASELINE_MODELS = ("base", "imitation")
BASELINE_GAMES = result("eval", "games", "{model}.parquet")
BASELINE_TABLE = result("eval", "games", "{model}.tsv")
# Models of the reasoning evaluation: the base model, M0 and M1 ... M(EPOCHS).
REASONING_MODELS = [*BASELINE_MODELS, *(f"epoch{e}" for e in range(1, EPOCHS + 1))]
SUMMARY_EPOCHS = result("summary", "epochs.tsv")
SUMMARY_REASONING = result("summary", "reasoning.tsv")
SUMMARY_EVAL_GAMES = result("summary", "eval_games.tsv")
PLOTS_DIR = result("plots")
RUN_INFO = result("run_info.json")
# What produced the results, on the summary tables (spag.provenance).
_git = git_info(workflow.basedir)
PROJECT_COMMIT = (
    f"{_git['commit'][:12]}{'-dirty' if _git['dirty'] else ''}" if _git else "unknown"
)
CONFIG_DIGEST = config_digest(config)
# Tracking names reach the jobs through the environment (spag.tracking): renaming a
# run or adding a tracker reruns no job.
os.environ.update(workflow_environment(config, ".", tracking_dir=result("tracking")))
RESOLVED_CONFIG = json.dumps(config, sort_keys=True, default=str)
os.environ[ENV_CONFIG] = RESOLVED_CONFIG


def shard_name(shard):
    return f"{shard:03d}"


def model_of_epoch(epoch):
    """M(e): the imitation model for e = 0, else epoch e's SPAG model."""
    epoch = int(epoch)
    return IMITATION_MODEL if epoch == 0 else MODEL.format(epoch=epoch)


def epoch_seed(wildcards):
    # Each epoch draws its own randomised training prompts.
    return config["seed"] * 1000 + int(wildcards.epoch)


def previous_model(wildcards):
    return model_of_epoch(int(wildcards.epoch) - 1)


def current_model(wildcards):
    return model_of_epoch(wildcards.epoch)


def base_model_gguf():
    # A local GGUF is an input: a changed file rebuilds the base model and what follows.
    gguf = config["base_model"]["gguf_file"]
    return [gguf] if gguf else []


# The evaluation's built-in opponents: M0, or the base model under the run's prompt format.
BUILTIN_OPPONENTS = {"imitation": IMITATION_MODEL, "base": BASE_MODEL}


def opponent_model(wildcards):
    """The opponent's model folder (an input); none for an OpenAI-compatible endpoint."""
    opponent = config["evaluation"]["opponent"]
    if opponent in BUILTIN_OPPONENTS:
        return BUILTIN_OPPONENTS[opponent]
    return [] if is_endpoint_spec(opponent) else opponent


def opponent_name_arg():
    """A built-in opponent is named as in the config; a folder or an endpoint gets the
    name `spag play` gives it (the folder's, the endpoint's model)."""
    opponent = config["evaluation"]["opponent"]
    return f"--opponent-name {opponent}" if opponent in BUILTIN_OPPONENTS else ""


def opponent_arg(wildcards, input):
    # A folder comes from the rule's input; an endpoint spec is passed as it is.
    return input.opponent if input.opponent else config["evaluation"]["opponent"]


def named_model(wildcards):
    """Model folder for the reasoning evaluation's {model} wildcard."""
    if wildcards.model == "base":
        return BASE_MODEL
    if wildcards.model == "imitation":
        return IMITATION_MODEL
    return model_of_epoch(wildcards.model.removeprefix("epoch"))


def shards_of_epoch(wildcards):
    return expand(
        SHARD, epoch=wildcards.epoch, shard=map(shard_name, range(NUM_SHARDS))
    )


def shard_benchmarks_of_epoch(wildcards):
    shards = map(shard_name, range(NUM_SHARDS))
    return expand(SHARD_BENCHMARK, epoch=wildcards.epoch, shard=shards)


def epoch_targets(epoch):
    """What spag_epoch{N} builds: M(N), and the evaluations of the base model, M0 ... M(N).

    Earlier epochs' evaluations are cheap next to their training and give the curve
    that the paper's claim is about. Every intermediate file of those epochs is a
    target too: Snakemake does not rebuild a removed intermediate whose dependents are
    up to date, and a user who removes one (a shard, the episodes) wants it rebuilt,
    with what depends on it.
    """
    targets = [
        model_of_epoch(epoch),
        *imitation_targets(),
        WORDS_TRAIN,
        WORDS_TEST,
        SFT_DATA,
        REASONING.format(model="base"),
    ]
    targets.append(REASONING.format(model="imitation"))
    targets += [BASELINE_TABLE.format(model=m) for m in BASELINE_MODELS]
    for e in range(1, int(epoch) + 1):
        targets += expand(SHARD, epoch=e, shard=map(shard_name, range(NUM_SHARDS)))
        targets += [
            p.format(epoch=e)
            for p in (EPISODES, OUTCOMES, SAMPLES, SCORED, LOSS, EVAL_GAMES)
        ]
        targets += [
            EVAL_TABLE.format(epoch=e),
            REASONING.format(model=f"epoch{e}"),
            EPOCH_SUMMARY.format(epoch=e),
        ]
    return targets


# ---------------------------------------------------------------- teacher games
# With data.imitation "teacher", M0 imitates games played by data.teacher (an
# endpoint or a model folder) instead of a released file. The plan (games, worst-case
# requests) is checked against the cost cap before any job and shown until the games
# exist.
TEACHER = uses_teacher(config)
if TEACHER:
    _teacher = config["data"]["teacher"]
    _num_words = (
        config["words"]["num_train"]
        if _teacher["words"] == "train"
        else len(read_word_list(_teacher["words"]))
    )
    TEACHER_PLAN = teacher_plan(config, _num_words, built=(BASE_MODEL, IMITATION_MODEL))
    if not Path(TEACHER_EPISODES).exists():
        print(TEACHER_PLAN.describe(config), file=sys.stderr)


def imitation_input(wildcards):
    return TEACHER_EPISODES if TEACHER else config["data"]["imitation"]


def _is_folder_player(value):
    return bool(value) and not value.startswith("openai:")


def teacher_inputs(wildcards):
    t = config["data"]["teacher"]
    inputs = {
        "words": WORDS_TRAIN if t["words"] == "train" else t["words"],
        "prompts": config["game"]["prompts"],
    }
    for key in ("model", "partner"):
        if _is_folder_player(t[key]):
            inputs[key] = t[key]
    return inputs


def _teacher_local():
    t = config["data"]["teacher"]
    return _is_folder_player(t["model"]) or _is_folder_player(t["partner"])


def teacher_family():
    # A folder teacher or partner plays like self-play (GPU); endpoints only wait on
    # HTTP, for hours at paper scale: their own family (resources.teacher).
    return "selfplay" if _teacher_local() else "teacher"


def teacher_env():
    return backend_env() if teacher_family() == "selfplay" else "../envs/spag.yaml"


def teacher_play_args(wildcards, threads):
    t = config["data"]["teacher"]
    options = dict(
        model=t["model"],
        model_name="teacher",
        max_new_tokens=t["max_new_tokens"],
        temperature=t["temperature"],
        top_p=t["top_p"],
        top_k=t["top_k"],
        greedy=t["temperature"] == 0,
        max_turns=config["game"]["max_turns"],
    )
    if t["partner"]:
        options.update(opponent=t["partner"], opponent_name="partner")
        options["no_greedy"] = t["temperature"] > 0
    else:
        options["games_per_word"] = t["games_per_word"]
    if _teacher_local():
        # Engine flags only where a local model plays: for endpoints they would do
        # nothing but rerun (and pay for) the games whenever self-play settings change.
        options.update(
            engine_args("selfplay"),
            **vllm_memory(config["selfplay"]["gpu_memory_utilization"]),
            batch_size=config["selfplay"]["batch_size"],
        )
    flags = cli_args(**options)
    if _teacher_local():
        flags += f" --threads {threads_arg(wildcards, threads)}"
    return flags


def teacher_shards(wildcards=None):
    shards = range(config["data"]["teacher"]["num_shards"])
    return expand(TEACHER_SHARD, shard=map(shard_name, shards))


def imitation_targets():
    """M0 and every file it is built from (with teacher games their shards): like
    self-play files, a removed one is rebuilt (Snakemake does not rebuild an
    intermediate file on its own)."""
    inputs = [BASE_MODEL, IMITATION_SAMPLES, IMITATION_SCORED, IMITATION_LOSS]
    if TEACHER:
        inputs += [*teacher_shards(), TEACHER_EPISODES, TEACHER_OUTCOMES]
    return [IMITATION_MODEL, *inputs]


# ---------------------------------------------------------------- resources
def job_resources(kind):
    """Resources of one rule family (config `resources.<kind>`), for SLURM and local runs.

    Memory and run time grow with the attempt up to the family's ceilings; the SLURM
    request shapes are in spag.cluster.family_resources.
    """
    return family_resources(config["resources"][kind], where=f"resources.{kind}")


def backend_env():
    # vLLM has its own conda environment; the transformers backend shares training's.
    if config["selfplay"]["backend"] == "vllm":
        return "../envs/vllm.yaml"
    return "../envs/train.yaml"


def job_threads(kind):
    # Threads bound a job's CPUs locally (the SLURM request is cpus_per_task).
    return config["resources"][kind]["cpus"]


# A job's torch threads: in a remote (SLURM) job step the CPUs its job was given, else
# the rule's threads. Snakemake caps `threads` at the workflow profile's `cores` even
# for remote jobs, so the SLURM value is read where the job runs.
def threads_arg(wildcards, threads):
    if workflow.remote_exec:
        # A job step of a remote executor: the CPUs its SLURM job was given.
        return f'"${{SLURM_CPUS_PER_TASK:-{threads}}}"'
    # Local (also a local executor inside an allocation): the scheduler's threads.
    return str(threads)


# ---------------------------------------------------------------- arguments
def cli_args(**options):
    """Render keyword options as `--key value` flags (booleans as bare flags), shell-quoted."""
    parts = []
    for key, value in options.items():
        if value is None or value is False or value == []:
            continue
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def train_args(stage):
    """`spag train` flags of the `imitation` or `spag` stage (spag.training.settings)."""
    return cli_args(**stage_arguments(config, stage))


def train_launcher():
    r = config["resources"]["train"]
    return torchrun_prefix(r["gpus"], r["nodes"], r["cpus"])


def engine_args(family):
    """`spag play` flags of the generation engine, shared by self-play and evaluation
    games; `family` is the rule family whose GPUs a vLLM engine spans by default."""
    s = config["selfplay"]
    options = dict(
        backend=s["backend"],
        max_turns=config["game"]["max_turns"],
        prompt_format=config["game"]["prompt_format"],
        max_length=s["max_length"],
        dtype=s["dtype"],
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device=family_device(config, family),
    )
    if s["backend"] == "vllm":
        gpus = config["resources"][family]["gpus"]
        options["tensor_parallel_size"] = s["tensor_parallel_size"] or max(gpus, 1)
    else:
        options.update(
            kv_reuse_gib=s["kv_reuse_gib"], batch_memory_gib=s["batch_memory_gib"]
        )
    return options


def vllm_memory(model, opponent=None):
    # vLLM engines' shares of the GPU's total memory (no flag for other backends).
    if config["selfplay"]["backend"] != "vllm":
        return {}
    return dict(gpu_memory_utilization=model, opponent_gpu_memory_utilization=opponent)


def play_args():
    s = config["selfplay"]
    return cli_args(
        **engine_args("selfplay"),
        **vllm_memory(s["gpu_memory_utilization"]),
        max_new_tokens=s["max_new_tokens"],
        temperature=s["temperature"],
        top_k=s["top_k"],
        top_p=s["top_p"],
        batch_size=s["batch_size"],
    )


def eval_play_args():
    e = config["evaluation"]
    return cli_args(
        **engine_args("evaluate"),
        **vllm_memory(
            e["gpu_memory_utilization"], e["opponent_gpu_memory_utilization"]
        ),
        max_new_tokens=e["max_new_tokens"],
        batch_size=e["batch_size"],
        greedy=True,
    )


def score_args(stage):
    """`spag score-ref` flags for the samples of a training stage (its length and path)."""
    s = config["scoring"]
    return cli_args(
        batch_size=s["batch_size"],
        dtype=s["dtype"],
        max_length=config[stage]["max_length"],
        no_padding_free=not config[stage]["padding_free"],
        prompt_format=config["game"]["prompt_format"],
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device=family_device(config, "score"),
    )


def reasoning_args():
    r = config["evaluation"]["reasoning"]
    return cli_args(
        tasks=r["tasks"],
        include_path=r["include_path"],
        limit=r["limit"],
        num_fewshot=r["num_fewshot"],
        batch_size=r["batch_size"],
        dtype=r["dtype"],
        apply_chat_template=config["game"]["prompt_format"] == "chat",
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device=family_device(config, "evaluate"),
    )


# ---------------------------------------------------------------- report inputs
# How a wildcard shows in a benchmark's label: train_spag/epoch1, selfplay/epoch1/shard_000.
BENCHMARK_LABEL_PARTS = {
    "epoch": "epoch{epoch}",
    "shard": "shard_{shard}",
    "model": "{model}",
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

    Labelled by the rule and its wildcards (train_spag/epoch1, eval_play_baseline/base).
    """
    once = (
        "target_words",
        "base_model",
        "sft_data",
        "imitation_samples",
        "score_imitation",
        "train_imitation",
    )
    per_epoch = (
        "selfplay",
        "merge_episodes",
        "assign_rewards",
        "score_ref",
        "train_spag",
        "eval_play",
        "eval_games",
    )
    per_model = {
        "eval_reasoning": REASONING_MODELS,
        "eval_play_baseline": BASELINE_MODELS,
        "eval_games_baseline": BASELINE_MODELS,
    }
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
            shard=map(shard_name, range(NUM_SHARDS)),
            model=per_model.get(name, ()),
            allow_missing=True,
        ):
            job, _, path = entry.partition("=")
            entries.setdefault(job, path)
    return entries


# ---------------------------------------------------------------- preflight
def _endpoints(*specs):
    return [s for s in specs if is_endpoint_spec(s)]


def preflight_units():
    """Preflight job name -> (resource family, conda env, launch prefix, flags)."""
    s, base = config["selfplay"], config["base_model"]
    model = base["gguf_file"] or base["name_or_path"]
    common = dict(path=[str(RESULTS)], online=not config["offline"])
    engine = dict(
        backend=s["backend"],
        model=model,
        dtype=s["dtype"],
        max_length=s["max_length"],
    )
    teacher = config["data"]["teacher"] if TEACHER else {}
    teacher_specs = _endpoints(teacher.get("model"), teacher.get("partner"))
    play_teacher = TEACHER and teacher_family() == "selfplay"
    r = config["resources"]["train"]
    procs = max(r["gpus"], 1)
    stages = sorted(
        {config[st]["deepspeed"] for st in ("imitation", "spag")} - {None, "none"}
    )
    units = {
        "selfplay": (
            "selfplay",
            backend_env(),
            "",
            dict(**common, **engine, endpoint=teacher_specs if play_teacher else []),
        ),
        "train": (
            "train",
            "../envs/train.yaml",
            train_launcher(),
            dict(
                path=[str(RESULTS), str(CHECKPOINTS)],
                deepspeed=stages,
                threads=(
                    threads_per_rank(r["cpus"], procs) if train_launcher() else None
                ),
                cpus=r["cpus"] if train_launcher() else None,
            ),
        ),
        "score": ("score", "../envs/train.yaml", "", dict(**common)),
        "evaluate": (
            "evaluate",
            backend_env(),
            "",
            dict(
                **common,
                **engine,
                endpoint=_endpoints(config["evaluation"]["opponent"]),
            ),
        ),
        "reasoning": (
            "evaluate",
            "../envs/eval.yaml",
            "",
            dict(**common, lm_eval=True),
        ),
        # The base model is prepared in the train env: it must find the model offline.
        "cpu": ("cpu", "../envs/train.yaml", "", dict(**common, model=model)),
    }
    if TEACHER and not play_teacher:
        units["teacher"] = (
            "teacher",
            "../envs/spag.yaml",
            "",
            dict(**common, endpoint=teacher_specs),
        )
    for unit, (family, env, launch, flags) in units.items():
        flags.update(device=family_device(config, family), resources=family)
        units[unit] = (family, env, launch, cli_args(**flags))
    return units
