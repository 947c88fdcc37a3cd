# The preflight's jobs, one per family of jobs: the family, its conda environment, its
# launch prefix and the flags of `spag preflight`. Included by preflight.smk; no rules.

from spag.ops.cluster import threads_per_rank
from spag.ops.device import family_device
from spag.ops.preflight import training_memory_plan
from spag.generation.openai_backend import is_endpoint_spec


def _endpoints(*specs):
    return [s for s in specs if is_endpoint_spec(s)]


def preflight_units():
    """Preflight job name -> (resource family, conda env, launch prefix, spag, flags)."""
    s, base = config["selfplay"], config["base_model"]
    model = base["gguf_file"] or base["name_or_path"]
    common = dict(path=[str(RESULTS)], online=not config["offline"])
    engine = dict(
        backend=s["backend"],
        model=model,
        dtype=s["dtype"],
        max_length=s["max_length"],
    )

    def vllm_engine(family, section):
        # The shape of the family's engine: its batch, memory share and GPUs.
        if s["backend"] != "vllm":
            return {}
        gpus = config["resources"][family]["gpus"]
        return dict(
            batch_size=config[section]["batch_size"],
            gpu_memory_utilization=config[section]["gpu_memory_utilization"],
            tensor_parallel_size=s["tensor_parallel_size"] or max(gpus, 1),
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
            dict(
                **common,
                **engine,
                **vllm_engine("selfplay", "selfplay"),
                endpoint=teacher_specs if play_teacher else [],
            ),
        ),
        "train": (
            "train",
            gpu_env("train"),
            train_launcher(),
            dict(
                path=[str(RESULTS), str(CHECKPOINTS)],
                deepspeed=stages,
                training_gib=training_memory_plan(config, BASE_MODEL),
                threads=(
                    threads_per_rank(r["cpus"], procs) if train_launcher() else None
                ),
                cpus=r["cpus"] if train_launcher() else None,
            ),
        ),
        "score": ("score", gpu_env("train"), "", dict(**common)),
        "evaluate": (
            "evaluate",
            backend_env(),
            "",
            dict(
                **common,
                **engine,
                **vllm_engine("evaluate", "evaluation"),
                endpoint=_endpoints(config["evaluation"]["opponent"]),
            ),
        ),
        "reasoning": (
            "evaluate",
            gpu_env("eval"),
            "",
            dict(**common, lm_eval=True),
        ),
        # The base model is prepared in the train env: it must find the model offline.
        "cpu": ("cpu", gpu_env("train"), "", dict(**common, model=model)),
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
        # The engine families check the environment their jobs play in.
        spag = ENGINE_SPAG if unit in ("selfplay", "evaluate") else "spag"
        units[unit] = (family, env, launch, spag, cli_flags(**flags))
    return units
