"""The trained model folder: written under a temporary name, tokenizer copied, then renamed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from spag.training.checkpoints import DAMAGED_PREFIX
from spag.training.distributed import barrier
from spag.training.lora import ADAPTER_DIR, write_merged
from spag.training.settings import TrainConfig

log = logging.getLogger(__name__)

# Files of a model folder that make up its tokenizer; copied as they are to the output.
TOKENIZER_GLOBS = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "*.tiktoken",
    "chat_template.*",
)


def copy_tokenizer_files(src: str | os.PathLike, dst: str | os.PathLike) -> list[str]:
    """Copy the init model's tokenizer (and generation config) files unchanged."""
    copied = []
    for pattern in (*TOKENIZER_GLOBS, "generation_config.json"):
        for p in Path(src).glob(pattern):
            if p.is_file():
                shutil.copy2(p, Path(dst) / p.name)
                copied.append(p.name)
    return sorted(copied)


def save_final(
    trainer, cfg: TrainConfig, work_log: Path, is_main: bool, weights_dtype: str
) -> None:
    """Write the model folder and the loss log under temporary names, then rename them.

    With an adapter (``cfg.peft``) the folder is the full model, the adapter merged into
    ``cfg.model``'s weights and written in ``weights_dtype`` as full fine-tuning writes
    them (or in ``peft.merged_dtype``), and the adapter itself in its ``adapter/``."""
    from spag.data.tables import atomic_path, write_manifest

    final = Path(cfg.output)
    tmp = final.parent / f".{final.name}.partial"
    if is_main:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    barrier()
    # Training turned the KV cache off; the saved model generates, so turn it back on.
    trainer.model.config.use_cache = True
    # Every rank takes part (ZeRO-3 gathers the 16-bit weights); the main one writes.
    trainer.save_model(str(tmp if cfg.peft is None else tmp / ADAPTER_DIR))
    barrier()
    if is_main:
        lost = None
        if cfg.peft is not None:
            stored = cfg.peft.merged_dtype or weights_dtype
            lost = write_merged(cfg.model, tmp / ADAPTER_DIR, tmp, stored, cfg.trust_remote_code)
        copy_tokenizer_files(cfg.model, tmp)
        info = {
            k: v
            for k, v in asdict(cfg).items()
            if k not in ("output", "checkpoint_dir", "loss_log")
        }
        info["global_step"] = trainer.state.global_step
        if cfg.peft is not None:
            # The share of the adapter's update the stored weights' rounding lost.
            info["merge_update_rounding"] = lost
        (tmp / "spag_training.json").write_text(json.dumps(info, indent=2) + "\n")
        for stray in ("training_args.bin",):
            with contextlib.suppress(FileNotFoundError):
                (tmp / stray).unlink()
        # Some writers create private files; a model folder is shared like any output.
        tmp.chmod(0o755)
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        write_manifest(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        with atomic_path(cfg.loss_log, suffix=".tsv.tmp") as t:
            if work_log.exists():
                shutil.copyfile(work_log, t)
            else:
                t.write_text("")
        if not cfg.keep_checkpoints:
            root = Path(cfg.checkpoint_dir)
            for p in [*root.glob("checkpoint-*"), *root.glob(f"{DAMAGED_PREFIX}checkpoint-*")]:
                shutil.rmtree(p, ignore_errors=True)
        log.info("wrote %s and %s", final, cfg.loss_log)
    barrier()
