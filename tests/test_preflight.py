"""`snakemake preflight`: one short job per rule family, one table, fresh every time."""

from __future__ import annotations

import json

import pytest
from fake_endpoint import FakeEndpoint
from model_configs import LLAMA2_7B
from workflow_utils import make_workdir, snakemake

from spag.ops.preflight import FAIL, FamilyPlan, Row, collect, run_checks, write_report

UNITS = {"selfplay", "train", "score", "evaluate", "reasoning", "cpu"}


def _reports(workdir) -> dict[str, dict]:
    folder = workdir / "results" / "preflight"
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def _rows(report: dict, check: str) -> list[dict]:
    return [r for r in report["rows"] if r["check"] == check]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    wd = make_workdir(tmp_path_factory.mktemp("preflight") / "work")
    first = snakemake(wd, "preflight", "-c2", timeout=600)
    return wd, first


def test_embedded_default_passes_and_prints_one_table(cpu_run):
    wd, run = cpu_run
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "preflight: every check passed" in run.stdout + run.stderr
    reports = _reports(wd)
    assert set(reports) == UNITS
    for name, report in reports.items():
        assert report["ok"], name
        assert report["plan"]["device"] == "cpu"
    assert _rows(reports["selfplay"], "backend hf")[0]["status"] == "ok"
    assert _rows(reports["reasoning"], "lm-eval")[0]["status"] == "ok"
    assert _rows(reports["cpu"], "base model")[0]["status"] == "ok"
    assert _rows(reports["train"], "all-reduce gloo")[0]["status"] == "ok"
    table = (wd / "results" / "preflight" / "table.tsv").read_text().splitlines()
    assert table[0].split("\t") == ["family", "host", "check", "status", "detail"]
    assert {line.split("\t")[0] for line in table[1:]} == UNITS
    # nothing half-done is left beside the reports
    assert not (wd / "results" / "preflight" / ".work").exists()


def test_preflight_checks_again_every_time(cpu_run):
    wd, run = cpu_run
    assert run.returncode == 0
    plan = snakemake(wd, "preflight", "-n")
    assert plan.returncode == 0, plan.stderr[-2000:]
    for unit in UNITS:
        assert f"preflight_{unit}" in plan.stdout


