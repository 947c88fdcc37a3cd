"""spag prepare-base-model: local folders are checked and linked, hub ids fetched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spag.cli import main
from spag.errors import SpagInputError
from spag.ops.base_model import check_model_folder, download_hub_model, prepare_base_model


def fake_model(folder: Path, weights: str = "model.safetensors", **config) -> Path:
    """A folder with the files a checkpoint needs (contents are not loaded here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / weights).write_bytes(b"\0" * 8)
    return folder


def test_local_folder_is_linked_atomically(tmp_path):
    src = fake_model(tmp_path / "src")
    out = tmp_path / "results" / "base_model"
    assert main(["prepare-base-model", "--name-or-path", str(src), "--output", str(out)]) == 0
    assert out.is_symlink() and os.readlink(out) == str(src.resolve())
    assert (out / "config.json").is_file()
    # Rerun (e.g. the source moved): the link is replaced in place, no temporary left.
    src2 = fake_model(tmp_path / "src2")
    prepare_base_model(str(src2), out)
    assert os.readlink(out) == str(src2.resolve())
    # beside it only the job record of the first build (spag.ops.provenance)
    assert sorted(p.name for p in out.parent.iterdir()) == ["base_model", "base_model.job.json"]


def test_relative_path_becomes_absolute_link(tmp_path, monkeypatch):
    fake_model(tmp_path / "models" / "m")
    monkeypatch.chdir(tmp_path)
    prepare_base_model("models/m", "out")
    assert os.readlink(tmp_path / "out") == str((tmp_path / "models" / "m").resolve())


@pytest.mark.parametrize(
    "remove, fragment",
    [
        ("config.json", "missing config.json"),
        ("tokenizer.json", "missing tokenizer file"),
        ("model.safetensors", "no *.safetensors"),
    ],
)
def test_local_folder_missing_files(tmp_path, remove, fragment):
    src = fake_model(tmp_path / "src")
    (src / remove).unlink()
    with pytest.raises(SpagInputError) as err:
        prepare_base_model(str(src), tmp_path / "out")
    assert str(src) in str(err.value) and fragment in str(err.value)
    assert not (tmp_path / "out").exists()


def test_pickled_weights_refused_with_conversion_hint(tmp_path, capsys):
    src = fake_model(tmp_path / "src", weights="pytorch_model.bin")
    rc = main(["prepare-base-model", "--name-or-path", str(src), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "pytorch_model.bin" in err and "pickled" in err and "save_pretrained" in err


def test_sharded_weights_need_every_shard(tmp_path):
    src = fake_model(tmp_path / "src", weights="model-00001-of-00002.safetensors")
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    }
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SpagInputError, match="missing weight shard.*00002-of-00002"):
        check_model_folder(src)
    (src / "model-00002-of-00002.safetensors").write_bytes(b"\0")
    assert check_model_folder(src) == src.resolve()


def test_remote_code_needs_opt_in(tmp_path):
    src = fake_model(tmp_path / "src", auto_map={"AutoModelForCausalLM": "modeling.M"})
    with pytest.raises(SpagInputError, match="--trust-remote-code"):
        prepare_base_model(str(src), tmp_path / "out")
    prepare_base_model(str(src), tmp_path / "out", trust_remote_code=True)
    assert (tmp_path / "out").is_symlink()


def test_existing_real_folder_is_not_replaced(tmp_path):
    src = fake_model(tmp_path / "src")
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    with pytest.raises(SpagInputError, match="already exists as a folder"):
        prepare_base_model(str(src), out)
    assert (out / "keep").is_dir()


@pytest.mark.parametrize("name", ["./no/such/folder", "/no/such/folder", "a/b/c"])
def test_missing_local_path(tmp_path, name):
    with pytest.raises(SpagInputError, match="model folder not found"):
        prepare_base_model(name, tmp_path / "out")


def test_bad_hub_id(tmp_path):
    with pytest.raises(SpagInputError, match="neither an existing folder nor a hub id"):
        prepare_base_model("bad id!", tmp_path / "out")


def test_offline_hub_id_not_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    rc = main(["prepare-base-model", "--name-or-path", "someone/some-model", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "someone/some-model" in err and "HF_HUB_OFFLINE=1" in err and "not in the" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def fake_cache(cache: Path, repo_id: str, weights: str = "model.safetensors") -> None:
    """The Hugging Face cache layout of one snapshot (refs/main -> snapshots/<commit>)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    fake_model(repo / "snapshots" / commit, weights=weights)


def test_offline_hub_id_copied_from_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_cache(tmp_path / "cache", "org/tiny")
    out = tmp_path / "results" / "base_model"
    download_hub_model("org/tiny", out, cache_dir=tmp_path / "cache")
    assert out.is_dir() and not out.is_symlink()
    assert {p.name for p in out.iterdir()} >= {"config.json", "tokenizer.json", "model.safetensors"}
    assert not (out / ".cache").exists()


def test_cached_hub_model_with_pickled_weights_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_cache(tmp_path / "cache", "org/old", weights="pytorch_model.bin")
    out = tmp_path / "out"
    with pytest.raises(SpagInputError, match="hub model org/old: .*no \\*.safetensors"):
        download_hub_model("org/old", out, cache_dir=tmp_path / "cache")
    assert not out.exists()
