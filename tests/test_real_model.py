"""The real pretrained model that installs offline (SmolLM2-135M-Instruct from its
packaged GGUF): conversion, greedy answers through the pipeline's own backend, and the
GGUF checks that run before any job."""

from __future__ import annotations

import json
import shutil

import pytest

from spag.errors import SpagInputError
from spag.generation import Sampling, load_backend
from spag.ops.base_model import (
    PACKAGED_MODELS,
    check_gguf,
    packaged_model_file,
    prepare_base_model,
)


def test_converted_model_is_a_safetensors_llama_with_its_chat_tokenizer(smollm2_dir):
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (smollm2_dir / "model.safetensors").is_file()
    assert (smollm2_dir / "chat_template.jinja").is_file() or "chat_template" in (
        (smollm2_dir / "tokenizer_config.json").read_text()
    )
    source = json.loads((smollm2_dir / "gguf_source.json").read_text())
    assert source["sha256"] == PACKAGED_MODELS["smollm2-135m-instruct"].sha256


@pytest.mark.parametrize(
    ("question", "answer"),
    [("What is the capital of France?", "paris"), ("What is the capital of Japan?", "tokyo")],
)
def test_converted_model_answers_a_factual_question_greedily_in_chat(smollm2_dir, question, answer):
    """A wrong conversion (weights, tokenizer, template or rendering) cannot answer this."""
    backend = load_backend(
        "hf", smollm2_dir, prompt_format="chat", trust_remote_code=False, max_length=256
    )
    greedy = Sampling(max_new_tokens=12, temperature=0.0, top_p=1.0, top_k=0)
    (reply,) = backend.generate([f"{question} Answer with one word."], greedy, seed=0)
    assert answer in reply.text.lower(), reply.text
    assert reply.finished_by_eos  # the turn ends with <|im_end|>, which stops the reply


def test_gguf_errors_name_the_file(tmp_path):
    with pytest.raises(SpagInputError, match="GGUF file not found"):
        check_gguf(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(SpagInputError, match=r"bad\.gguf: not a GGUF file"):
        check_gguf(bad)
    real, sha = packaged_model_file("smollm2-135m-instruct")
    cut = tmp_path / "cut.gguf"
    with open(real, "rb") as f:
        cut.write_bytes(f.read(5000))
    with pytest.raises(SpagInputError, match=r"cut\.gguf: corrupt GGUF file"):
        check_gguf(cut)
    with pytest.raises(SpagInputError, match="checksum mismatch"):
        check_gguf(cut, sha256=sha)


def test_gguf_of_an_unsupported_architecture_is_refused(tmp_path):
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "not-an-architecture")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SpagInputError, match="architecture 'not-an-architecture' is not one"):
        check_gguf(path)
    with pytest.raises(SpagInputError, match="odd.gguf"):
        prepare_base_model("label", tmp_path / "out", gguf_file=str(path))
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_local_gguf_file_is_read_with_its_architecture_and_chat_template(tmp_path):
    real, _ = packaged_model_file("smollm2-135m-instruct")
    local = tmp_path / "copy.gguf"
    shutil.copy(real, local)
    info = check_gguf(local)
    assert info.architecture == "llama" and "im_start" in (info.chat_template or "")
