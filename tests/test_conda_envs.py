"""The conda environments in envs/ install this project where Snakemake puts them.

Snakemake 9 copies envs/X.yaml to <conda prefix>/<hash>_.yaml (.snakemake/conda/ of the
working directory, or --conda-prefix) and runs `conda env create --file <copy> --prefix
<conda prefix>/<hash>_`; conda writes the pip lines to a requirements file beside the
copy and runs `pip install -U -r` on it from that folder. So each env file names the
project as `-e "${SPAG_PROJECT_DIR}[extra]"` (pip expands ${VAR} in requirements files),
and the Snakefile sets SPAG_PROJECT_DIR. These tests run the real Snakemake with a
stand-in `conda` (tests/conda_standin/conda) that does that pip step as a dry run:
offline for where the envs go, and against the package index (marked `network`) for
what each env resolves to.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]["name"]
ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))
STANDIN = Path(__file__).resolve().parent / "conda_standin" / "conda"
HEAVY = {"torch", "transformers", "deepspeed", "lm-eval", "vllm", "accelerate"}

# What the vLLM env resolves to of the transformers stack, and what tests/test_vllm_env.py
# loads this project's checkpoints with: vLLM 0.33.0 takes transformers >=5.16.1,<5.21.
# test_env_resolves[vllm] fails when the env would get other versions.
VLLM_ENV_HF = {
    "transformers": "5.20.2",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "huggingface-hub": "2.5.0",
    "numpy": "2.3.5",
}
# vLLM 0.33.0 requires certifi>=2026.10.19. Where the index has no such release (the one
# this project is tested against stops at 2026.10.18), the vLLM env cannot resolve, so the
# dry run is offered a metadata-only stand-in of that release (--find-links): it checks
# everything else of the resolution; a real env still needs the real release.
CERTIFI_FOR_VLLM = "2026.10.19"


def _pip(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@functools.cache
def index_unreachable() -> str | None:
    """Why the package index cannot be used here, or None. vLLM is asked for because only
    the package index has it (pip's extra local indexes on this machine answer for pip)."""
    try:
        proc = _pip("index", "versions", "vllm", "--retries", "1", "--timeout", "20")
    except subprocess.TimeoutExpired:
        return "package index unreachable: `pip index versions vllm` timed out"
    if proc.returncode != 0 or not proc.stdout.startswith("vllm ("):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"package index unreachable: `pip index versions vllm` failed: {last}"
    return None


def skip_without_index() -> None:
    reason = index_unreachable()
    if reason:
        pytest.skip(reason)


def _copy_repo(dst: Path) -> Path:
    shutil.copytree(
        REPO,
        dst,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "results",
            ".snakemake",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".ruff_cache",
            ".hypothesis",
            "logs",
        ),
    )
    return dst


def _conda_on_path(tmp_path: Path) -> Path:
    """A `conda` on PATH that runs the stand-in with this Python (which has PyYAML)."""
    bin_dir = tmp_path / "condabin"
    bin_dir.mkdir(exist_ok=True)
    conda = bin_dir / "conda"
    conda.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    conda.chmod(0o755)
    return bin_dir


def _run_with_standin(
    tmp_path: Path, cmd: list[str], cwd: Path, pip_args: str, timeout: float, **env: str
) -> list[dict]:
    """Run cmd with the stand-in conda first on PATH; its records of `env create`."""
    log = tmp_path / "conda-standin.jsonl"
    log.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if k != "SPAG_PROJECT_DIR"}
    environ.update(
        PATH=os.pathsep.join([str(_conda_on_path(tmp_path)), environ["PATH"]]),
        CONDA_STANDIN_LOG=str(log),
        CONDA_STANDIN_PIP_ARGS=pip_args,
        **env,
    )
    proc = subprocess.run(
        cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
    )
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], records)
    return records


def _pip_lines(env_file: Path) -> list[str]:
    spec = yaml.safe_load(env_file.read_text())
    (lines,) = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict)]
    return lines


