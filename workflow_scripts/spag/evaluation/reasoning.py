"""Reasoning benchmarks with lm-evaluation-harness (its Python API), one model at a time.

The result is a small JSON file per model (``results/eval/reasoning/{model}.json``):

.. code-block:: json

    {"model_name": "epoch1", "model_path": "...", "lm_eval_version": "0.4.13",
     "tasks": {"arc_easy": {"score": 0.71, "metric": "acc", "acc": 0.71,
                            "acc_stderr": 0.01, "acc_norm": 0.68, ...}},
     "requested_tasks": ["arc_easy"], "subtasks": {...}, "limit": null, ...}

``tasks`` holds every task and group lm-eval reports (a group such as ``mmlu``
also lists its subtasks); ``requested_tasks`` are the names asked for, the ones
the summary tables and plots show; ``score`` is each task's headline metric
(:data:`PRIMARY_METRICS`, first one present). ``items`` keeps, per task that lm-eval
scored item by item, each item's headline metric (``doc_ids``, ``scores``): two models
measured on the same items are compared item by item (:func:`paired_scores`).
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.data.tables import atomic_path
from spag.errors import SpagInputError
from spag.ops import family_device
from spag.settings import Checked, config_options, opt

log = logging.getLogger(__name__)

# The headline metric of a task: the first of these that lm-eval reports for it.
PRIMARY_METRICS = ("acc", "exact_match", "acc_norm", "mc2", "f1", "bleu")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def parse_limit(value: str) -> int | float:
    """``--limit``'s text: lm-eval takes a count (10) or a fraction of each task (0.1)."""
    number = float(value)
    return int(number) if number >= 1 and number.is_integer() else number


@dataclass(frozen=True, kw_only=True)
class ReasoningSettings(Checked):
    """The reasoning benchmarks every model of a run is measured on (config
    ``evaluation.reasoning``)."""

    tasks: tuple[str, ...] = opt(
        ("spag_tiny_reasoning",), "lm-eval task or group names; []: no reasoning benchmark"
    )
    include_path: str | None = opt("data/lm_eval_tasks", "folder of local lm-eval task YAML files")
    limit: float | None = opt(
        None,
        "items per task: a count, or a fraction below 1; null: all",
        gt=0,
        type=parse_limit,
    )
    num_fewshot: int | None = opt(None, "few-shot examples; null: each task's own", ge=0)
    # Read as text: 'auto' and 'auto:N' are lm-eval's too.
    batch_size: int | str = opt(
        8,
        "lm-eval batch size, or 'auto' / 'auto:N'",
        ge=1,
        type=str,
        schema={"pattern": "^auto(:[1-9][0-9]*)?$"},
    )
    dtype: str = opt(
        "auto",
        "one dtype for every model (base, M0, M1...), never each checkpoint's own: auto "
        "is bfloat16 on a GPU that has it (else float16) and float32 on CPU",
        choices=DTYPES,
    )


def reasoning_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """``spag eval-reasoning``'s options from a validated config, as the ``reasoning``
    rule renders them with ``cli_flags`` (the rule adds the model and output)."""
    return {
        **config_options(ReasoningSettings, config["evaluation"]["reasoning"]),
        "apply_chat_template": config["game"]["prompt_format"] == "chat",
        "trust_remote_code": config["base_model"]["trust_remote_code"],
        "device": family_device(config, "evaluate"),
    }


def resolve_dtype(dtype: str, device: str) -> str:
    """The dtype every model of a run is evaluated in. ``auto`` never means the
    checkpoint's own (a base model saved in float16 and trained models in bfloat16
    would be compared in different precisions): bfloat16 on a GPU that has it, else
    float16; float32 on CPU, where bf16 is slow and changes the numbers."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def check_model_folder(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a complete Hugging Face checkpoint (config, tokenizer, safetensors)."""
    from spag.generation.base import check_model_dir

    return check_model_dir(path)


