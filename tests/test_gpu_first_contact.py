"""The GPU check (perf/gpu_first_contact.sh): each device call's plan fits the lent
machine (time, files), and each call runs at its toy sizes on the CPU from a clean copy
of the checkout without wordfreq (as the node has it), so it cannot rot between the rare
runs on a GPU."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "perf/gpu_first_contact.sh"
# A lent machine's call: 10 minutes at most, of which the check takes 8; 8 files back.
CALL_SECONDS, CALL_FILES = 480, 8
# Makes wordfreq unimportable in every Python process started with it on PYTHONPATH.
NO_WORDFREQ = """
import sys


class _NoWordfreq:
    def find_spec(self, name, path=None, target=None):
        if name == "wordfreq" or name.startswith("wordfreq."):
            raise ModuleNotFoundError("no wordfreq on the GPU node", name=name)


sys.meta_path.insert(0, _NoWordfreq())
"""


def _blocker(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NO_WORDFREQ)
    return folder


def plan(call: str, root: Path = REPO) -> dict:
    """The script's own plan of a call (GFC_PLAN): its steps in order, its wall-clock
    bound (limits and kill grace, the background step's end awaited) and the files it
    may write."""
    env = {**os.environ, "GFC_PLAN": "1", "GFC_CALL": call}
    out = subprocess.run(
        ["bash", str(root / SCRIPT), "/nonexistent"], env=env, check=True, text=True,
        capture_output=True, timeout=60,
    ).stdout  # fmt: skip
    seconds, ends, steps = 0, {}, []
    files: set[str] = set()
    calls: list[str] = []
    for line in out.splitlines():
        _, kind, *rest = line.split()
        if kind == "calls":
            calls = rest
        elif kind == "files":
            files |= set(rest)
        elif kind == "wheels":
            seconds += int(rest[0]) + int(rest[1])
        elif kind == "background":
            ends[rest[0]] = seconds + int(rest[1]) + int(rest[2])
            steps.append(rest[0])
        elif kind == "wait":
            seconds = max(seconds, ends.pop(rest[0]))
        elif kind == "step":
            seconds += int(rest[1]) + int(rest[2])
            steps.append(rest[0])
            files |= set(rest[3:])
    assert not ends, f"background steps never awaited: {ends}"
    return {"calls": calls, "steps": steps, "seconds": seconds, "files": files}


CALLS = [c for c in plan("1")["calls"] if c != "all"]


def test_each_call_fits_one_device_call(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "perf"))
    with monkeypatch.context() as m:
        m.setattr(os, "environ", os.environ.copy())  # the module sets HF_HUB_OFFLINE
        from gpu_first_contact import STEPS

    assert CALLS == ["1", "2", "3", "4", "5"]
    seen: set[str] = set()
    for call in CALLS:
        p = plan(call)
        assert p["seconds"] <= CALL_SECONDS, (call, p)
        assert len(p["files"]) <= CALL_FILES, (call, p)
        assert {"env", "models"} <= set(p["steps"]), p  # a fresh node: its card, its models
        seen |= set(p["steps"])
    # Every step of the check is in some call, and `all` runs each once.
    assert seen == set(STEPS)
    every = plan("all")["steps"]
    assert sorted(every) == sorted(STEPS)


def test_the_check_asks_for_a_call():
    env = {k: v for k, v in os.environ.items() if k not in ("GFC_CALL", "GFC_STEPS")}
    proc = subprocess.run(
        ["bash", str(REPO / SCRIPT), "/nonexistent"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "GFC_CALL" in proc.stderr


def test_flop_share_counts_the_passes(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "perf"))
    with monkeypatch.context() as m:
        m.setattr(os, "environ", os.environ.copy())  # the module sets HF_HUB_OFFLINE
        from gpu_first_contact import flop_share

    # 2N a token forward, 6N full training, 4N LoRA, 2N more with checkpointing.
    assert flop_share(10, 3, 2, peak=1) == 2 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="full", peak=1) == 6 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="lora", checkpointing=True, peak=1) == 6 * 10 * 3 / 2
    assert flop_share(10, 3, 2, passes="full", checkpointing=True, peak=1) == 8 * 10 * 3 / 2


def test_the_selfplay_steps_need_no_wordfreq(tmp_path):
    """The node has no wordfreq: the self-play steps' imports and their words do without."""
    code = textwrap.dedent("""
        import sys
        sys.path[:0] = [sys.argv[1] + "/perf", sys.argv[1] + "/workflow_scripts"]
        try:
            import wordfreq  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("wordfreq imported")
        import bench_selfplay, bench_selfplay_decoding, gpu_first_contact  # noqa: F401, E401
        import spag.game.selfplay, spag.game.taboo, spag.generation.hf_backend  # noqa: F401, E401
        words = bench_selfplay.bench_words(768)  # the 7B shape's games
        assert len(words) == len(set(words)) == 768, len(words)
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(_blocker(tmp_path / "block"))}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], env=env, capture_output=True, text=True
    )
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_fixed_words_are_wordfreqs(monkeypatch):
    wordfreq = pytest.importorskip("wordfreq")
    monkeypatch.syspath_prepend(str(REPO / "perf"))
    from bench_selfplay import bench_words

    words = [
        w for w in wordfreq.top_n_list("en", 5000)
        if w.isalpha() and w.isascii() and 4 <= len(w) <= 10
    ]  # fmt: skip
    for n in (8, 1024, 1100):  # beyond the fixed list: wordfreq's, the same order
        assert bench_words(n) == words[100 : 100 + n]


def test_a_side_keeps_the_pythonpath(monkeypatch, tmp_path):
    """The carried wheels' folder stays on a side's path, behind its checkout."""
    monkeypatch.syspath_prepend(str(REPO / "perf"))
    import bench_selfplay_decoding as bench

    seen = {}

    def run(cmd, env, **kw):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"x": 1}\n', stderr="")

    monkeypatch.setattr(bench.subprocess, "run", run)
    monkeypatch.setenv("PYTHONPATH", "/wheels/site")
    bench.run_side(tmp_path, [])
    assert seen["PYTHONPATH"] == f"{tmp_path / 'workflow_scripts'}{os.pathsep}/wheels/site"


def test_the_step_timer_times_replays_not_captures(monkeypatch, tmp_path):
    """Under CUDA graphs a step replays a graph and never calls forward: the worker times
    the slots' step, the capturing ones apart. Captures and replays simulated on the CPU."""
    import torch

    monkeypatch.syspath_prepend(str(REPO / "perf"))
    monkeypatch.syspath_prepend(str(REPO / "workflow_scripts"))
    with monkeypatch.context() as m:
        m.setattr(os, "environ", os.environ.copy())
        from bench_selfplay_decoding import worker
        from gpu_first_contact import CPU, DATA

    from spag.generation import hf_backend
    from spag.models.tiny import build_tiny_model

    corpus = sorted(p for p in DATA.glob("*") if p.suffix in (".json", ".yaml", ".txt"))
    model = build_tiny_model(corpus, tmp_path / "model", seed=0, **CPU.big)
    calls = []

    def step(self, token):  # a capture where no graph is held (a call's first, a shrink)
        calls.append(self.graph is None)
        if self.graph is None:
            self.b.stats["graphs_captured"] += 1
            self.graph = "captured"
        return self._forward(token[:, None])

    monkeypatch.setattr(hf_backend._Slots, "_step", step)
    threads = torch.get_num_threads()
    try:
        run = worker(argparse.Namespace(
            model=str(model), device="cpu", games=4, batch_size=4, max_new_tokens=8,
            max_turns=1, temperature=1.2, seed=1, threads=1, stop_lengths=[],
        ))  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert run["step_timer"] == "slots_step"
    assert run["capture_calls"] == run["graphs_captured"] == sum(calls) > 0
    assert run["replayed_steps"] == run["decode_steps"] == len(calls) - sum(calls) > 0
    assert run["eager_steps"] == 0 and run["prompt_passes"] > 0
    assert hf_backend._Slots._step is step  # put back


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """What travels to the device: tracked files and untracked ones git does not ignore
    (no .venv, results/, .whl/ or other ignored outputs)."""
    root = tmp_path_factory.mktemp("clone")
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():  # tracked but deleted in the working tree: not there
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    return root


@pytest.mark.parametrize("call", CALLS)
def test_each_call_runs_on_the_cpu_from_a_clean_clone(call, clone, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GFC_WORK": str(tmp_path / "work")}
    env["GFC_CALL"] = call
    env.pop("GFC_STEPS", None)
    env["PYTHONPATH"] = str(_blocker(tmp_path / "block"))
    subprocess.run(
        ["bash", str(clone / SCRIPT), str(out), "--cpu"], check=True, env=env, timeout=600
    )
    planned = plan(call, clone)
    names = {p.name for p in out.iterdir()}
    assert names <= planned["files"] and len(names) <= CALL_FILES, names
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    done = [r["step"] for r in rows if r["what"] == "done"]
    assert sorted(done) == sorted(planned["steps"]), done
    assert [s for s in done if s != "shape7b_cpu_adam"] == [
        s for s in planned["steps"] if s != "shape7b_cpu_adam"
    ]
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert "ModuleNotFoundError" not in (out / "log.txt").read_text()
    CHECKS[call]([r for r in rows if r["what"] != "done"], out)


def _measured(rows: list[dict], step: str, what: str) -> list[dict]:
    return [r for r in rows if r["step"] == step and r["what"] == what]


def _call_1(rows, out):
    batches = _measured(rows, "generation", "batch")
    assert [r["batch"] for r in batches] == [1, 2, 4]
    assert all(r["tokens_per_s"] > 0 for r in batches)
    # Graphs are CUDA only: none on the CPU, and each row says how many.
    assert all(r["graphs_captured"] == 0 for r in batches)
    [graphs] = _measured(rows, "graphs", "graphs_vs_eager")
    assert graphs["applicable"] is False and "CUDA only" in graphs["note"]
    assert graphs["graphs_captured"] == 0 and graphs["games"] == 4
    # Every side eager on the CPU: the comparison finds them equal.
    assert graphs["equal_replies"] == graphs["eager_repeat_equal"] == graphs["games"]
    assert graphs["first_difference"] is None and min(graphs["tokens"]) > 0
    # fp32 on the CPU: a game's replies do not depend on its batch.
    invariance = _measured(rows, "invariance", "batch_1_vs_n")
    assert invariance and all(r["differing_replies"] == 0 for r in invariance)
    assert all(r["graphs_captured"] == 0 for r in invariance)
    agreement = {r["dtype"]: r for r in _measured(rows, "scoring", "against_cpu_fp32")}
    assert agreement["float32"]["max_abs"] == 0.0
    assert 0 < agreement["bfloat16"]["max_abs"] < 0.1


def _call_2(rows, out):
    # A fresh node without the scoring step: training scores its own samples first.
    assert {r["dtype"] for r in _measured(rows, "training", "score_file")} == {
        "float32",
        "bfloat16",
    }
    pairings = {r["name"]: r for r in _measured(rows, "training", "pairing")}
    assert set(pairings) == {"fp32", "zero3_fp32", "autocast_bf16_fp32_scores", "lora_bf16"}
    assert all(p["estimate_bytes"] > 0 for p in pairings.values())
    # Scores in training's own precision: the first step's ratio is 1 up to rounding.
    for name in ("fp32", "zero3_fp32", "lora_bf16"):
        first = pairings[name]["first_step"]
        assert abs(float(first["ratio_mean"]) - 1) < 1e-5 and abs(float(first["kl"])) < 1e-5
    assert all(len(p["step_seconds"]) == 2 for p in pairings.values())


def _call_3(rows, out):
    # Self-play-shaped decoding at the largest batch and at batch 1 (no earlier checkout
    # here: the current code only), its tables in the log, not in OUT.
    played = [r for r in _measured(rows, "selfplay", "selfplay") if "side" in r]
    assert sorted((r["batch"], r["side"]) for r in played) == [(1, "after"), (4, "after")]
    assert all(r["generated_tokens"] > 0 and 0 < r["token_share"] <= 1 for r in played)
    # Every decoding step timed around the slots' step; no graph on the CPU.
    for r in played:
        assert r["step_timer"] == "slots_step" and r["graphs_captured"] == 0
        assert r["decode_steps"] == r["eager_steps"] > 0 and r["replayed_steps"] == 0
        assert r["capture_calls"] == 0 and r["decode_step_ms"] > 0
    assert "Self-play-shaped decoding" in (out / "log.txt").read_text()


def _call_4(rows, out):
    built = _measured(rows, "shape7b_build", "built")[0]
    assert built["save_seconds"] > 0 and built["parameters"] > 0 and built["bytes"] > 0
    calls = _measured(rows, "shape7b_generate", "call")
    assert len(calls) == 2  # one turn: the attacker's message, the defender's
    assert all(c["graphs_captured"] == 0 for c in calls)
    played = _measured(rows, "shape7b_generate", "selfplay")[0]
    assert played["batch_chosen"] == min(played["fit_rows"], played["batch_size"])
    assert all(c["sizing"]["rows"] <= played["batch_size"] for c in calls)
    assert played["tokens_per_s"] > 0 and 0 < played["token_share"] <= 1
    assert 0 < played["flop_share"] < 1 and played["estimate_bytes"] > 0
    assert played["graphs_captured"] == 0 and played["decode_steps"] > 0
    _scored(rows)
    [row] = _trained(rows, "lora", 3)  # LoRA's third step profiled
    assert row["flops_counted"] == {"passes": "lora", "checkpointing": True}
    # The profiled step: its top operations by time and its trace.
    assert "Self CPU" in (out / "profile_lora.txt").read_text()
    assert (out / "trace_lora.json.gz").stat().st_size > 0


def _call_5(rows, out):
    assert Path(_measured(rows, "shape7b_cpu_adam", "cpu_adam")[0]["library"]).exists()
    _scored(rows)
    _trained(rows, "full", 2)
    [offload] = _trained(rows, "offload", 2)
    assert offload["estimate_host_bytes"] > 0


def _scored(rows):
    scored = _measured(rows, "shape7b_score", "score_file")[0]
    assert scored["tokens"] > 0 and scored["longest"] <= scored["max_length"]
    assert scored["tokens_per_s"] > 0 and 0 < scored["flop_share"] < 1


def _trained(rows, name: str, steps: int) -> list[dict]:
    """Training at the micro-batch 2, scored in training's precision (float32 here)."""
    found = _measured(rows, f"shape7b_{name}", "pairing")
    for row in found:
        assert len(row["step_seconds"]) == steps and all(t > 0 for t in row["step_seconds"])
        assert len(_measured(rows, f"shape7b_{name}", "step")) == steps  # as they ended
        assert all(t > 0 for t in row["step_tokens"]) and row["tokens_per_s"] > 0
        assert 0 < row["flop_share"] < 1 and row["estimate_bytes"] > 0
        first = row["first_step"]
        assert abs(float(first["ratio_mean"]) - 1) < 1e-5 and abs(float(first["kl"])) < 1e-5
    assert len(found) == 1, found
    return found


CHECKS = {"1": _call_1, "2": _call_2, "3": _call_3, "4": _call_4, "5": _call_5}