def _env_extras(env_file: Path) -> list[str]:
    """The extras the env asks of the project: -e "${SPAG_PROJECT_DIR}[a,b]"."""
    (line,) = _pip_lines(env_file)
    match = re.fullmatch(r'-e "\$\{SPAG_PROJECT_DIR\}(?:\[([a-z,]+)\])?"', line)
    assert match, f"{env_file.name}: pip line {line!r}"
    return match.group(1).split(",") if match.group(1) else []


def _extras_closure(extras: list[str]) -> set[str]:
    """These extras and those they take of this project itself (spag-pipeline[hf])."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in optional[extra]:
            if req.startswith(PROJECT + "["):
                todo += [e.strip() for e in req[len(PROJECT) + 1 : req.index("]")].split(",")]
    return seen


def _requirements(extras: list[str]) -> list[str]:
    """The requirements an env gets from pyproject.toml: the base and its extras."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    reqs = list(PYPROJECT["project"]["dependencies"])
    for extra in sorted(_extras_closure(extras)):
        reqs += [r for r in optional[extra] if not r.startswith(PROJECT + "[")]
    return reqs


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_digest(extras: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(_requirements(extras))).encode()).hexdigest()[:16]


def test_env_files_install_only_the_project_with_known_extras():
    assert [f.stem for f in ENV_FILES] == ["eval", "spag", "train", "vllm"]
    optional = set(PYPROJECT["project"]["optional-dependencies"])
    for env_file in ENV_FILES:
        assert set(_env_extras(env_file)) <= optional, env_file.name
    assert _extras_closure(["train"]) == {"train", "hf"}
    assert _extras_closure(["eval"]) == {"eval", "hf"}
    assert not HEAVY & {_norm(re.split(r"[=<>!~ ;\[]", r)[0]) for r in _requirements([])}


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda f: f.stem)
def test_env_file_changes_when_its_pins_do(env_file):
    """Snakemake builds an env again only when its file changes (it hashes the file's
    text), and the pins live in pyproject.toml: so each env file carries the digest of the
    requirements it installs. Fix: write the line this test names."""
    digest = dependency_digest(_env_extras(env_file))
    line = f"# pyproject dependencies: {digest}"
    assert line in env_file.read_text().splitlines(), f"{env_file.name}: write {line!r}"


@pytest.mark.parametrize("placement", ["default", "conda-prefix"])
def test_envs_install_the_project_from_where_snakemake_puts_them(tmp_path, placement):
    """Real Snakemake (--conda-create-envs-only), both env locations, both self-play
    backends (the vllm backend's play rule uses envs/vllm.yaml): conda's pip step, run
    where Snakemake puts each env file, installs this checkout editable with the env's
    extras. Offline: no index, no dependencies."""
    work = _copy_repo(tmp_path / "work")
    prefix = work / ".snakemake" / "conda"
    args = []
    if placement == "conda-prefix":
        prefix = tmp_path / "elsewhere" / "envs"
        args = ["--conda-prefix", str(prefix)]
    records = []
    for backend in ("hf", "vllm"):  # the second run creates only the env it lacks
        cmd = [
            sys.executable, "-m", "snakemake", "--sdm", "conda", "--conda-create-envs-only",
            "--cores", "1", *args, "--config", f"selfplay={{'backend': '{backend}'}}",
            # heads vLLM's CPU attention takes: the embedded default plays on the CPU
            "base_model={'tiny': {'head_dim': 64}}",
        ]  # fmt: skip
        records += _run_with_standin(
            tmp_path, cmd, work, "--no-deps --no-index --no-build-isolation", timeout=300
        )
    by_env = {}
    for record in records:
        (name,) = [f.stem for f in ENV_FILES if f.read_text() == record["env_text"]]
        by_env[name] = record
    assert sorted(by_env) == sorted(f.stem for f in ENV_FILES)
    assert len(records) == len(by_env)  # each created once
    for name, record in by_env.items():
        assert record["rc"] == 0, (name, record["stderr"])
        assert Path(record["cwd"]) == prefix.resolve(), name
        assert Path(record["prefix"]).parent.resolve() == prefix.resolve(), name
        project = record["install"][PROJECT]
        assert project["url"] == work.resolve().as_uri(), name
        assert project["editable"], name
        assert sorted(project["extras"]) == sorted(_env_extras(REPO / "envs" / f"{name}.yaml"))