def task_manager(include_path: str | os.PathLike | None, tasks: Sequence[str] = ()):
    """An lm-eval ``TaskManager`` that also knows the local tasks under ``include_path``.

    When every task asked for is a local one, lm-eval's own task files are not indexed.
    """
    if include_path is not None:
        p = Path(include_path)
        if not p.is_dir():
            raise SpagInputError(f"--include-path {p}: no such folder of lm-eval task YAML files")
        local = _task_manager(str(p.resolve()), include_defaults=False)
        if tasks and set(tasks) <= set(local.all_tasks):
            return local
        return _task_manager(str(p.resolve()))
    return _task_manager(None)


@functools.lru_cache(maxsize=4)
def _task_manager(include_path: str | None, include_defaults: bool = True):
    # Indexing lm-eval's thousands of task files takes seconds: once per process.
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path, include_defaults=include_defaults)


def check_tasks(tasks: Sequence[str], manager: Any) -> None:
    """Raise :class:`SpagInputError` naming every task lm-eval does not know (with close names)."""
    if not tasks:
        raise SpagInputError("--tasks: no task given")
    known = set(manager.all_tasks)
    unknown = [t for t in tasks if t not in known]
    if unknown:
        hints = []
        for t in unknown:
            close = difflib.get_close_matches(t, known, n=3)
            hints.append(f"'{t}'" + (f" (did you mean: {', '.join(close)}?)" if close else ""))
        raise SpagInputError(
            "unknown lm-eval task "
            + "; ".join(hints)
            + ". Local tasks are YAML files under --include-path; `lm-eval ls tasks` lists the others"
        )


def split_metrics(raw: Mapping[str, Any]) -> dict[str, Any]:
    """lm-eval's ``{"acc,none": x, "acc_stderr,none": s, ...}`` -> ``{"acc": x, "acc_stderr": s}``.

    A metric reported under several filters keeps the unfiltered (``none``) value,
    else the first filter's. Non-numeric entries other than the alias are dropped.
    """
    out: dict[str, Any] = {}
    filters: dict[str, str] = {}
    for key, value in raw.items():
        if key == "alias":
            out["alias"] = str(value).strip(" -")
            continue
        if "," not in key:
            if key == "sample_len" and isinstance(value, (int, float)):
                out["num_samples"] = int(value)
            continue
        name, flt = key.split(",", 1)
        if isinstance(value, str):  # "N/A" stderr
            value = None
        elif value is not None and not isinstance(value, (int, float)):
            continue
        if name not in out or (flt == "none" and filters.get(name) != "none"):
            out[name] = None if value is None else float(value)
            filters[name] = flt
    return out


