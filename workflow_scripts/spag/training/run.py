"""One training run: read scored samples, train with the HF Trainer (DeepSpeed optional),
resume from the newest complete checkpoint, write the final model folder atomically.

Launched directly (one process) or under ``torchrun`` (one process per GPU, also
multi-node); every rank runs this same code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from spag.errors import SpagInputError
from spag.tables import sha256_file

log = logging.getLogger(__name__)

DEFAULT_KL = {"sft_kl": 0.1, "offline_po": 0.2}
DEFAULT_LR = {"sft_kl": 5e-6, "offline_po": 2e-6}
DEEPSPEED_DIR = Path(__file__).resolve().parents[1] / "deepspeed"
WORK_LOSS_LOG = "loss_log.tsv"
RUN_FILE = "spag_run.json"
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


@dataclass
class TrainConfig:
    method: str
    model: str
    samples: str
    output: str
    checkpoint_dir: str
    loss_log: str
    ref_model: str | None = None
    kl_coeff: float | None = None
    sft_coeff: float = 0.5
    clip_eps: float = 0.2
    learning_rate: float | None = None
    num_train_epochs: float = 1.0
    max_steps: int = -1
    per_device_batch_size: int = 2
    gradient_accumulation_steps: int = 8
    max_length: int = 2048
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    bf16: bool = False
    tf32: bool = False
    gradient_checkpointing: bool = False
    deepspeed: str | None = None
    save_steps: int = 200
    save_total_limit: int = 2
    logging_steps: int = 1
    seed: int = 42
    group_by_length: bool = True
    prompt_format: str = "raw"
    trust_remote_code: bool = False
    keep_checkpoints: bool = False


def resolve_deepspeed(name: str | None) -> str | None:
    """``zero3_offload`` / ``zero3`` (shipped configs), a JSON path, or None for ``none``."""
    if name in (None, "", "none"):
        return None
    shipped = DEEPSPEED_DIR / f"{name}.json"
    if shipped.is_file():
        return str(shipped)
    p = Path(name)
    if p.is_file():
        try:
            json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise SpagInputError(f"--deepspeed {p}: not valid JSON: {exc}") from exc
        return str(p)
    names = ", ".join(sorted(q.stem for q in DEEPSPEED_DIR.glob("*.json")))
    raise SpagInputError(
        f"--deepspeed {name!r}: neither a shipped config ({names}, none) nor a file"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_distributed_env() -> None:
    """DeepSpeed needs a process group even for one process: fill in a one-rank world."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def run_fingerprint(cfg: TrainConfig, model_identity: str, world_size: int) -> dict:
    """What a checkpoint must share with this run to be resumed from."""
    keep = asdict(cfg)
    for k in (
        "output",
        "checkpoint_dir",
        "loss_log",
        "keep_checkpoints",
        "save_steps",
        "save_total_limit",
        "logging_steps",
        "samples",
        "model",
        "ref_model",
    ):
        keep.pop(k)
    keep.update(
        model_identity=model_identity,
        samples_sha256=sha256_file(cfg.samples),
        world_size=world_size,
    )
    return keep


def complete_checkpoints(checkpoint_dir: str | os.PathLike) -> list[Path]:
    """Checkpoints that were written to the end, oldest first."""
    from spag.training.trainer import COMPLETE_MARKER

    root = Path(checkpoint_dir)
    found = []
    for p in root.glob("checkpoint-*"):
        step = p.name.split("-", 1)[1]
        if (
            step.isdigit()
            and (p / COMPLETE_MARKER).is_file()
            and (p / "trainer_state.json").is_file()
        ):
            found.append((int(step), p))
    return [p for _, p in sorted(found)]