def _certifi_standin(folder: Path) -> Path:
    """A wheel of certifi CERTIFI_FOR_VLLM with metadata and no code (dry runs only)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"certifi-{CERTIFI_FOR_VLLM}.dist-info"
    files = {
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: certifi\nVersion: {CERTIFI_FOR_VLLM}\n"
            "Requires-Python: >=3.7\n"
        ),
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: spag-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    files[f"{dist}/RECORD"] = "".join(f"{n},," + "\n" for n in [*files, f"{dist}/RECORD"])
    wheel = folder / f"certifi-{CERTIFI_FOR_VLLM}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return folder


def _index_lacks_certifi_for_vllm() -> bool:
    proc = _pip("index", "versions", "certifi", "--retries", "1", "--timeout", "20")
    match = re.match(r"certifi \(([^)]+)\)", proc.stdout)
    return not match or Version(match.group(1)) < Version(CERTIFI_FOR_VLLM)


def _public(version: str) -> str:
    return Version(version).public  # 2.13.0+cpu (the local CPU wheel) is torch==2.13.0


def _resolve(root: Path, env_file: Path) -> dict:
    """Resolve one env from the package index as conda's pip step would, from the copy of
    the env file where Snakemake puts it; the stand-in's record of it."""
    work = _copy_repo(root / "work")
    text = env_file.read_text()
    copy = work / ".snakemake" / "conda" / f"{hashlib.md5(text.encode()).hexdigest()}_.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(text)
    pip_args = "--use-feature=fast-deps"
    if "vllm" in _env_extras(env_file) and _index_lacks_certifi_for_vllm():
        pip_args += f" --find-links {_certifi_standin(root / 'certifi-standin')}"
    cmd = [
        str(_conda_on_path(root) / "conda"), "env", "create", "--quiet",
        "--no-default-packages", "--file", str(copy), "--prefix", str(copy.with_suffix("")),
    ]  # fmt: skip
    (record,) = _run_with_standin(
        root, cmd, work, pip_args, timeout=900, SPAG_PROJECT_DIR=str(work)
    )
    record["work"] = str(work)
    return record


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    """Every env's resolution, started together: each waits on the index most of its time
    (about 30% of a core each), so one after the other they cost a test worker minutes."""
    skip_without_index()
    with concurrent.futures.ThreadPoolExecutor(len(ENV_FILES)) as pool:
        yield {
            f.stem: pool.submit(_resolve, tmp_path_factory.mktemp(f"resolve-{f.stem}"), f)
            for f in ENV_FILES
        }


@pytest.mark.network
@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda f: f.stem)
def test_env_resolves(resolutions, env_file):
    """The whole env resolves from the package index, as conda's pip step would do it
    from the copy of the env file (pip --dry-run; fast-deps reads wheel metadata with
    range requests instead of downloading wheels): every `==` pin of the base and the
    env's extras is met; the light env has no torch; vLLM's env has vLLM's own torch and
    transformers, and nothing of training or lm-eval."""
    record = resolutions[env_file.stem].result()
    work = Path(record["work"])
    extras = _env_extras(env_file)
    installed = {name: info["version"] for name, info in record["install"].items()}
    assert record["install"][PROJECT]["url"] == work.resolve().as_uri()
    assert set(record["install"][PROJECT]["extras"]) == _extras_closure(extras)  # with [hf]
    for req in _requirements(extras):
        if "==" in req:
            name, version = (s.strip() for s in req.split("=="))
            assert _public(installed.get(_norm(name), "0")) == version, (
                req,
                installed.get(_norm(name)),
            )
    if not extras:
        assert not HEAVY & set(installed), sorted(HEAVY & set(installed))
    if "train" in extras:
        assert _public(installed["torch"]) == "2.13.0"
        assert installed["transformers"] == "5.23.0"
        assert "deepspeed" in installed
    if "eval" in extras:
        assert installed["lm-eval"] == "0.4.13" and "deepspeed" not in installed
    if "vllm" in extras:
        assert installed["vllm"] == "0.33.0"
        assert _public(installed["torch"]) == "2.14.0"
        assert Version(installed["transformers"]) < Version("5.21")
        assert not {"deepspeed", "lm-eval"} & set(installed)
        drift = {n: installed.get(n) for n, v in VLLM_ENV_HF.items() if installed.get(n) != v}
        assert not drift, f"the vLLM env now gets {drift}: update VLLM_ENV_HF (test_vllm_env)"


