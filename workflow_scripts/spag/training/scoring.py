"""Reference log-probs of samples (column ``ref_logprob``) and the reference model's identity.

The reference is fixed during an epoch's training, so its sequence log-probs are
computed once here, in batched forward passes, instead of by a second model held in
memory during training. The file records which model scored it (an identity hash),
the max_length and the dtype in its Parquet metadata; training refuses a mismatch.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import struct
import time
from pathlib import Path

import pyarrow as pa

from spag.data.tables import read_parquet, write_parquet
from spag.errors import SpagInputError
from spag.ops import select_device
from spag.training.settings import ScoreRefConfig, ScoringSettings

log = logging.getLogger(__name__)

META_IDENTITY = b"spag.ref_model_identity"
META_PATH = b"spag.ref_model_path"
META_MAX_LENGTH = b"spag.ref_max_length"
META_PROMPT_FORMAT = b"spag.ref_prompt_format"
META_DTYPE = b"spag.ref_dtype"
# "true" where the samples were scored as packed rows (attention per sample), the path
# of padding-free training.
META_PACKED = b"spag.ref_padding_free"

# Files that decide what a model computes on a given text (weights are covered by
# their safetensors headers and sizes: hashing every weight byte would be slow).
_IDENTITY_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)


def _safetensors_header(path: Path) -> bytes:
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise SpagInputError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise SpagInputError(f"{path}: not a safetensors file (header length {n})")
        return fh.read(n)


def model_identity(model_dir: str | os.PathLike) -> str:
    """A cheap fingerprint of a model folder, independent of where it lies.

    It hashes the config and tokenizer files, and for every safetensors file its size,
    its header (names, dtypes, shapes, offsets) and its first and last MiB: a retrained
    model keeps the shapes, so some weight bytes must enter the hash, but not all of
    them (a 7B model would take minutes).
    """
    root = Path(model_dir)
    if not (root / "config.json").is_file():
        raise SpagInputError(f"{root}: not a model folder (no config.json)")
    weights = sorted(root.glob("*.safetensors"))
    if not weights:
        raise SpagInputError(f"{root}: no *.safetensors weights")
    h = hashlib.sha256()
    for name in _IDENTITY_FILES:
        p = root / name
        if p.is_file():
            h.update(name.encode() + b"\0" + p.read_bytes() + b"\0")
    for p in weights:
        size = p.stat().st_size
        h.update(p.name.encode() + b"\0" + str(size).encode() + b"\0")
        h.update(_safetensors_header(p))
        # Same shapes, different values: sample the bytes at both ends of the file.
        with p.open("rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(size - (1 << 20))
                h.update(fh.read(1 << 20))
    return "sha256:" + h.hexdigest()


def torch_dtype(name: str):
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise SpagInputError(f"unknown dtype {name!r}; choose one of {', '.join(dtypes)}")
    return dtypes[name]


def load_model_and_tokenizer(
    model_dir: str | os.PathLike,
    dtype: str = ScoringSettings.dtype,
    trust_remote_code: bool = ScoreRefConfig.trust_remote_code,
    device=None,
):
    """Load a causal LM (safetensors only) and its tokenizer from a local folder, onto
    ``device`` (a GPU's weights go straight onto it, not through host memory)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(model_dir)
    if not (root / "config.json").is_file():
        raise SpagInputError(f"{root}: not a model folder (no config.json)")
    on_gpu = device is not None and torch.device(device).type == "cuda"
    tokenizer = AutoTokenizer.from_pretrained(root, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        root,
        dtype=torch_dtype(dtype),
        use_safetensors=True,
        trust_remote_code=trust_remote_code,
        device_map=torch.device(device) if on_gpu else None,
    )
    if device is not None and not on_gpu:
        model.to(device)
    return model, tokenizer


def _accepts_logits_to_keep(model) -> bool:
    inner = getattr(model, "module", model)  # DeepSpeed / DDP wrappers
    if hasattr(inner, "get_base_model"):
        # A PeftModel's forward takes **kwargs and hands them to the model it wraps.
        inner = inner.get_base_model()
    try:
        return "logits_to_keep" in inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False


def model_sequence_logprobs(model, input_ids, attention_mask, labels, trim_logits: bool = True):
    """Forward pass and sequence log-probs of the labelled (target) tokens.

    Where the model takes :mod:`spag.training.head`, only the learned positions are
    projected onto the vocabulary, a chunk at a time. Else, with ``trim_logits``, the
    projection runs from the earliest position whose logit a target token needs
    (``logits_to_keep``): query positions, most of a game sample, get no logits, which
    saves time and the float32 copy of a (batch x length x vocabulary) tensor. Right
    padding and length-grouped batches keep the trimmed span close to the targets.
    """
    from spag.training.head import takes_chunked_head
    from spag.training.losses import (
        IGNORE_INDEX,
        first_needed_logit,
        sample_means,
        sequence_logprobs,
    )

    if takes_chunked_head(model):
        learned = labels[:, 1:] != IGNORE_INDEX
        rows, cols = learned.nonzero(as_tuple=True)
        positions = rows * labels.shape[1] + cols  # in the flattened (batch x length)
        token_lp = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            spag_targets=(positions, labels[:, 1:][learned]),
        )
        return sample_means(token_lp, rows, labels.shape[0])
    kwargs = {}
    if trim_logits and _accepts_logits_to_keep(model):
        start = first_needed_logit(labels)
        kwargs["logits_to_keep"] = labels.shape[1] - start
        labels = labels[:, start:]
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs
    ).logits
    return sequence_logprobs(logits, labels)


