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
from pathlib import Path

from spag.errors import SpagInputError

log = logging.getLogger(__name__)

# One of these makes a usable tokenizer (fast JSON, SentencePiece, BPE vocab, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
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


def check_model_folder(folder: str | os.PathLike, trust_remote_code: bool = False) -> Path:
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
    trust_remote_code: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Fetch ``repo_id`` (config, tokenizer, safetensors) into the folder ``output``, atomically.

    Online, files go straight into a temporary folder beside ``output``; offline
    (``HF_HUB_OFFLINE=1``) they are copied from the Hugging Face cache, or a clear
    error says the model is not cached.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

    from spag.tables import atomic_dir

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
    trust_remote_code: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Make ``output`` the base model folder from a local folder or a hub id."""
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
