"""Faults met mid-run: storage that refuses writes, a job's wrapper killed under it.

Each case ends in a clear one-line error or a clean stop; nothing that looks complete
is left behind. (Bad settings refused before any job: tests/test_config_inputs.py.)
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from workflow_utils import make_workdir, slow_step_env

REPO = Path(__file__).resolve().parents[1]


def _without_root_override(cmd: list[str]) -> list[str]:
    """Run as root without the capability to ignore file modes (as any user runs)."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be made to apply")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *cmd]


def test_a_read_only_output_folder_is_one_line_naming_it(tmp_path):
    out = tmp_path / "words"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    spag = Path(sys.executable).with_name("spag")
    cmd = _without_root_override(
        [
            str(spag), "target-words", "--source", "wordfreq",
            "--stopwords", str(REPO / "data" / "stopwords.txt"),
            "--output-train", str(out / "train.txt"), "--output-test", str(out / "test.txt"),
            "--num-train", "5", "--num-test", "2",
        ]
    )  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        out.chmod(0o755)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "error:" in x]
    assert line.startswith(f"spag target-words: error: {out}/")
    assert line.endswith("Permission denied")
    assert list(out.iterdir()) == []


def _cmdline(p: psutil.Process) -> str:
    """A process's command line; empty once it has ended (a short-lived child may end
    between being listed and being read)."""
    try:
        return " ".join(p.cmdline())
    except psutil.NoSuchProcess:
        return ""


def _step_processes(workdir: Path, step: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if step in cmd and p.info["cwd"] == str(workdir) and "snakemake" not in cmd:
            found.append(p)
    return found


def test_a_killed_job_process_leaves_no_step_running_and_no_output(tmp_path):
    """Rule shells exec their step: killing the process Snakemake started for a job
    (a wrapper, to anyone watching) ends the step too, and no output appears after
    Snakemake has given the job up (it would be trusted on the next run)."""
    workdir = make_workdir(tmp_path / "work")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, HF_HUB_OFFLINE="1", **slow_step_env("target-words", 8))
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    output = workdir / "results" / "words" / "train.txt"
    cmd = [str(bindir / "snakemake"), str(output.relative_to(workdir)), "--cores", "1"]
    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            job = None
            while job is None and time.monotonic() < deadline and proc.poll() is None:
                children = psutil.Process(proc.pid).children()
                job = next((c for c in children if "target-words" in _cmdline(c)), None)
                time.sleep(0.1)
            assert job is not None, (tmp_path / "snakemake.log").read_text()[-3000:]
            job.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=120) != 0
        finally:
            if proc.poll() is None:
                proc.kill()
    time.sleep(12)  # past the step's delay and its run
    leftover = _step_processes(workdir, "target-words")
    for p in leftover:
        p.kill()
    assert not leftover, [p.cmdline() for p in leftover]
    assert not output.exists()


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda m: (m / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda m: (m / "model.safetensors").write_bytes(b"cut"), "model.safetensors has 3 bytes"),
    ],
    ids=["file-deleted", "weights-cut"],
)
def test_a_damaged_model_folder_is_noticed_and_set_aside(
    tiny_model_dir, tmp_path, capsys, damage, problem
):
    """A model folder the project wrote carries a manifest; the step that reads a damaged
    one stops naming it and the file, and renames it aside so the next run rebuilds it."""
    from spag.cli import main
    from spag.data.tables import MANIFEST, atomic_dir

    model = tmp_path / "results" / "imitation" / "model"
    with atomic_dir(model) as tmp:
        shutil.copytree(tiny_model_dir, tmp, dirs_exist_ok=True)
    assert (model / MANIFEST).is_file()
    damage(model)
    samples = tmp_path / "samples.parquet"
    from training_samples import sample_rows, write_samples

    write_samples(samples, sample_rows(4))
    rc = main(["score-ref", "--model", str(model), "--samples", str(samples),
               "--output", str(tmp_path / "scored.parquet")])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert f"model folder {model} is damaged ({problem}" in err
    assert "the next run rebuilds it" in err
    assert not model.exists() and (model.parent / "model.damaged").is_dir()
    assert not (tmp_path / "scored.parquet").exists()