def prepare_checkpoint_dir(cfg: TrainConfig, fingerprint: dict, is_main: bool) -> Path | None:
    """Return the checkpoint to resume from, discarding checkpoints of a different run."""
    from spag.training.trainer import truncate_loss_log

    root = Path(cfg.checkpoint_dir)
    run_file = root / RUN_FILE
    if is_main:
        root.mkdir(parents=True, exist_ok=True)
        old = json.loads(run_file.read_text()) if run_file.is_file() else None
        if old != fingerprint:
            stale = sorted(root.glob("checkpoint-*"))
            if stale or old is not None:
                log.warning(
                    "%s: checkpoints belong to another run (inputs or settings changed); "
                    "removing %d of them and starting from step 0",
                    root,
                    len(stale),
                )
            for p in stale:
                shutil.rmtree(p, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (root / WORK_LOSS_LOG).unlink()
            run_file.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    _barrier()
    done = complete_checkpoints(root)
    resume = done[-1] if done else None
    if is_main:
        if resume is None:
            with contextlib.suppress(FileNotFoundError):
                (root / WORK_LOSS_LOG).unlink()
        else:
            state = json.loads((resume / "trainer_state.json").read_text())
            truncate_loss_log(root / WORK_LOSS_LOG, int(state["global_step"]))
    _barrier()
    return resume


def copy_tokenizer_files(src: str | os.PathLike, dst: str | os.PathLike) -> list[str]:
    """Copy the init model's tokenizer (and generation config) files unchanged."""
    copied = []
    for pattern in (*TOKENIZER_GLOBS, "generation_config.json"):
        for p in Path(src).glob(pattern):
            if p.is_file():
                shutil.copy2(p, Path(dst) / p.name)
                copied.append(p.name)
    return sorted(copied)


def training_arguments(cfg: TrainConfig, deepspeed_config: str | None):
    import torch
    from transformers import TrainingArguments

    tf32 = cfg.tf32 and torch.cuda.is_available()
    if cfg.tf32 and not tf32:
        log.warning("--tf32 ignored: no CUDA device")
    warmup = cfg.warmup_ratio
    if not 0.0 <= warmup < 1.0:
        raise SpagInputError(f"--warmup-ratio must be in [0, 1), got {warmup}")
    extra = {}
    if deepspeed_config is not None and not torch.cuda.is_available():
        # Without CUDA, accelerate would set DeepSpeed up with no backend and count one
        # process whatever the world size; a state configured here with gloo counts right.
        from accelerate import PartialState

        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        try:
            PartialState(backend="gloo")
        finally:
            del os.environ["ACCELERATE_USE_DEEPSPEED"]
        extra["accelerator_config"] = {"use_configured_state": True}
    return TrainingArguments(
        **extra,
        output_dir=cfg.checkpoint_dir,
        per_device_train_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=warmup,  # a value below 1 is a ratio of the total steps
        weight_decay=cfg.weight_decay,
        bf16=cfg.bf16,
        tf32=tf32 or None,
        activation_checkpointing=cfg.gradient_checkpointing,
        activation_checkpointing_kwargs=(
            {"use_reentrant": False} if cfg.gradient_checkpointing else None
        ),
        deepspeed=deepspeed_config,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_strategy="steps",
        logging_steps=cfg.logging_steps,
        eval_strategy="no",
        seed=cfg.seed,
        remove_unused_columns=False,
        report_to="none",
        disable_tqdm=True,
        dataloader_drop_last=False,
        # use_cpu would bypass the DeepSpeed set-up; DeepSpeed picks its CPU accelerator itself.
        use_cpu=not torch.cuda.is_available() and deepspeed_config is None,
    )


def train(cfg: TrainConfig) -> Path:
    """Run training as configured; return the output model folder."""
    if cfg.method not in DEFAULT_KL:
        raise SpagInputError(f"--method must be one of {', '.join(DEFAULT_KL)}, got {cfg.method!r}")
    if cfg.kl_coeff is None:
        cfg.kl_coeff = DEFAULT_KL[cfg.method]
    if cfg.learning_rate is None:
        cfg.learning_rate = DEFAULT_LR[cfg.method]
    for name in (
        "per_device_batch_size",
        "gradient_accumulation_steps",
        "save_steps",
        "logging_steps",
    ):
        if getattr(cfg, name) < 1:
            raise SpagInputError(f"--{name.replace('_', '-')} must be positive")
    if not (Path(cfg.model) / "config.json").is_file():
        raise SpagInputError(f"--model {cfg.model}: not a model folder (no config.json)")
    ref_dir = cfg.ref_model or cfg.model
    deepspeed_config = resolve_deepspeed(cfg.deepspeed)
    if deepspeed_config is not None:
        ensure_distributed_env()

    from spag.tables import read_parquet
    from spag.training.collate import build_features, check_sample_table
    from spag.training.scoring import check_reference, model_identity

    table = check_sample_table(read_parquet(cfg.samples, "samples"), cfg.samples, need_ref=True)
    check_reference(table, cfg.samples, ref_dir, cfg.max_length, cfg.prompt_format)

    # The arguments come before the model: with ZeRO-3 they make from_pretrained
    # partition the weights as they load.
    args = training_arguments(cfg, deepspeed_config)
    is_main = args.process_index == 0
    fingerprint = run_fingerprint(cfg, model_identity(cfg.model), args.world_size)
    resume = prepare_checkpoint_dir(cfg, fingerprint, is_main)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.training.collate import SampleCollator, SampleDataset, pad_token_id
    from spag.training.trainer import LossLogCallback, SpagTrainer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
    load_dtype = torch.bfloat16 if (cfg.bf16 and deepspeed_config) else torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        cfg.model,
        dtype=load_dtype,
        use_safetensors=True,
        trust_remote_code=cfg.trust_remote_code,
    )
    model.config.use_cache = False
    features, _report = build_features(
        table,
        tokenizer,
        cfg.max_length,
        cfg.samples,
        with_ref=True,
        prompt_format=cfg.prompt_format,
    )
    dataset = SampleDataset(features)
    work_log = Path(cfg.checkpoint_dir) / WORK_LOSS_LOG
    trainer = SpagTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=SampleCollator(pad_token_id(tokenizer)),
        callbacks=[LossLogCallback(work_log)],
        method=cfg.method,
        kl_coeff=cfg.kl_coeff,
        sft_coeff=cfg.sft_coeff,
        clip_eps=cfg.clip_eps,
        group_by_length=cfg.group_by_length,
        lengths=dataset.lengths,
    )
    if resume is not None:
        log.info("resuming from %s", resume)
    else:
        log.info("starting from step 0 (no complete checkpoint in %s)", cfg.checkpoint_dir)
    log.info(
        "training %s on %d samples (%d game, %d sft), %d rank(s)",
        cfg.method,
        len(features),
        sum(not f["is_sft"] for f in features),
        sum(f["is_sft"] for f in features),
        args.world_size,
    )
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    save_final(trainer, cfg, work_log, is_main)
    return Path(cfg.output)


