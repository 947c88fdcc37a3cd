"""Preflight: what a rule family's jobs will meet, checked in minutes before a long run.

``snakemake preflight`` submits one short job per family, exactly like the family's
real jobs (resources, environment, launch prefix; training under its torchrun/srun
shape), and each runs ``spag preflight``: the checks that family's steps depend on,
as rows of ``{check, status, detail}``. A failing row says what to change. Every
rank of a training job checks; rank 0 writes the family's report with every rank's
rows. ``spag preflight-report`` puts the families together, prints one table and
fails when a row failed.

Checks (each only where the family needs it): the hosts, GPUs (names, memory), torch
and its CUDA, the driver's CUDA, CUDA working (a real allocation and product), the
generation backend importable (vLLM: a real engine started on the base model for one
token, as a shard job starts it, and the games it holds at once),
DeepSpeed's compiled ops built in the node's folder, each training stage's estimated
memory per GPU against the GPU found, a collective across every rank (NCCL on GPUs,
else gloo), threads per rank, free disk where results and checkpoints
go, the base model present offline, an endpoint answering ``GET /v1/models``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.generation.settings import SelfplaySettings

OK, FAIL, INFO = "ok", "FAIL", "info"
# A collective that does not complete within this many seconds is a failed row.
COLLECTIVE_TIMEOUT_S = 120
# Report columns, in the printed table's order.
TABLE_COLUMNS = ("family", "host", "check", "status", "detail")


@dataclass
class Row:
    check: str
    status: str
    detail: str
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])


@dataclass
class FamilyPlan:
    """What one family's preflight job checks (the rule passes it as flags)."""

    family: str
    resources: str = ""  # the config's resources.<key> (default: family)
    device: str = "cpu"
    backend: str | None = None  # hf | vllm: the family plays games locally
    model: str | None = None  # the base model: "tiny", a packaged name, a folder or hub id
    dtype: str = "auto"
    max_length: int | None = None
    batch_size: int | None = None  # the engine's max_num_seqs
    gpu_memory_utilization: float = SelfplaySettings.gpu_memory_utilization
    tensor_parallel_size: int = 1
    deepspeed: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    # Training: each stage's estimated GiB per GPU (spag.ops.capacity), where the base
    # model's config could be read when the run was planned.
    training_gib: dict[str, float] = field(default_factory=dict)
    threads: int | None = None  # expected threads per rank
    cpus: int | None = None  # the family's CPUs (per node): each rank's step must see them
    lm_eval: bool = False
    offline: bool = True

    def __post_init__(self) -> None:
        self.resources = self.resources or self.family


# ---------------------------------------------------------------- checks
def _torch_rows(plan: FamilyPlan) -> list[Row]:
    from spag.ops.device import BUILD_SETTING, driver_cuda_version, driver_minimum

    driver = driver_cuda_version()
    if importlib.util.find_spec("torch") is None:
        if plan.device == "cuda":
            return [Row("torch", FAIL, "torch is not installed in this job's environment")]
        return [Row("torch", INFO, f"not installed (not needed); driver CUDA {driver or 'none'}")]
    import torch

    rows = [
        Row(
            "torch",
            INFO,
            f"torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none (CPU build)'}"
            + (
                f" (needs an NVIDIA driver of the {driver_minimum(torch.version.cuda)} series;"
                f" {BUILD_SETTING} switches builds)"
                if torch.version.cuda
                else ""
            )
            + f"; driver CUDA {driver or 'none (no NVIDIA driver)'}; Python "
            f"{sys.version.split()[0]}",
        )
    ]
    if plan.device != "cuda":
        return rows
    from spag.ops.device import cuda_devices, cuda_problem, nvml_devices

    # A vLLM family checks as its shards do (no CUDA context: the engine row starts an
    # engine beside this process, which must not hold GPU memory).
    problem = cuda_problem(probe=plan.backend != "vllm")
    if problem:
        rows.append(
            Row(
                "cuda",
                FAIL,
                f"{problem}. Fix: a torch built for the driver's CUDA (or a newer driver), "
                f"or resources.{plan.resources}.gpus: 0",
            )
        )
    else:
        listed = nvml_devices() if plan.backend == "vllm" else cuda_devices()
        gpus = ", ".join(f"{d['name']} ({d['memory_gib']} GiB)" for d in listed)
        checked = "allocation and matmul work" if plan.backend != "vllm" else "NVML lists them"
        rows.append(Row("cuda", OK, f"{checked}; GPUs: {gpus}"))
    return rows


