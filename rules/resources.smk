# How jobs run and what they are told: resources, threads and conda environment of each
# rule family (config `resources.<family>`), the training launcher, and the command-line
# flags that rules pass to `spag` (spag.ops.cluster and each step's settings declaration).
# No rules.

import os
import shlex

from spag.ops.algorithm import algorithm_params
from spag.ops.cluster import family_resources, torchrun_prefix
from spag.commands.assign_rewards import AssignRewardsConfig
from spag.commands.eval_reasoning import EvalReasoningConfig
from spag.commands.target_words import TargetWordsConfig
from spag.data.words import words_arguments
from spag.evaluation.reasoning import reasoning_arguments
from spag.game.play_settings import (
    PlayConfig,
    eval_play_arguments,
    eval_sampled_play_arguments,
    selfplay_arguments,
    teacher_play_arguments,
)
from spag.game.rewards import rewards_arguments
from spag.game.teacher import teacher_plays_locally
from spag.settings import cli_flags, step_flags
from spag.training.settings import (
    ScoreRefConfig,
    TrainConfig,
    score_arguments,
    stage_arguments,
)

# ---------------------------------------------------------------- resources
# The loop's jobs (self-play, scoring, training: the way to the next model) start before
# evaluation jobs waiting for the same free cores or GPUs; evaluations are leaves of the
# plan and fill the slots the loop leaves.
LOOP_PRIORITY = 10


def job_resources(kind):
    """Resources of one rule family (config `resources.<kind>`), for SLURM and local runs.

    Memory and run time grow with the attempt up to the family's ceilings; the SLURM
    request shapes are in spag.ops.cluster.family_resources.
    """
    return family_resources(config["resources"][kind], where=f"resources.{kind}")


def gpu_env(name):
    """The conda env file of a torch env (train, eval, vllm) for `cuda_build`: PyPI's
    CUDA 13 builds in envs/, CUDA 12 builds in envs/cuda12/ (docs/cluster.md)."""
    folder = "envs/cuda12" if config["cuda_build"] == "cu12" else "envs"
    return f"../{folder}/{name}.yaml"


def backend_env():
    # vLLM has its own conda environment; the transformers backend shares training's.
    return gpu_env("vllm" if config["selfplay"]["backend"] == "vllm" else "train")


def engine_spag():
    """The `spag` of the jobs that start a generation engine: selfplay.vllm_env's for
    vLLM where it is set (runs without --sdm conda), else the one on PATH. Part of the
    shell command, not of params: setting it reruns nothing."""
    s = config["selfplay"]
    if s["backend"] == "vllm" and s["vllm_env"]:
        env = os.path.abspath(os.path.expanduser(s["vllm_env"]))
        return shlex.quote(os.path.join(env, "bin", "spag"))
    return "spag"


ENGINE_SPAG = engine_spag()


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


def train_launcher():
    r = config["resources"]["train"]
    return torchrun_prefix(r["gpus"], r["nodes"], r["cpus"])


def teacher_spag():
    # Endpoint teachers start no engine.
    return engine_spag() if teacher_plays_locally(config) else "spag"


TEACHER_SPAG = teacher_spag()


def teacher_family():
    # A folder teacher or partner plays like self-play (GPU); endpoints only wait on
    # HTTP, for hours at paper scale: their own family (resources.teacher).
    return "selfplay" if teacher_plays_locally(config) else "teacher"


# ---------------------------------------------------------------- arguments
# Each step's flags come from the dataclass that declares its settings (spag.settings);
# step_flags leaves out those at the step's default (a knob added at its default changes
# no job's command line) and renders the rest shell-quoted.
def train_args(stage):
    """`spag train` flags of the `imitation` or `spag` stage."""
    return step_flags(TrainConfig, **stage_arguments(config, stage))


def score_args(stage):
    """`spag score-ref` flags for the samples of a training stage (its length and format)."""
    return step_flags(ScoreRefConfig, **score_arguments(config, stage))


def play_args():
    return step_flags(PlayConfig, **selfplay_arguments(config))


def eval_play_args():
    return step_flags(PlayConfig, **eval_play_arguments(config))


def eval_sampled_play_args():
    return step_flags(PlayConfig, **eval_sampled_play_arguments(config))


def teacher_play_args(wildcards, threads):
    flags = step_flags(PlayConfig, **teacher_play_arguments(config))
    if teacher_plays_locally(config):
        flags += f" --threads {threads_arg(wildcards, threads)}"
    return flags


def reasoning_args():
    return step_flags(EvalReasoningConfig, **reasoning_arguments(config))


def words_args():
    return step_flags(TargetWordsConfig, **words_arguments(config))


def rewards_args():
    return step_flags(
        AssignRewardsConfig, **rewards_arguments(config), game=config["game"]["name"]
    )


# The rerun trigger on the algorithm's source (config rerun_on_algorithm_edits): no
# params at all when off, so that finished runs' params stay as they were.
def algorithm(part, stage=None):
    return algorithm_params(config, part, stage)
