"""Reasoning evaluation: the real lm-evaluation-harness on the tiny model and the shipped task."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from spag.cli import main
from spag.errors import SpagInputError
from spag.evaluation.reasoning import (
    geometric_mean,
    item_scores,
    paired_scores,
    primary_metric,
    split_metrics,
    task_scores,
)

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "data" / "lm_eval_tasks"
TASK = "spag_tiny_reasoning"


def test_shipped_task_data_is_well_formed():
    path = TASKS / TASK / f"{TASK}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    assert 50 <= len(rows) <= 100
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["question"] for r in rows}) == len(rows)
    for r in rows:
        assert len(r["choices"]) == 4 and len(set(r["choices"])) == 4, r["id"]
        assert 0 <= r["answer"] < 4, r["id"]
    # The right answer is not always in the same place.
    assert len({r["answer"] for r in rows}) == 4
    assert {r["category"] for r in rows} == {"logic", "math", "common"}


def test_eval_reasoning_runs_lm_eval(tiny_model_dir, tmp_path, monkeypatch):
    import lm_eval

    monkeypatch.chdir(tmp_path)  # the task's data must not depend on the current folder
    out = tmp_path / "out" / "epoch1.json"
    argv = [
        "eval-reasoning",
        "--model",
        str(tiny_model_dir),
        "--model-name",
        "epoch1",
        "--output",
        str(out),
        "--tasks",
        TASK,
        "--include-path",
        str(TASKS),
        "--limit",
        "4",
        "--batch-size",
        "4",
    ]
    assert main(argv) == 0
    record = json.loads(out.read_text())
    assert record["model_name"] == "epoch1"
    assert record["model_path"] == str(Path(tiny_model_dir).resolve())
    assert record["lm_eval_version"] == lm_eval.__version__
    assert record["requested_tasks"] == [TASK] and record["device"] == "cpu"
    metrics = record["tasks"][TASK]
    assert metrics["num_samples"] == 4
    for key in ("acc", "acc_norm"):
        assert 0.0 <= metrics[key] <= 1.0
        # Four items: accuracy is a multiple of 1/4.
        assert metrics[key] * 4 == pytest.approx(round(metrics[key] * 4))
    assert metrics["acc_stderr"] >= 0 and metrics["acc_norm_stderr"] >= 0
    assert metrics["metric"] == "acc" and metrics["score"] == metrics["acc"]
    # Each item's score is kept, so that two models are compared item by item.
    items = record["items"][TASK]
    assert items["metric"] == "acc" and items["doc_ids"] == [0, 1, 2, 3]
    assert set(items["scores"]) <= {0.0, 1.0}
    assert sum(items["scores"]) / 4 == pytest.approx(metrics["acc"])
    same = paired_scores(record, record, TASK)
    assert same["pairs"] == 4 and same["diff"] == 0.0 and same["p"] == 1.0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]


def test_items_keep_the_unfiltered_headline_metric():
    logged = [
        {"doc_id": 1, "filter": "strict", "exact_match": 0.0},
        {"doc_id": 1, "filter": "none", "exact_match": 1.0},
        {"doc_id": 0, "filter": "none", "exact_match": 0.0},
    ]
    items = item_scores({"t": logged}, {"t": {"metric": "exact_match"}})
    assert items == {"t": {"metric": "exact_match", "doc_ids": [0, 1], "scores": [0.0, 1.0]}}
    # Without an unfiltered one: the task's first filter (logged first), the one its
    # headline score is reported for; numpy scalars count, a non-finite value leaves
    # the task without items rather than a nan in the pairing.
    import numpy as np

    two = [
        {"doc_id": 0, "filter": "strict-match", "exact_match": np.float64(0.0)},
        {"doc_id": 1, "filter": "strict-match", "exact_match": np.bool_(True)},
        {"doc_id": 0, "filter": "flexible-extract", "exact_match": 1.0},
        {"doc_id": 1, "filter": "flexible-extract", "exact_match": 1.0},
    ]
    assert (
        split_metrics({"exact_match,strict-match": 0.5, "exact_match,flexible-extract": 1.0})[
            "exact_match"
        ]
        == 0.5
    )
    got = item_scores({"g": two}, {"g": {"metric": "exact_match"}})["g"]
    assert got["scores"] == [0.0, 1.0] and all(type(v) is float for v in got["scores"])
    nan = [{"doc_id": 0, "filter": "none", "f1": float("nan")}]
    assert item_scores({"t": nan}, {"t": {"metric": "f1"}}) == {}


def _record(items: dict[str, list[float]], subtasks: dict | None = None) -> dict:
    return {
        "items": {t: {"metric": "acc", "doc_ids": list(range(len(v))), "scores": v}
                  for t, v in items.items()},
        "subtasks": subtasks or {},
    }  # fmt: skip


def test_paired_scores_item_by_item():
    # 20 items: the model is right on 8 items the reference gets wrong, wrong on none
    # it gets right: +0.4, McNemar p = 2 / 2**8, interval inside [0, 1] above zero.
    mine = _record({"t": [1.0] * 8 + [0.0] * 4 + [1.0] * 8})
    ref = _record({"t": [0.0] * 12 + [1.0] * 8})
    d = paired_scores(mine, ref, "t")
    assert d["pairs"] == 20 and d["diff"] == pytest.approx(0.4)
    assert d["p"] == pytest.approx(2 / 2**8)
    assert 0 < d["lo"] < 0.4 < d["hi"] < 1
    # A group pairs its subtasks' items; a metric that is not 0/1 has no McNemar p.
    group = paired_scores(_record({"a": [1.0, 0.0], "b": [0.5]}, {"g": ["a", "b"]}),
                          _record({"a": [0.0, 0.0], "b": [0.25]}, {"g": ["a", "b"]}), "g")  # fmt: skip
    assert group["pairs"] == 3 and group["diff"] == pytest.approx((1 + 0 + 0.25) / 3)
    assert math.isnan(group["p"])
    # A record without items (written before they were kept): nothing to pair.
    assert paired_scores({"tasks": {}}, ref, "t")["pairs"] == 0
    # One item: a difference, no interval (nothing to resample).
    one = paired_scores(_record({"t": [1.0]}), _record({"t": [0.5]}), "t")
    assert one["diff"] == 0.5 and math.isnan(one["lo"]) and math.isnan(one["hi"])
    # Records measured differently (another limit) are refused, naming the setting.
    with pytest.raises(SpagInputError, match="differ in limit"):
        paired_scores({**mine, "limit": 10}, {**ref, "limit": None}, "t")


def test_unknown_task_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [
        "eval-reasoning",
        "--model",
        str(tiny_model_dir),
        "--output",
        str(out),
        "--tasks",
        TASK,
        "spag_tiny_reasonin",
        "--include-path",
        str(TASKS),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown lm-eval task 'spag_tiny_reasonin'" in err
    assert f"did you mean: {TASK}" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_incomplete_model_folder(tiny_model_dir, tmp_path, capsys):
    broken = tmp_path / "model"
    # a folder put together by hand (no manifest: a damaged one is tests/test_faults.py's)
    shutil.copytree(tiny_model_dir, broken, ignore=shutil.ignore_patterns("spag_manifest.json"))
    for p in broken.glob("*.safetensors"):
        p.unlink()
    out = tmp_path / "r.json"
    argv = [
        "eval-reasoning",
        "--model",
        str(broken),
        "--output",
        str(out),
        "--tasks",
        TASK,
        "--include-path",
        str(TASKS),
    ]
    assert main(argv) == 2
    assert "no *.safetensors weights" in capsys.readouterr().err
    assert not out.exists()


def test_missing_include_path(tiny_model_dir, tmp_path, capsys):
    argv = [
        "eval-reasoning",
        "--model",
        str(tiny_model_dir),
        "--output",
        str(tmp_path / "r.json"),
        "--tasks",
        TASK,
        "--include-path",
        str(tmp_path / "no_tasks"),
    ]
    assert main(argv) == 2
    assert "no_tasks: no such folder" in capsys.readouterr().err


def test_split_metrics_keeps_unfiltered_values():
    raw = {
        "alias": " - arc_easy",
        "sample_len": 10,
        "acc,none": 0.5,
        "acc_stderr,none": "N/A",
        "exact_match,strict": 0.1,
        "exact_match,flexible": 0.3,
        "acc,other": 0.9,
    }
    m = split_metrics(raw)
    assert m == {
        "alias": "arc_easy",
        "num_samples": 10,
        "acc": 0.5,
        "acc_stderr": None,
        "exact_match": 0.1,
    }
    assert primary_metric(m) == ("acc", 0.5)
    assert primary_metric({"exact_match": 0.25, "acc_norm": 0.5}) == ("exact_match", 0.25)
    assert primary_metric({"acc": float("nan")}) == (None, None)


def test_task_scores_and_geometric_mean():
    record = {
        "requested_tasks": ["a", "b"],
        "tasks": {"a": {"score": 0.25}, "b": {"acc_norm": 0.64}, "a_sub": {"score": 1.0}},
    }
    assert task_scores(record) == {"a": 0.25, "b": 0.64}
    assert geometric_mean([0.25, 0.64]) == pytest.approx(0.4)
    assert geometric_mean([0.5, 0.0]) == 0.0
    assert geometric_mean([]) is None
    assert math.isclose(geometric_mean([0.7]), 0.7)


def test_auto_dtype_is_one_for_every_model_not_the_checkpoints():
    from spag.evaluation.reasoning import resolve_dtype

    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("float16", "cuda:0") == "float16"
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert resolve_dtype("auto", "cuda") in ("bfloat16", "float16")