def _threads_row(plan: FamilyPlan) -> Row:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    omp = os.environ.get("OMP_NUM_THREADS")
    torch_threads = None
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch_threads = torch.get_num_threads()
    detail = (
        f"CPUs usable: {cpus}; OMP_NUM_THREADS={omp or '<unset>'}; torch threads {torch_threads}"
    )
    if plan.threads is None:
        return Row("threads", INFO, detail)
    got = int(omp) if omp else torch_threads
    if got != plan.threads or (cpus or 0) < (plan.cpus or plan.threads):
        return Row(
            "threads",
            FAIL,
            f"{detail}; expected {plan.threads} threads per rank (resources.{plan.resources}.cpus"
            f" / ranks per node) and {plan.cpus or plan.threads} usable CPUs: check the launch "
            "prefix and the job's --cpus-per-task",
        )
    return Row("threads", OK, detail + f" (= resources.{plan.resources}.cpus / ranks)")


def _disk_rows(plan: FamilyPlan) -> list[Row]:
    rows = []
    for path in plan.paths:
        p = Path(path)
        probe = p
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        usage = shutil.disk_usage(probe)
        free = usage.free / 1024**3
        writable = os.access(probe, os.W_OK)
        detail = f"{path}: {free:.1f} GiB free of {usage.total / 1024**3:.0f} GiB"
        if not writable:
            rows.append(Row("disk", FAIL, f"{detail}; not writable by this job"))
        elif free < 1.0:
            rows.append(Row("disk", FAIL, f"{detail}: under 1 GiB, free some space"))
        else:
            rows.append(Row("disk", OK, detail))
    return rows


def _model_row(plan: FamilyPlan) -> Row | None:
    name = plan.model
    if not name:
        return None
    from spag.ops.base_model import PACKAGED_MODELS, packaged_model_file

    if name == "tiny":
        return Row("base model", OK, "the embedded tiny model (built by the run)")
    if Path(name).suffix == ".gguf":
        if Path(name).is_file():
            return Row("base model", OK, f"GGUF file {name} (converted by the run)")
        return Row("base model", FAIL, f"{name}: no such file (base_model.gguf_file)")
    if name in PACKAGED_MODELS:
        try:
            path, _ = packaged_model_file(name)
        except SpagInputError as exc:
            return Row("base model", FAIL, str(exc))
        return Row("base model", OK, f"{name}: {path}")
    folder = Path(name).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            return Row("base model", OK, f"local folder {folder}")
        return Row("base model", FAIL, f"{folder} has no config.json (base_model.name_or_path)")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception as exc:  # noqa: BLE001 - a malformed id is reported, not raised
        return Row("base model", FAIL, f"base_model.name_or_path {name!r}: {exc}")
    if isinstance(cached, str):
        return Row("base model", OK, f"{name} in the Hugging Face cache ({Path(cached).parent})")
    if plan.offline:
        return Row(
            "base model",
            FAIL,
            f"{name} is not in the Hugging Face cache and the run is offline: download it "
            "on a node with network (huggingface-cli download), or set offline: false",
        )
    return Row("base model", INFO, f"{name} not cached; the base-model job downloads it")


def _engine_model_dir(plan: FamilyPlan) -> tuple[str | None, str]:
    """The folder a vLLM engine can load the base model from now, or None and why not."""
    return model_dir_now(plan.model)


def model_dir_now(name: str | None) -> tuple[str | None, str]:
    """The folder the base model ``name`` can be read from now (a folder, or its snapshot
    in the Hugging Face cache), or None and why not."""
    if not name or name == "tiny":
        return None, "the embedded model is built by the run; the first shard starts the engine"
    from spag.ops.base_model import PACKAGED_MODELS

    if name in PACKAGED_MODELS or Path(name).suffix == ".gguf":
        return None, f"{name} is converted by the run; the first shard starts the engine"
    folder = Path(name).expanduser()
    if folder.is_dir():
        return str(folder.resolve()), ""  # the engine's job runs in another folder
    # A hub id: its snapshot in the local cache, never a download from here.
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - the base-model row reports a malformed id
        cached = None
    if isinstance(cached, str) and any(Path(cached).parent.glob("*.safetensors")):
        return str(Path(cached).parent), ""
    return None, (
        f"{name} will be downloaded by the base-model job; the first shard starts the engine"
    )