def test_gpu_families_fail_clearly_cpu_families_pass(tmp_path):
    """The paper's shape on this GPU-less machine: GPU rows fail and say what to change,
    training runs under its torchrun shape (two ranks, each with its share of the CPUs),
    CPU Adam is built in the node's folder, the opponent endpoint answers."""
    with FakeEndpoint() as server:
        overlay = {
            "resources": {
                "selfplay": {"gpus": 1, "cpus": 1},
                "train": {"gpus": 2, "nodes": 1, "cpus": 2},
            },
            "imitation": {"deepspeed": "zero3_offload"},
            "evaluation": {"opponent": server.spec()},
        }
        wd = make_workdir(tmp_path / "work", overlay)
        run = snakemake(wd, "preflight", "-c2", timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "check(s) failed; each FAIL row says what to change" in out
    reports = _reports(wd)
    assert set(reports) == UNITS
    cuda = _rows(reports["selfplay"], "cuda")
    assert cuda and cuda[0]["status"] == FAIL
    assert "resources.selfplay.gpus: 0" in cuda[0]["detail"]
    assert "driver supports CUDA" in cuda[0]["detail"]
    train = reports["train"]
    assert [r["status"] for r in _rows(train, "cuda")] == [FAIL, FAIL]  # one per rank
    threads = _rows(train, "threads")
    assert len(threads) == 2 and all(r["status"] == "ok" for r in threads), threads
    assert all("OMP_NUM_THREADS=1" in r["detail"] for r in threads)
    gloo = _rows(train, "all-reduce gloo")
    assert [r["status"] for r in gloo] == ["ok", "ok"]
    assert all("sum 2 over 2 rank(s)" in r["detail"] for r in gloo)
    assert all(r["status"] == FAIL for r in _rows(train, "all-reduce nccl"))
    ops = _rows(train, "deepspeed ops")
    assert ops and all(r["status"] == "ok" and "cpu_adam" in r["detail"] for r in ops), ops
    endpoint = _rows(reports["evaluate"], "endpoint")
    assert endpoint[0]["status"] == "ok" and "judge-7b" in endpoint[0]["detail"]
    # families without GPUs pass
    for unit in ("score", "reasoning", "cpu"):
        assert reports[unit]["ok"], reports[unit]


def test_unreachable_endpoint_and_missing_model_fail_with_the_key(tmp_path, monkeypatch):
    plan = FamilyPlan(
        family="evaluate",
        endpoints=["openai:http://127.0.0.1:9/v1?model=m"],
        model="no-such-org/no-such-model",
        offline=True,
    )
    rows = {r.check: r for r in run_checks(plan)}
    assert rows["endpoint"].status == FAIL and "127.0.0.1:9/v1/models" in rows["endpoint"].detail
    assert rows["base model"].status == FAIL
    assert "not in the Hugging Face cache" in rows["base model"].detail


def test_endpoint_serving_another_model_fails(monkeypatch):
    with FakeEndpoint() as server:
        monkeypatch.setenv("PREFLIGHT_TEST_KEY", "sk-test-secret")
        plan = FamilyPlan(
            family="teacher", endpoints=[server.spec(model="other", key_env="PREFLIGHT_TEST_KEY")]
        )
        (row,) = [r for r in run_checks(plan) if r.check == "endpoint"]
        assert server.headers[-1]["Authorization"] == "Bearer sk-test-secret"
    assert row.status == FAIL and "not 'other'" in row.detail
    assert "sk-test-secret" not in row.detail


def test_collect_moves_the_reports_and_counts_failures(tmp_path):
    work = tmp_path / ".work"
    ok = FamilyPlan(family="cpu")
    bad = FamilyPlan(family="selfplay", device="cuda")
    write_report(ok, [Row("disk", "ok", "fine", host="n1")], work / "cpu.json")
    write_report(bad, [Row("cuda", FAIL, "no driver", host="n2")], work / "selfplay.json")
    table, failed = collect([str(work / "cpu.json"), str(work / "selfplay.json")], tmp_path)
    assert failed == 1
    assert not work.exists()  # the next preflight checks again
    assert json.loads((tmp_path / "selfplay.json").read_text())["ok"] is False
    lines = table.splitlines()
    assert lines[0].split() == ["family", "host", "check", "status", "detail"]
    assert lines[2].split()[:4] == ["selfplay", "n2", "cuda", FAIL]


def test_a_stopped_preflights_reports_are_checked_anew(cpu_run):
    """Reports left by a preflight that stopped before its table (a failed family job)
    are stale: the next preflight runs that family again."""
    wd, _ = cpu_run
    work = wd / "results" / "preflight" / ".work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "cpu.json").write_text("{}")
    plan = snakemake(wd, "preflight", "-n")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "preflight_cpu" in plan.stdout
    assert not work.exists()


def test_a_gguf_base_model_is_converted_by_the_run(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    rows = {r.check: r for r in run_checks(FamilyPlan(family="cpu", model=str(gguf)))}
    assert rows["base model"].status == "ok" and "converted by the run" in rows["base model"].detail
    missing = {
        r.check: r for r in run_checks(FamilyPlan(family="cpu", model=str(tmp_path / "x.gguf")))
    }
    assert (
        missing["base model"].status == FAIL
        and "base_model.gguf_file" in missing["base model"].detail
    )


# A stand-in `vllm` package for the preflight's engine start, which runs `spag play` in a
# fresh process as a shard job does: importable there through PYTHONPATH. Its engine
# fails as vLLM's does when SPAG_STANDIN_ENGINE_FAILS is set. A stand-in because a real
# engine neither records the process and batch it was started with nor fails on demand
# (the real CPU engine: tests/test_vllm_backend.py, tests/test_vllm_workflow.py).
STANDIN_VLLM = """
import os
import types

__version__ = "0.33.0-standin"


class SamplingParams:
    def __init__(self, **kw):
        self.kw = kw


class LLM:
    def __init__(self, **opts):
        if os.environ.get("SPAG_STANDIN_ENGINE_FAILS"):
            raise RuntimeError("Engine core initialization failed. See root cause above.")
        with open(os.environ["SPAG_STANDIN_RECORD"], "a") as f:
            f.write(f"{os.getpid()} {opts['model']} {opts['max_num_seqs']}\\n")

    def generate(self, requests, params, use_tqdm=False):
        done = types.SimpleNamespace(text=" ok", token_ids=[5], finish_reason="length")
        return [types.SimpleNamespace(outputs=[done]) for _ in requests]
"""


@pytest.fixture
def standin_vllm(tmp_path, monkeypatch):
    import os
    import sys

    folder = tmp_path / "standin"
    (folder / "vllm").mkdir(parents=True)
    (folder / "vllm" / "__init__.py").write_text(STANDIN_VLLM)
    # The platform the backend checks before it starts an engine: the CPU build's.
    (folder / "vllm" / "platforms.py").write_text(
        "import types\ncurrent_platform = types.SimpleNamespace(is_cpu=lambda: True)\n"
    )
    record = tmp_path / "engines.txt"
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("SPAG_STANDIN_RECORD", str(record))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    return record


def _vllm_plan(model) -> FamilyPlan:
    return FamilyPlan(
        family="selfplay", backend="vllm", model=str(model), max_length=512, batch_size=4096
    )


def test_vllm_row_starts_an_engine_as_a_shard_does(standin_vllm, tiny_model_dir):
    import os

    rows = {r.check: r for r in run_checks(_vllm_plan(tiny_model_dir))}
    engine = rows["vllm engine"]
    assert engine.status == "ok", engine.detail
    assert "engine started, one token" in engine.detail
    # In another process than the preflight's own, with the family's batch.
    (pid, model, batch) = standin_vllm.read_text().split()
    assert int(pid) != os.getpid() and model == str(tiny_model_dir) and batch == "4096"
    capacity = rows["engine capacity"]
    assert capacity.status == "info"
    assert "A100-40GB (no GPU here): " in capacity.detail
    assert "games of 512 tokens at once" in capacity.detail


def test_an_engine_that_cannot_start_is_a_failed_row_with_its_cause(
    standin_vllm, tiny_model_dir, monkeypatch
):
    monkeypatch.setenv("SPAG_STANDIN_ENGINE_FAILS", "1")
    (engine,) = [r for r in run_checks(_vllm_plan(tiny_model_dir)) if r.check == "vllm engine"]
    assert engine.status == FAIL
    assert "Engine core initialization failed" in engine.detail
    assert "selfplay.backend: hf" in engine.detail


def test_an_uncached_hub_id_is_left_to_the_base_model_job(standin_vllm, tmp_path, monkeypatch):
    """The paper config's hub id on an offline node: the base-model row says where it
    comes from; the vLLM rows add no failure of their own and start no engine."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    plan = _vllm_plan("meta-llama/Llama-2-7b-hf")
    plan.offline = False
    rows = {r.check: r for r in run_checks(plan)}
    assert rows["backend vllm"].status == "ok"
    assert rows["vllm engine"].status == "info"
    assert "will be downloaded by the base-model job" in rows["vllm engine"].detail
    assert rows["base model"].status == "info"
    assert not standin_vllm.exists()


def test_engine_capacity_of_llama2_7b_by_hand():
    """LLaMA-2-7B in bf16: 2 x 32 layers x 4096 x 2 bytes = 512 KiB of KV a token;
    6,738,415,616 parameters = 12.55 GiB. At 0.9 of 80 GiB: 72 - 12.55 - 2 (reserve)
    = 57.45 GiB = 117,656 tokens, 7,353 blocks of 16, 57 games of 128 blocks; at 0.9
    of 40 GiB: 21.45 GiB = 43,928 tokens, 21 games."""
    from spag.ops.capacity import engine_capacity, kv_bytes_per_token, parameter_count

    assert kv_bytes_per_token(LLAMA2_7B, 2) == 512 * 1024
    assert parameter_count(LLAMA2_7B) == 6_738_415_616
    big = engine_capacity(
        LLAMA2_7B, gpu_memory_gib=80, share=0.9, max_length=2048, dtype="bfloat16"
    )
    small = engine_capacity(LLAMA2_7B, gpu_memory_gib=40, share=0.9, max_length=2048)
    assert (big.games, small.games) == (57, 21)
    assert abs(big.tokens - 117_656) <= 16 and abs(small.tokens - 43_928) <= 16
    # Two engines of 0.45 on one 40 GB card (the paper config's evaluation): 3 games each.
    assert engine_capacity(LLAMA2_7B, gpu_memory_gib=40, share=0.45, max_length=2048).games == 3


def test_a_batch_above_the_engine_capacity_is_a_warning(tmp_path):
    from spag.ops.preflight import _capacity_row

    (tmp_path / "config.json").write_text(json.dumps(LLAMA2_7B))
    plan = FamilyPlan(family="selfplay", backend="vllm", model=str(tmp_path), max_length=2048,
                      batch_size=256, dtype="bfloat16")  # fmt: skip
    row = _capacity_row(plan, str(tmp_path))
    assert row.status == "info"
    assert row.detail.startswith("warning: batch_size 256 is more than the full-length games")
    assert "A100-80GB / H100-80GB (no GPU here): 57 games of 2048 tokens" in row.detail
    plan.batch_size = 16
    assert not _capacity_row(plan, str(tmp_path)).detail.startswith("warning")


def test_capacity_counts_copied_kv_heads_and_nested_configs(tmp_path):
    """An engine over more GPUs than KV heads keeps a copy of a head on each; a
    multimodal config nests the language model's part under text_config."""
    from spag.ops.capacity import kv_bytes_per_token, model_config

    gqa = {**LLAMA2_7B, "num_key_value_heads": 2}
    assert kv_bytes_per_token(gqa, 2, 2) == 2 * 32 * 1 * 128 * 2
    assert kv_bytes_per_token(gqa, 2, 8) == 2 * 32 * 1 * 128 * 2  # not a quarter head
    (tmp_path / "config.json").write_text(json.dumps({"text_config": LLAMA2_7B}))
    assert model_config(tmp_path)[0]["hidden_size"] == 4096


def test_a_relative_model_folder_starts_its_engine(standin_vllm, tiny_model_dir, monkeypatch):
    """The engine's job runs in a folder of its own: a relative base-model path is
    resolved first."""
    import os

    monkeypatch.chdir(tiny_model_dir.parent)
    rows = {r.check: r for r in run_checks(_vllm_plan(os.path.basename(tiny_model_dir)))}
    assert rows["vllm engine"].status == "ok", rows["vllm engine"].detail


def test_training_memory_is_planned_from_the_model_and_warned_on_a_small_gpu(tmp_path, monkeypatch):
    """The train family's row: each stage's estimate (spag.ops.capacity, by hand in
    tests/test_training_memory.py), planned from the base model's config.json; a warning
    naming the stage and the ways out where the GPU found holds less."""
    import yaml
    from workflow_utils import REPO, deep_merge

    import spag.ops.device
    from spag.config import validate_config
    from spag.ops.preflight import _training_memory_row, training_memory_plan

    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA2_7B))
    config = {}
    for name in (
        "config.yaml",
        "configs/paper-llama2-7b.yaml",
        "configs/paper-llama2-7b-lora.yaml",
    ):
        config = deep_merge(config, yaml.safe_load((REPO / name).read_text()))
    config["base_model"]["name_or_path"] = str(model)
    lora = validate_config(config, source="test")
    assert training_memory_plan(lora, tmp_path / "none") == {"imitation": 18.1, "spag": 18.1}
    full = validate_config(
        deep_merge(lora, {s: {"peft": None, "deepspeed": "zero3"} for s in ("imitation", "spag")}),
        source="test",
    )
    planned = training_memory_plan(full, tmp_path / "none")
    assert planned == {"imitation": 106.9, "spag": 106.9}
    # The embedded model is built by the run: nothing to read when it is planned.
    assert training_memory_plan(validate_config({}, source="test"), tmp_path / "none") == {}

    plan = FamilyPlan(family="train", device="cuda", training_gib=planned)
    monkeypatch.setattr(spag.ops.device, "nvml_devices",
                        lambda: [{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80.0}])  # fmt: skip
    row = _training_memory_row(plan)
    assert row.status == "info"
    assert row.detail.startswith("warning: imitation, spag need more memory than this GPU has")
    assert "imitation.peft/spag.peft" in row.detail
    plan.training_gib = {"imitation": 18.9, "spag": 18.9}
    assert _training_memory_row(plan).detail == (
        "estimated per GPU: imitation 18.9 GiB, spag 18.9 GiB; NVIDIA A100-SXM4-80GB (80 GiB): fits"
    )
    # No GPU in this job: the common families, no warning.
    no_gpu = _training_memory_row(FamilyPlan(family="train", training_gib=planned)).detail
    assert not no_gpu.startswith("warning") and "H200 (no GPU here) (141 GiB): fits" in no_gpu
    assert _training_memory_row(FamilyPlan(family="train")).detail.startswith("not estimated")