def save_final(trainer, cfg: TrainConfig, work_log: Path, is_main: bool) -> None:
    """Write the model folder and the loss log under temporary names, then rename them."""
    from spag.tables import atomic_path

    final = Path(cfg.output)
    tmp = final.parent / f".{final.name}.partial"
    if is_main:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    # Training turned the KV cache off; the saved model generates, so turn it back on.
    trainer.model.config.use_cache = True
    # Every rank takes part (ZeRO-3 gathers the 16-bit weights); the main one writes.
    trainer.save_model(str(tmp))
    _barrier()
    if is_main:
        copy_tokenizer_files(cfg.model, tmp)
        info = {
            k: v
            for k, v in asdict(cfg).items()
            if k not in ("output", "checkpoint_dir", "loss_log")
        }
        info["global_step"] = trainer.state.global_step
        (tmp / "spag_training.json").write_text(json.dumps(info, indent=2) + "\n")
        for stray in ("training_args.bin",):
            with contextlib.suppress(FileNotFoundError):
                (tmp / stray).unlink()
        # Some writers create private files; a model folder is shared like any output.
        tmp.chmod(0o755)
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        with atomic_path(cfg.loss_log, suffix=".tsv.tmp") as t:
            if work_log.exists():
                shutil.copyfile(work_log, t)
            else:
                t.write_text("")
        if not cfg.keep_checkpoints:
            for p in Path(cfg.checkpoint_dir).glob("checkpoint-*"):
                shutil.rmtree(p, ignore_errors=True)
        log.info("wrote %s and %s", final, cfg.loss_log)
    _barrier()