def primary_metric(metrics: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """The headline metric name and value of one task's metrics (None when there is none)."""
    for name in PRIMARY_METRICS:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return name, float(value)
    return None, None


def summarize_results(results: Mapping[str, Any]) -> dict[str, Any]:
    """Per-task metrics and headline scores from ``lm_eval.simple_evaluate``'s return value."""
    tasks: dict[str, Any] = {}
    for name, raw in (results.get("results") or {}).items():
        metrics = split_metrics(raw)
        metric, score = primary_metric(metrics)
        metrics["metric"] = metric
        metrics["score"] = score
        versions = results.get("versions") or {}
        shots = results.get("n-shot") or {}
        if name in versions:
            metrics["version"] = versions[name]
        if name in shots:
            metrics["num_fewshot"] = shots[name]
        tasks[name] = metrics
    for name, raw in (results.get("groups") or {}).items():
        if name not in tasks:
            metrics = split_metrics(raw)
            metrics["metric"], metrics["score"] = primary_metric(metrics)
            tasks[name] = metrics
    subtasks = {k: list(v) for k, v in (results.get("group_subtasks") or {}).items() if v}
    return {"tasks": tasks, "subtasks": subtasks}


def evaluate_model(
    model_dir: str | os.PathLike,
    tasks: Sequence[str],
    *,
    model_name: str | None = None,
    include_path: str | os.PathLike | None = None,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    batch_size: int | str,
    device: str | None = None,
    dtype: str,
    trust_remote_code: bool,
    seed: int,
    apply_chat_template: bool,
) -> dict[str, Any]:
    """Run lm-eval's ``simple_evaluate`` on the checkpoint ``model_dir``; return the JSON record.

    Checks the model folder and the task names first, so that a mistake is reported
    in one clear line before any model is loaded.
    """
    from spag.ops import DEVICES, select_device

    # Before anything is loaded: a GPU job without working CUDA stops here.
    if device is None or device in DEVICES:
        device = select_device(device, "spag eval-reasoning")
    import lm_eval

    model_dir = check_model_folder(model_dir)
    if limit is not None and limit <= 0:
        raise SpagInputError(f"--limit must be positive, got {limit}")
    if num_fewshot is not None and num_fewshot < 0:
        raise SpagInputError(f"--num-fewshot must be >= 0, got {num_fewshot}")
    manager = task_manager(include_path, tasks)
    check_tasks(tasks, manager)
    dtype = resolve_dtype(dtype, device)
    model_args: dict[str, Any] = {
        "pretrained": str(model_dir),
        "dtype": dtype,
        "trust_remote_code": trust_remote_code,
    }
    log.info(
        "lm-eval %s: %s on %s (%s), tasks %s, limit %s",
        lm_eval.__version__,
        model_dir,
        device,
        dtype,
        ", ".join(tasks),
        limit,
    )
    started = time.perf_counter()
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=model_args,
        tasks=list(tasks),
        num_fewshot=num_fewshot,
        batch_size=batch_size,
        device=device,
        limit=limit,
        task_manager=manager,
        # With game.prompt_format chat, benchmark prompts go through the same template;
        # lm-eval renders them itself (few-shot turns, system text), not PromptRenderer.
        apply_chat_template=apply_chat_template,
        log_samples=True,  # each item's score: models are compared item by item
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    elapsed = time.perf_counter() - started
    if results is None:  # only on non-zero ranks of a distributed run
        raise RuntimeError("lm-eval returned no results")
    record: dict[str, Any] = {
        "model_name": model_name or Path(model_dir).name,
        "model_path": str(Path(model_dir).resolve()),
        "lm_eval_version": lm_eval.__version__,
        "requested_tasks": list(tasks),
        "limit": limit,
        "num_fewshot": num_fewshot,
        "batch_size": batch_size,
        "device": device,
        "dtype": dtype,
        "seed": seed,
        "apply_chat_template": apply_chat_template,
        "elapsed_s": round(elapsed, 3),
    }
    record.update(summarize_results(results))
    record["items"] = item_scores(results.get("samples") or {}, record["tasks"])
    missing = [t for t in tasks if t not in record["tasks"]]
    if missing:
        raise RuntimeError(f"lm-eval reported no result for task(s) {', '.join(missing)}")
    return record


def item_scores(
    samples: Mapping[str, Sequence[Mapping[str, Any]]], tasks: Mapping[str, Any]
) -> dict[str, dict[str, list]]:
    """Per task, each item's headline metric from lm-eval's logged samples, in document
    order. Under the filter the headline score is reported for (:func:`split_metrics`:
    the unfiltered one, else the task's first, which is logged first)."""
    out: dict[str, dict[str, list]] = {}
    for task, logged in samples.items():
        metric = (tasks.get(task) or {}).get("metric")
        if not metric or not logged:
            continue
        filters = [str(x.get("filter")) for x in logged]
        keep = "none" if "none" in filters else filters[0]
        rows = sorted(
            (int(x["doc_id"]), _finite(x.get(metric)))
            for x in logged
            if str(x.get("filter")) == keep
        )
        if rows and all(v is not None for _, v in rows):
            out[task] = {"metric": metric, "doc_ids": [d for d, _ in rows],
                         "scores": [v for _, v in rows]}  # fmt: skip
    return out


def _finite(value: Any) -> float | None:
    """A per-item metric as a float (numpy scalars and bools too); None when it is not
    a finite number (a corpus-level metric such as BLEU logs its inputs instead)."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _items(record: Mapping[str, Any], task: str) -> dict[tuple[str, int], float]:
    """The items of ``task`` (a group: of its subtasks, recursively), by (task, doc id)."""
    items = record.get("items") or {}
    if task in items:
        scored = items[task]
        return {(task, d): v for d, v in zip(scored["doc_ids"], scored["scores"], strict=True)}
    out: dict[tuple[str, int], float] = {}
    for sub in (record.get("subtasks") or {}).get(task, ()):
        if sub != task:
            out.update(_items(record, sub))
    return out


# Settings that decide which items a model answers, and how: records that differ in
# them are not paired.
PAIRING_KEYS = ("limit", "num_fewshot", "apply_chat_template", "seed", "lm_eval_version")


def paired_scores(
    record: Mapping[str, Any], reference: Mapping[str, Any], task: str
) -> dict[str, float]:
    """``record`` minus ``reference`` on ``task``, item by item over the items both
    scored (a group: its subtasks' items): each side's mean over those items (``mean``,
    ``reference_mean``), their difference (``diff``; a group weighted by size, as MMLU
    and BBH are, has the difference of the headline scores), its 95% percentile
    bootstrap interval over items (``lo``, ``hi``, seeded; nan under two items) and,
    for a 0/1 metric, the exact McNemar p-value (``p``; nan otherwise). ``pairs`` 0 and
    the rest nan where either record kept no items (one written before they were)."""
    from spag.evaluation.paired import cluster_bootstrap, mcnemar_p

    mine, theirs = _items(record, task), _items(reference, task)
    keys = sorted(mine.keys() & theirs.keys())
    if not keys:
        nan = math.nan
        return {"pairs": 0, "mean": nan, "reference_mean": nan, "diff": nan, "lo": nan,
                "hi": nan, "p": nan}  # fmt: skip
    differ = [k for k in PAIRING_KEYS if record.get(k) != reference.get(k)]
    if differ:
        raise SpagInputError(
            f"reasoning records of {record.get('model_name')} and "
            f"{reference.get('model_name')} differ in {', '.join(differ)} "
            f"({', '.join(f'{record.get(k)!r} vs {reference.get(k)!r}' for k in differ)}): "
            "their items are not comparable one by one"
        )
    x, y = [mine[k] for k in keys], [theirs[k] for k in keys]
    d = [a - b for a, b in zip(x, y, strict=True)]
    lo, hi = cluster_bootstrap(d, [1] * len(d))
    binary = set(x) | set(y) <= {0.0, 1.0}
    b = sum(a == 1 and c == 0 for a, c in zip(x, y, strict=True))
    c = sum(a == 0 and c == 1 for a, c in zip(x, y, strict=True))
    return {
        "pairs": len(keys),
        "mean": sum(x) / len(x),
        "reference_mean": sum(y) / len(y),
        "diff": sum(d) / len(d),
        "lo": lo,
        "hi": hi,
        "p": mcnemar_p(b, c) if binary else math.nan,
    }


def write_record(record: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write the JSON record atomically."""
    with atomic_path(path, suffix=".json.tmp") as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """Read a reasoning JSON file, checking the keys the summary relies on."""
    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"reasoning result not found: {p}")
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SpagInputError(f"{p}: not valid JSON: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("tasks"), dict):
        raise SpagInputError(f"{p}: missing key 'tasks' (not a `spag eval-reasoning` result)")
    return record


def task_scores(record: Mapping[str, Any]) -> dict[str, float]:
    """Headline score per requested task (all reported tasks when the request is not recorded)."""
    tasks = record.get("tasks") or {}
    names = record.get("requested_tasks") or list(tasks)
    out = {}
    for name in names:
        metrics = tasks.get(name) or {}
        score = metrics.get("score")
        if score is None:
            _, score = primary_metric(metrics)
        if score is not None:
            out[name] = float(score)
    return out


def geometric_mean(values: Sequence[float]) -> float | None:
    """Geometric mean of scores; 0 if any score is 0; None for no scores."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    if any(v <= 0 for v in vals):
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
