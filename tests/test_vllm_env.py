"""A model written by training (transformers 5.23.0) loads in the vLLM env's transformers.

vLLM 0.33.0 pins transformers <5.21 (envs/vllm.yaml gets 5.20.2), while training writes
its checkpoints with transformers 5.23.0, and vLLM reads the config, tokenizer and
generation config of a checkpoint with transformers. These tests build a venv with the
vLLM env's transformers stack (test_conda_envs.VLLM_ENV_HF; torch 2.13.0 CPU installed
as scripts/setup.sh does, not vLLM's CUDA torch 2.14.0), kept under the pytest cache,
load a folder written by `spag train` there, and compare what it computes to the
training env (this one): next-token logits and a greedy continuation of a fixed prompt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from test_conda_envs import VLLM_ENV_HF, skip_without_index
from training_samples import sample_rows, write_samples

# As scripts/setup.sh: torch alone first, so that pip takes the CPU build (a local wheel
# here, offered by pip's configuration) rather than PyPI's multi-GB CUDA build.
TORCH = "torch==2.13.0"
REQUIREMENTS = [f"{name}=={version}" for name, version in sorted(VLLM_ENV_HF.items())]
PROMPT = "tell me about a thing you use in a kitchen every day"

# Run in both envs: load the folder as vLLM's transformers would, and compute.
PROBE = r"""
import json, sys
import tokenizers, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

folder, prompt, chat = sys.argv[1], sys.argv[2], sys.argv[3] == "chat"
tok = AutoTokenizer.from_pretrained(folder)
if chat:
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
ids = tok(prompt, return_tensors="pt").input_ids
model, info = AutoModelForCausalLM.from_pretrained(
    folder, use_safetensors=True, dtype=torch.float32, output_loading_info=True
)
model.eval()
with torch.no_grad():
    logits = model(ids).logits[0, -1]
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.eos_token_id)
gen = GenerationConfig.from_pretrained(folder)
print(json.dumps({
    "versions": [transformers.__version__, tokenizers.__version__, torch.__version__],
    "architectures": AutoConfig.from_pretrained(folder).architectures,
    "loading": {k: sorted(map(str, v)) for k, v in info.items()},
    "prompt": prompt,
    "ids": ids[0].tolist(),
    "logits": logits.tolist(),
    "greedy": out[0, ids.shape[1]:].tolist(),
    "special": [gen.bos_token_id, gen.eos_token_id, tok.eos_token, tok.pad_token],
}))
"""


def _cache_dir(request, tmp_path_factory) -> Path:
    cache = getattr(request.config, "cache", None)
    if cache is None:  # -p no:cacheprovider
        return tmp_path_factory.mktemp("vllm-env")
    return cache.mkdir("vllm-env-transformers")


@pytest.fixture(scope="module")
def vllm_env_python(request, tmp_path_factory) -> Path:
    """The python of a venv with the vLLM env's transformers stack (built once, kept)."""
    root = _cache_dir(request, tmp_path_factory)
    python = root / "venv" / "bin" / "python"
    stamp = root / "installed.txt"
    wanted = "\n".join([TORCH, *REQUIREMENTS]) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted and python.exists():
        return python
    skip_without_index()
    shutil.rmtree(root / "venv", ignore_errors=True)
    stamp.unlink(missing_ok=True)
    venv.create(root / "venv", with_pip=True, clear=True)
    # torch with pip, which is offered the local CPU build; the rest with uv where
    # scripts/setup.sh installed it (the same pins, installed in seconds). No bytecode
    # at install: the probes run with -I, which ignores PYTHONDONTWRITEBYTECODE, so the
    # first one writes it for what it imports (about 12 CPU-s), where compiling all of
    # torch and transformers took 57 of the venv's 72 CPU-s.
    pip = [str(python), "-m", "pip", "install", "--no-compile"]
    uv = Path(sys.executable).with_name("uv")
    rest = [str(uv), "pip", "install", "--python", str(python)]
    for cmd in (pip + [TORCH], (rest if uv.exists() else pip) + REQUIREMENTS):
        proc = subprocess.run(
            [*cmd, "--quiet"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    stamp.write_text(wanted)
    return python


def _probe(python: Path | str, folder: Path, chat: bool = False) -> dict:
    proc = subprocess.run(
        [str(python), "-I", "-c", PROBE, str(folder), PROMPT, "chat" if chat else "plain"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _same_outputs(folder: Path, vllm_env_python: Path, chat: bool = False) -> None:
    import torch

    ours = _probe(sys.executable, folder, chat)
    theirs = _probe(vllm_env_python, folder, chat)
    assert theirs["versions"][:2] == [VLLM_ENV_HF["transformers"], VLLM_ENV_HF["tokenizers"]]
    assert ours["versions"][0] != theirs["versions"][0]  # the point: two transformers
    for key in ("architectures", "prompt", "ids", "special", "greedy"):
        assert theirs[key] == ours[key], key
    for probe in (ours, theirs):  # every weight read, none left at its initial value
        assert not any(probe["loading"].values()), probe["loading"]
    torch.testing.assert_close(
        torch.tensor(theirs["logits"]), torch.tensor(ours["logits"]), rtol=1e-5, atol=1e-5
    )


@pytest.fixture(scope="module")
def trained_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model after two `spag train` steps: what the pipeline hands to vLLM."""
    from spag.cli import main
    from spag.training.scoring import score_file

    d = tmp_path_factory.mktemp("trained")
    samples = write_samples(d / "samples.parquet", sample_rows(8))
    scored = d / "scored.parquet"
    score_file(tiny_model_dir, samples, scored, batch_size=4, max_length=64, dtype="float32")
    rc = main([
        "train", "--model", str(tiny_model_dir), "--samples", str(scored),
        "--output", str(d / "model"), "--checkpoint-dir", str(d / "ckpt"),
        "--loss-log", str(d / "loss.tsv"), "--max-length", "64", "--objective", "offline_po",
        "--per-device-batch-size", "2", "--gradient-accumulation-steps", "1",
        "--learning-rate", "1e-3", "--max-steps", "2",
    ])  # fmt: skip
    assert rc == 0
    return d / "model"


@pytest.mark.network
def test_trained_model_loads_the_same_in_the_vllm_env(trained_dir, vllm_env_python):
    _same_outputs(trained_dir, vllm_env_python)


@pytest.mark.network
def test_converted_smollm2_loads_the_same_in_the_vllm_env(smollm2_dir, vllm_env_python):
    """A real Llama checkpoint (the GGUF conversion of the base-model rule), prompted
    through its chat template."""
    _same_outputs(smollm2_dir, vllm_env_python, chat=True)
