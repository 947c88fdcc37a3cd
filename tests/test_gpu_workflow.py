"""The workflow-on-a-GPU script (perf/gpu_workflow.sh) in its plan-only mode, so that the
rare device run finds it working: its wheel step installs a tiny wheel, and the plan of
`snakemake spag_epoch1` under the script's own overlay puts every GPU rule family on the
GPU (and nothing else)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# Rule -> jobs of spag_epoch1 on the embedded default; the GPU ones by rule family.
GPU_RULES = {
    "score_imitation": 1, "train_imitation": 1, "selfplay": 3, "score_ref": 1,
    "train_spag": 1, "eval_play_baseline": 2, "eval_play": 1, "eval_hints": 3,
    "eval_inference": 3, "eval_reasoning": 3,
}  # fmt: skip


def _fake_wheel(folder: Path) -> Path:
    folder.mkdir()
    wheel = folder / "gw_fake_probe-0.1-py3-none-any.whl"
    info = "gw_fake_probe-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("gw_fake_probe/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: gw-fake-probe\nVersion: 0.1\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return folder


def test_the_gpu_workflow_plans_the_gpu_families_on_the_gpu(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "PYTHON": sys.executable, "GW_WORK": str(work)}
    env["GW_WHEELS"] = str(_fake_wheel(tmp_path / "wheels"))
    subprocess.run(
        ["bash", str(REPO / "perf/gpu_workflow.sh"), str(out), "--dry-run"],
        check=True, env=env, timeout=300,
    )  # fmt: skip
    # What comes back from the device: at most 8 files, none left half-written.
    names = sorted(p.name for p in out.iterdir())
    assert len(names) <= 8 and not [n for n in names if n.endswith(".partial")], names
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["dry_run"] and summary["mode"] == "gpu"
    assert summary["wheels"] == "installed"
    assert (work / "site" / "gw_fake_probe" / "__init__.py").exists()
    assert summary["env"]["spag_runs"], summary["env"]
    assert summary["snakemake"]["rc"] == 0, (out / "snakemake.log").read_text()[-3000:]

    overlay = yaml.safe_load((work / "run" / "overlay.yaml").read_text())
    assert {f: r["gpus"] for f, r in overlay["resources"].items()} == dict.fromkeys(
        ("selfplay", "train", "score", "evaluate"), 1
    )
    assert "--resources gpu=1" in (out / "log.txt").read_text()

    jobs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(j["status"] == "planned" for j in jobs)
    on_gpu = Counter(j["rule"] for j in jobs if j["gpu"] == 1)
    assert on_gpu == GPU_RULES
    # Every GPU job is told --device cuda; every other job asks for no GPU.
    assert all(j.get("device") == "cuda" for j in jobs if j["gpu"] == 1)
    assert all(j["gpu"] == 0 and j.get("device") in (None, "cpu") for j in jobs
               if j["rule"] not in GPU_RULES)  # fmt: skip
    assert summary["jobs"]["planned"] == len(jobs) == 33
    assert summary["jobs"]["gpu_jobs_seen"] == sum(GPU_RULES.values())
    assert {r for r, s in summary["per_rule"].items() if s["gpu"]} == set(GPU_RULES)
