# Preflight: `snakemake preflight` (with or without --profile slurm) submits one short
# job per rule family, exactly like the family's real jobs (resources, environment,
# launch prefix), and prints one table of what each found (spag.preflight). It runs
# every time it is asked for: the family reports are temporary inputs that
# `spag preflight-report` moves to results/preflight/<family>.json.

from spag.cluster import threads_per_rank

PREFLIGHT_DIR = result("preflight")
PREFLIGHT_WORK = result("preflight", ".work", "{family}.json")


def _endpoints(*specs):
    return [s for s in specs if s and s.startswith("openai:")]


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
        # The base model is prepared by a CPU job: it must find it offline.
        "cpu": ("cpu", "../envs/spag.yaml", "", dict(**common, model=model)),
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


PREFLIGHT_UNITS = preflight_units()

for _unit, (_family, _env, _launch, _flags) in PREFLIGHT_UNITS.items():

    rule:
        name:
            f"preflight_{_unit}"
        output:
            temp(PREFLIGHT_WORK.format(family=_unit)),
        log:
            log_path("preflight", f"{_unit}.log"),
        conda:
            _env
        threads: job_threads(_family)
        resources:
            **job_resources(_family),
        params:
            unit=_unit,
            launch=_launch,
            flags=_flags,
        shell:
            "{params.launch} spag preflight --family {params.unit} --output {output:q}"
            " {params.flags} > {log:q} 2>&1"


localrules:
    preflight,


# No output: it runs whenever it is a target, and with it the family jobs.
rule preflight:
    input:
        expand(PREFLIGHT_WORK, family=PREFLIGHT_UNITS),
    conda:
        "../envs/spag.yaml"
    params:
        out=PREFLIGHT_DIR,
    shell:
        "spag preflight-report --inputs {input:q} --output-dir {params.out:q}"