# ---------------------------------------------------------------- CUDA 12 builds
CUDA12_ENV_FILES = sorted((REPO / "envs" / "cuda12").glob("*.yaml"))
# vLLM 0.33.0's own pin of torch (Requires-Dist: torch==2.14.0 in its wheel's METADATA).
VLLM_TORCH = "2.14.0"


def _pins(extras: list[str]) -> dict[str, str]:
    pins = {}
    for req in _requirements(extras):
        name, _, version = req.partition("==")
        if version:
            pins[_norm(name)] = version.split(";")[0].strip()
    return pins


@pytest.mark.parametrize("env_file", CUDA12_ENV_FILES, ids=lambda f: f.stem)
def test_cuda12_env_differs_from_the_default_only_in_its_cuda_builds(env_file):
    """envs/cuda12/X.yaml (config cuda_build: cu12) is envs/X.yaml plus PyTorch's (and
    vLLM's) CUDA 12.9 index and pins of the +cu129 builds of the same versions: the same
    project line and extras, the same conda packages, the same digest line."""
    default = REPO / "envs" / env_file.name
    assert default.is_file()
    spec, base = yaml.safe_load(env_file.read_text()), yaml.safe_load(default.read_text())
    plain = [d for d in spec["dependencies"] if not isinstance(d, dict)]
    assert plain == [d for d in base["dependencies"] if not isinstance(d, dict)]
    assert spec["channels"] == base["channels"]
    lines = _pip_lines(env_file)
    assert lines[-1] == _pip_lines(default)[-1]  # -e "${SPAG_PROJECT_DIR}[extra]"
    indexes = [ln.split()[1] for ln in lines if ln.startswith("--extra-index-url ")]
    assert "https://download.pytorch.org/whl/cu129" in indexes
    pins = dict(ln.split("==") for ln in lines if "==" in ln)
    extras = _env_extras(default)
    expected = _pins(extras)
    if "vllm" in extras:
        assert "https://wheels.vllm.ai/0.33.0/cu129" in indexes
        expected["torch"] = VLLM_TORCH
    assert set(pins) == ({"torch", "vllm"} if "vllm" in extras else {"torch"})
    for name, version in pins.items():
        # A local version of the project's pin: pip's ==X accepts X+cu129.
        assert Version(version).local == "cu129", (name, version)
        assert Version(version).public == expected[name], (name, version)
    digest = f"# pyproject dependencies: {dependency_digest(extras)}"
    assert digest in env_file.read_text().splitlines()


def test_cuda_build_picks_the_gpu_envs_and_leaves_the_light_one(tmp_path):
    """`cuda_build: cu12` runs every torch rule in envs/cuda12/ and nothing else changes;
    the default keeps envs/ (the plan with a stand-in conda, as Snakemake lists it)."""
    from workflow_utils import make_workdir, snakemake

    wd = make_workdir(tmp_path / "work")
    env = {"PATH": f"{STANDIN.parent}{os.pathsep}{os.environ['PATH']}"}
    listed = {}
    for build in ("cu13", "cu12"):
        config = {"cuda_build": build, "selfplay": {"backend": "vllm"},
                  "base_model": {"tiny": {"head_dim": 64}}}  # fmt: skip
        res = snakemake(wd, "spag_epoch1", "-n", "--sdm", "conda", "--list-conda-envs",
                        config=config, env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        listed[build] = sorted(
            line.split()[0] for line in res.stdout.splitlines() if line.startswith("envs/")
        )
    names = ["eval", "spag", "train", "vllm"]
    assert listed["cu13"] == [f"envs/{n}.yaml" for n in names]
    assert listed["cu12"] == sorted(
        f"envs/{n}.yaml" if n == "spag" else f"envs/cuda12/{n}.yaml" for n in names
    )
