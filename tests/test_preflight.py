"""`snakemake preflight`: one short job per rule family, one table, fresh every time."""

from __future__ import annotations

import json

import pytest
from fake_endpoint import FakeEndpoint
from workflow_utils import make_workdir, snakemake

from spag.preflight import FAIL, FamilyPlan, Row, collect, run_checks, write_report

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