def _capacity_row(plan: FamilyPlan, model_dir: str) -> Row:
    """Games of ``max_length`` tokens one engine holds at once on the GPU found (on the
    common GPU families where this job has none)."""
    from spag.ops.capacity import GPU_FAMILIES, engine_capacity, model_config

    length = plan.max_length or 2048
    try:
        config, parameters = model_config(model_dir)
        gpus: dict[str, float] = {}
        if plan.device == "cuda":
            from spag.ops.device import nvml_devices

            gpus = {d["name"]: d["memory_gib"] for d in nvml_devices()[:1]}
        gpus = gpus or {f"{k} (no GPU here)": v for k, v in GPU_FAMILIES.items()}
        caps = {
            name: engine_capacity(
                config,
                gpu_memory_gib=gib,
                share=plan.gpu_memory_utilization,
                max_length=length,
                dtype=plan.dtype,
                parameters=parameters,
                tensor_parallel_size=plan.tensor_parallel_size,
            )
            for name, gib in gpus.items()
        }
    except Exception as exc:  # noqa: BLE001 - a config this estimate cannot read
        return Row("engine capacity", INFO, f"not estimated ({type(exc).__name__}: {exc})")
    detail = "; ".join(f"{name}: {cap.describe(length)}" for name, cap in caps.items())
    over = [name for name, cap in caps.items() if plan.batch_size and plan.batch_size > cap.games]
    if over:
        detail = (
            f"warning: batch_size {plan.batch_size} is more than the full-length games "
            f"that fit on {', '.join(over)} (beyond them vLLM queues or preempts); {detail}"
        )
    return Row("engine capacity", INFO, detail)


# A vLLM engine's first start loads the weights, compiles and captures CUDA graphs:
# minutes for a 7B model.
ENGINE_TIMEOUT_S = 900