def score_features(
    model,
    features: list[dict],
    pad_id: int,
    batch_size: int,
    device,
    packed: bool = False,
    moves_out: list[float | None] | None = None,
) -> list[float]:
    """Sequence log-prob of every feature under ``model``, in the order of ``features``.

    Batches are formed from samples sorted by length, so padding is small. With
    ``packed`` a batch is one packed row with attention per sample, the path training
    takes with ``padding_free`` (``model`` must use :func:`spag.training.packing.use_packed_attention`):
    each sample then meets the same attention kernel in scoring and in training, so the
    step-0 ratio is 1 up to the dtype's rounding. With ``moves_out`` (packed features
    with their moves' branches) it is filled with each feature's move log-prob among the
    legal moves, None where it names no legal move.
    """
    import torch

    from spag.training.collate import SampleCollator
    from spag.training.packing import PackedCollator, packed_logprobs

    collate = PackedCollator() if packed else SampleCollator(pad_id)
    order = sorted(range(len(features)), key=lambda i: -len(features[i]["input_ids"]))
    out = [0.0] * len(features)
    if moves_out is not None:
        moves_out[:] = [None] * len(features)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = collate([features[i] for i in idx])
            if packed:
                on_device = {
                    k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
                }
                lp_t, moves = packed_logprobs(model, on_device)
                lp = lp_t.tolist()
                if moves_out is not None and moves is not None:
                    for i, has, v in zip(
                        idx, moves.has_move.tolist(), moves.move.tolist(), strict=True
                    ):
                        moves_out[i] = v if has else None
            else:
                lp = model_sequence_logprobs(
                    model,
                    batch["input_ids"].to(device),
                    batch["attention_mask"].to(device),
                    batch["labels"].to(device),
                ).tolist()
            for i, v in zip(idx, lp, strict=True):
                out[i] = v
    return out