def _engine_row(plan: FamilyPlan, model_dir: str) -> Row:
    """A real engine start: one shard of one word, one turn, one token, run as a shard
    job runs (``spag play`` in a fresh process with this job's environment and the same
    device check), so that an engine that cannot start in the shards fails here."""
    import subprocess
    import tempfile
    import time

    # This environment's spag (the job may run one named by path, selfplay.vllm_env's).
    command = [sys.executable, "-m", "spag"]
    with tempfile.TemporaryDirectory(prefix="spag-preflight-") as tmp:
        words = Path(tmp) / "words.txt"
        words.write_text("river\n")
        command += [
            "play", "--model", model_dir, "--words", str(words),
            "--output", str(Path(tmp) / "shard.parquet"),
            "--backend", "vllm", "--device", plan.device, "--dtype", plan.dtype,
            "--gpu-memory-utilization", str(plan.gpu_memory_utilization),
            "--tensor-parallel-size", str(plan.tensor_parallel_size),
            "--max-turns", "1", "--max-new-tokens", "1", "--no-journal", "--no-progress",
        ]  # fmt: skip
        if plan.max_length:
            command += ["--max-length", str(plan.max_length)]
        if plan.batch_size:
            command += ["--batch-size", str(plan.batch_size)]
        started = time.monotonic()
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S, cwd=tmp
            )
        except subprocess.TimeoutExpired:
            return Row(
                "vllm engine",
                FAIL,
                f"{model_dir}: no engine within {ENGINE_TIMEOUT_S} s (spag play, one token)",
            )
    seconds = time.monotonic() - started
    if proc.returncode == 0:
        return Row("vllm engine", OK, f"{model_dir}: engine started, one token in {seconds:.0f} s")
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    cause = next(
        (ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else ""
    )
    return Row(
        "vllm engine",
        FAIL,
        f"{model_dir}: a shard's engine does not start (exit {proc.returncode}): "
        f"{cause[-600:]}. Check selfplay.dtype, selfplay.max_length, "
        "selfplay.gpu_memory_utilization and the vLLM build (cuda_build), or use "
        "selfplay.backend: hf",
    )


def training_memory_plan(config: dict[str, Any], prepared: str | os.PathLike) -> dict[str, float]:
    """Each training stage's memory per GPU (GiB) for the method the config trains it
    with, from the base model's ``config.json``: the run's prepared base model
    (``prepared``), else the configured folder or hub snapshot; empty where none can be
    read before the run (the embedded model, a GGUF file, a model not downloaded yet)."""
    from spag.ops.capacity import read_model, stage_estimates

    folder = Path(prepared)
    if not (folder / "config.json").is_file():
        base = config["base_model"]
        found, _ = model_dir_now(base["gguf_file"] or base["name_or_path"])
        if found is None:
            return {}
        folder = Path(found)
    # Planned at every parse of the workflow: a model or adapter the estimate does not
    # know (another architecture, other target modules) is no estimate, never an error.
    try:
        model, parameters = read_model(folder)
        return {
            e.stage: round(e.estimates[e.chosen].total_gib, 1)
            for e in stage_estimates(config, model, parameters)
        }
    except (SpagInputError, OSError, ValueError, KeyError):
        return {}


def _training_memory_row(plan: FamilyPlan) -> Row:
    """The planned training jobs' memory per GPU against the GPU found (against common GPU
    families where this job has none): a warning where a stage does not fit."""
    from spag.ops.capacity import GPU_FAMILIES

    if not plan.training_gib:
        return Row(
            "training memory",
            INFO,
            "not estimated: the base model's config.json was not readable when the run "
            "was planned (spag training-memory --model CONFIG.json estimates it)",
        )
    gpus: dict[str, float] = {}
    if plan.device == "cuda":
        from spag.ops.device import nvml_devices

        gpus = {d["name"]: d["memory_gib"] for d in nvml_devices()[:1]}
    found = bool(gpus)
    gpus = gpus or {f"{k} (no GPU here)": v for k, v in GPU_FAMILIES.items()}
    stages = ", ".join(f"{stage} {gib:.1f} GiB" for stage, gib in plan.training_gib.items())
    fits = {
        name: [stage for stage, gib in plan.training_gib.items() if gib > memory]
        for name, memory in gpus.items()
    }
    detail = f"estimated per GPU: {stages}; " + "; ".join(
        f"{name} ({memory:g} GiB): "
        + (f"{', '.join(fits[name])} do not fit" if fits[name] else "fits")
        for name, memory in gpus.items()
    )
    over = [stage for name in gpus for stage in fits[name]] if found else []
    if over:
        detail = (
            f"warning: {', '.join(sorted(set(over)))} need more memory than this GPU has: "
            f"use LoRA ({'/'.join(f'{s}.peft' for s in sorted(set(over)))}), more GPUs "
            "under ZeRO-3, or offload (spag training-memory prints each); " + detail
        )
    return Row("training memory", INFO, detail)


def _backend_rows(plan: FamilyPlan) -> list[Row]:
    if plan.backend is None:
        return []
    if plan.backend == "hf":
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            return [
                Row(
                    "backend hf",
                    FAIL,
                    f"{', '.join(missing)} not installed in this job's environment (envs/train.yaml)",
                )
            ]
        import transformers

        return [Row("backend hf", OK, f"transformers {transformers.__version__}")]
    # vLLM: import, then a real engine on the base model where it is on this node.
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001
        return [
            Row(
                "backend vllm",
                FAIL,
                f"cannot import vllm ({type(exc).__name__}: {exc}): selfplay.backend is vllm; "
                "run with --software-deployment-method conda (envs/vllm.yaml) or set "
                "selfplay.backend: hf",
            )
        ]
    rows = [Row("backend vllm", OK, f"vllm {vllm.__version__} imported")]
    model, why = _engine_model_dir(plan)
    if model is None:
        return [*rows, Row("vllm engine", INFO, why)]
    return [*rows, _capacity_row(plan, model), _engine_row(plan, model)]


def _deepspeed_rows(plan: FamilyPlan) -> list[Row]:
    if not plan.deepspeed:
        return []
    if importlib.util.find_spec("deepspeed") is None:
        return [Row("deepspeed", FAIL, "deepspeed is not installed (envs/train.yaml)")]
    from spag.training.distributed import resolve_deepspeed
    from spag.training.extensions import build_ops, needed_ops

    if plan.device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    rows = []
    for name in plan.deepspeed:
        try:
            ops = needed_ops(resolve_deepspeed(name))
            built = build_ops(ops, setting=f"deepspeed: {name}")
        except SpagInputError as exc:
            rows.append(Row("deepspeed ops", FAIL, str(exc)))
            continue
        if not ops:
            rows.append(Row("deepspeed ops", OK, f"{name}: no compiled op needed"))
        else:
            where = "; ".join(f"{k} in {v}" for k, v in built.items())
            rows.append(Row("deepspeed ops", OK, f"{name}: {where}"))
    return rows


def _collective_rows(plan: FamilyPlan) -> list[Row]:
    """An all-reduce over every rank of the launch: gloo, then NCCL on GPUs where every
    rank has working CUDA (a rank without would leave the others waiting)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from spag.training.distributed import ensure_distributed_env

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    ensure_distributed_env()
    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        t = torch.ones(1)
        dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001 - the rendezvous' own error is the cause
        return [Row("all-reduce gloo", FAIL, f"rank {rank}: {type(exc).__name__}: {exc}")]
    got = int(t.item())
    rows = [
        Row(
            "all-reduce gloo",
            OK if got == world else FAIL,
            f"rank {rank}: sum {got} over {world} rank(s)",
        )
    ]
    if plan.device != "cuda":
        return rows
    from spag.ops.device import cuda_problem

    problem = cuda_problem()
    ready = torch.tensor([0 if problem else 1])
    dist.all_reduce(ready)
    if problem or int(ready.item()) < world:
        why = problem or f"{world - int(ready.item())} rank(s) without working CUDA"
        rows.append(Row("all-reduce nccl", FAIL, f"not tried: {why}"))
        return rows
    try:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        group = dist.new_group(backend="nccl", timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t, group=group)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        rows.append(Row("all-reduce nccl", FAIL, f"rank {rank}: {type(exc).__name__}: {exc}"))
        return rows
    got = int(t.item())
    rows.append(
        Row(
            "all-reduce nccl",
            OK if got == world else FAIL,
            f"rank {rank}: sum {got} over {world} rank(s)",
        )
    )
    return rows


def _endpoint_rows(plan: FamilyPlan) -> list[Row]:
    from spag.generation.openai_backend import OpenAIBackend, parse_spec

    rows = []
    for spec_text in plan.endpoints:
        try:
            spec = parse_spec(spec_text)
            with contextlib.closing(OpenAIBackend(spec)) as backend:
                names = backend.list_models()
        except SpagInputError as exc:
            rows.append(Row("endpoint", FAIL, str(exc)))
            continue
        url = spec.base_url.rstrip("/") + "/models"
        if spec.model not in names:
            rows.append(
                Row("endpoint", FAIL, f"{url} answers but serves {names}, not {spec.model!r}")
            )
        else:
            rows.append(Row("endpoint", OK, f"{url} serves {spec.model}"))
    return rows


def _lm_eval_rows(plan: FamilyPlan) -> list[Row]:
    if not plan.lm_eval:
        return []
    if importlib.util.find_spec("lm_eval") is None:
        return [Row("lm-eval", FAIL, "lm-eval is not installed (envs/eval.yaml)")]
    from importlib.metadata import version

    return [Row("lm-eval", OK, f"lm-eval {version('lm_eval')}")]


def run_checks(plan: FamilyPlan) -> list[Row]:
    """Every check of ``plan`` in this process (one rank); never raises for a failed check."""
    rows = _torch_rows(plan)
    rows.append(_threads_row(plan))
    rows += _disk_rows(plan)
    model_row = _model_row(plan)
    if model_row:
        rows.append(model_row)
    rows += _backend_rows(plan)
    rows += _lm_eval_rows(plan)
    rows += _deepspeed_rows(plan)
    if plan.family == "train":
        rows.append(_training_memory_row(plan))
        rows += _collective_rows(plan)
    rows += _endpoint_rows(plan)
    return rows


def gather_rows(rows: list[Row]) -> list[Row] | None:
    """Every rank's rows on rank 0 (None on the other ranks); this process's alone without
    a process group."""
    if importlib.util.find_spec("torch") is None:
        return rows  # an env without torch (never a training launch)
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return rows
    world = dist.get_world_size()
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, [asdict(r) for r in rows])
    rank = dist.get_rank()
    dist.destroy_process_group()
    if rank != 0:
        return None
    return [Row(**r) for part in everyone for r in part]


def write_report(plan: FamilyPlan, rows: list[Row], output: str | os.PathLike) -> None:
    from spag.data.tables import atomic_path

    report = {
        "family": plan.family,
        "plan": asdict(plan),
        "ok": all(r.status != FAIL for r in rows),
        "rows": [asdict(r) for r in rows],
    }
    if plan.device == "cuda":
        from spag.ops.device import nvml_devices

        # The node's GPUs, for the epoch's estimate after the table (spag.ops.estimate).
        report["gpus"] = [
            {"name": d["name"], "memory_gib": d["memory_gib"]} for d in nvml_devices()
        ]
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(report, indent=2) + "\n")


# ---------------------------------------------------------------- report
def read_report(path: str | os.PathLike) -> dict[str, Any]:
    try:
        report = json.loads(Path(path).read_text())
        rows = report["rows"]
        family = report["family"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpagInputError(f"{path}: not a preflight report ({exc})") from exc
    return {"family": family, "rows": rows, "gpus": report.get("gpus", [])}


def estimate_section(
    reports: list[dict[str, Any]], config: dict[str, Any], model_dir: str | None
) -> str:
    """The epoch's estimate (:mod:`spag.ops.estimate`) on the training nodes' GPUs the
    train family's preflight found, or why there is none."""
    from spag.ops.estimate import card_family, epoch_estimate, model_size

    train = next((r for r in reports if r["family"] == "train"), None)
    gpus = (train or {}).get("gpus") or []
    if not gpus:
        return (
            "epoch estimate: the train family's preflight found no GPU; `spag estimate "
            "--card NAME` prints it for a GPU family"
        )
    card = card_family(gpus[0]["name"], gpus[0]["memory_gib"]) or gpus[0]["name"]
    found, _ = model_dir_now(model_dir) if model_dir else (None, "")
    if found is None:
        base = config["base_model"]
        found, _ = model_dir_now(base["gguf_file"] or base["name_or_path"])
    try:
        from spag.ops.capacity import read_model

        if found is None:
            raise SpagInputError("not readable before the run")
        model, _ = read_model(found)
    except (SpagInputError, OSError, ValueError, KeyError) as exc:
        return f"epoch estimate: the base model's config.json: {exc}; `spag estimate --model` takes one"
    nodes = max(int(config["resources"]["train"].get("nodes", 1)), 1)
    return epoch_estimate(config, model_size(model), card, len(gpus), nodes, where=str(found))


def format_table(reports: list[dict[str, Any]]) -> str:
    """One fixed-width table of every family's rows."""
    lines = [list(TABLE_COLUMNS)]
    for report in reports:
        for row in report["rows"]:
            lines.append(
                [report["family"], row["host"], row["check"], row["status"], row["detail"]]
            )
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE_COLUMNS) - 1)]
    out = []
    for line in lines:
        cells = [c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)]
        out.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(out)


def collect(inputs: list[str], output_dir: str | os.PathLike) -> tuple[str, int]:
    """Move each family's report into ``output_dir/<family>.json``, write ``table.tsv``;
    return the printed table and the number of failed rows.

    The reports are moved, not copied: the next ``snakemake preflight`` finds none and
    checks again.
    """
    import csv

    from spag.data.tables import atomic_path

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    for path in inputs:
        report = read_report(path)
        reports.append(report)
        os.replace(path, out / f"{report['family']}.json")
    with atomic_path(out / "table.tsv") as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        for report in reports:
            for row in report["rows"]:
                writer.writerow([report["family"], *(row[c] for c in TABLE_COLUMNS[1:])])
    failed = sum(row["status"] == FAIL for r in reports for row in r["rows"])
    with contextlib.suppress(OSError):
        (out / ".work").rmdir()
    return format_table(reports), failed