def score_file(
    model_dir: str | os.PathLike,
    samples: str | os.PathLike,
    output: str | os.PathLike,
    *,
    batch_size: int = ScoringSettings.batch_size,
    max_length: int = ScoreRefConfig.max_length,
    dtype: str = ScoringSettings.dtype,
    trust_remote_code: bool = ScoreRefConfig.trust_remote_code,
    prompt_format: str = ScoreRefConfig.prompt_format,
    device: str = ScoreRefConfig.device,
    padding_free: bool = ScoreRefConfig.padding_free,
) -> pa.Table:
    """Add ``ref_logprob`` under ``model_dir`` to the sample table and write it atomically.

    A row that cannot be encoded (empty target, target longer than max_length) keeps a
    null ``ref_logprob``; such rows are counted and logged, and training skips them by
    the same rule.
    """
    import torch

    from spag.data.tables import META_GAME
    from spag.generation.base import check_model_dir
    from spag.training.collate import build_features, check_sample_table, pad_token_id
    from spag.training.head import use_chunked_head

    if batch_size < 1:
        raise SpagInputError(f"--batch-size must be positive, got {batch_size}")
    # Before anything is loaded: a GPU job without working CUDA stops here.
    device = torch.device(select_device(device, "spag score-ref"))
    table = check_sample_table(read_parquet(samples, "samples"), samples, need_ref=False)
    check_model_dir(model_dir)
    identity = model_identity(model_dir)
    model, tokenizer = load_model_and_tokenizer(model_dir, dtype, trust_remote_code, device)
    # The learned tokens' log-probs as training makes them (spag.training.head).
    use_chunked_head(model)
    if padding_free:
        from spag.training.packing import use_packed_attention

        use_packed_attention(model)
    # Samples with legal moves, scored packed: the reference's move log-probs too (what
    # the objective legal_po's ratio needs), from the same forward passes.
    moves = (
        padding_free
        and "legal_moves" in table.column_names
        and META_GAME in (table.schema.metadata or {})
    )
    features, report = build_features(
        table,
        tokenizer,
        max_length,
        samples,
        with_ref=False,
        prompt_format=prompt_format,
        moves=moves,
    )
    move_scores: list[float | None] = []
    started = time.perf_counter()
    scores = score_features(
        model,
        features,
        pad_token_id(tokenizer),
        batch_size,
        device,
        packed=padding_free,
        moves_out=move_scores if moves else None,
    )
    # The work's own time, apart from loading (spag.ops.calibration reads this line).
    log.info(
        "scoring took %.2f s for %d tokens of %d samples",
        time.perf_counter() - started,
        sum(len(f["input_ids"]) for f in features),
        len(features),
    )
    column: list[float | None] = [None] * table.num_rows
    move_column: list[float | None] = [None] * table.num_rows
    for i, (f, s) in enumerate(zip(features, scores, strict=True)):
        column[f["row"]] = s
        if moves:
            move_column[f["row"]] = move_scores[i]
    for name in ("ref_logprob", "ref_move_logprob"):
        if name in table.column_names:
            table = table.drop_columns([name])
    table = table.append_column("ref_logprob", pa.array(column, pa.float64()))
    if moves:
        table = table.append_column("ref_move_logprob", pa.array(move_column, pa.float64()))
    meta = dict(table.schema.metadata or {})
    meta.update(
        {
            META_IDENTITY: identity.encode(),
            META_PATH: str(Path(model_dir)).encode(),
            META_MAX_LENGTH: str(max_length).encode(),
            META_DTYPE: dtype.encode(),
            META_PROMPT_FORMAT: prompt_format.encode(),
            META_PACKED: str(padding_free).lower().encode(),
        }
    )
    table = table.replace_schema_metadata(meta)
    write_parquet(table, output)
    log.info(
        "scored %d of %d samples under %s (%s); %d skipped",
        len(features),
        table.num_rows,
        model_dir,
        identity[:19],
        report.total,
    )
    return table


def reference_metadata(table: pa.Table) -> dict[str, str]:
    """The scoring metadata of a scored table (empty dict when it has none)."""
    meta = table.schema.metadata or {}
    keys = {
        META_IDENTITY: "identity",
        META_PATH: "path",
        META_MAX_LENGTH: "max_length",
        META_DTYPE: "dtype",
        META_PROMPT_FORMAT: "prompt_format",
        META_PACKED: "padding_free",
    }
    return {name: meta[k].decode() for k, name in keys.items() if k in meta}


def check_reference(
    table: pa.Table,
    path: str | os.PathLike,
    ref_model_dir: str | os.PathLike,
    max_length: int,
    prompt_format: str,
) -> dict[str, str]:
    """Refuse scores made under another model, max_length or prompt format than training's."""
    meta = reference_metadata(table)
    if "identity" not in meta:
        raise SpagInputError(
            f"{path}: 'ref_logprob' carries no reference model identity; "
            "compute it with `spag score-ref`"
        )
    expected = model_identity(ref_model_dir)
    if meta["identity"] != expected:
        raise SpagInputError(
            f"{path}: 'ref_logprob' was computed under another model "
            f"({meta.get('path', '?')}, {meta['identity'][:19]}...) than the reference "
            f"{ref_model_dir} ({expected[:19]}...)"
        )
    if meta.get("max_length") not in (None, str(max_length)):
        raise SpagInputError(
            f"{path}: 'ref_logprob' was computed with max_length {meta['max_length']}, "
            f"training uses {max_length}"
        )
    # Files scored before the format was recorded were rendered raw.
    scored_format = meta.get("prompt_format", "raw")
    if scored_format != prompt_format:
        raise SpagInputError(
            f"{path}: 'ref_logprob' was computed with prompt format {scored_format}, "
            f"training uses {prompt_format}"
        )
    return meta
