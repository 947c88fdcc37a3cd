"""One training run: read scored samples, set up the HF Trainer (DeepSpeed optional),
resume (``spag.training.checkpoints``), train, write the model (``spag.training.output``).

Launched directly (one process) or under ``torchrun`` (one process per GPU, also
multi-node); every rank runs this same code.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spag.errors import SpagInputError
from spag.ops import (
    apply_environment,
    check_trackers_available,
    folder_name,
    guard_tracker_callbacks,
    parse_report_to,
    select_device,
    tracker_environment,
)
from spag.training.checkpoints import WORK_LOSS_LOG, prepare_checkpoint_dir, run_fingerprint
from spag.training.distributed import (
    end_distributed,
    ensure_distributed_env,
    resolve_deepspeed,
    weights_dtype,
)
from spag.training.extensions import build_ops, needed_ops
from spag.training.output import save_final
from spag.training.settings import TrainConfig

if TYPE_CHECKING:
    from spag.training.arguments import SpagTrainingArguments

log = logging.getLogger(__name__)


def training_arguments(
    cfg: TrainConfig, deepspeed_config: str | None, device: str
) -> SpagTrainingArguments:
    """The Trainer's arguments of ``cfg``, set up for this machine: ``device`` is the one
    :func:`spag.ops.device.select_device` chose, ``deepspeed_config`` the resolved file."""
    from spag.training.arguments import SpagTrainingArguments

    trackers = parse_report_to(cfg.report_to)
    project = cfg.project or folder_name()
    run_name = cfg.run_name or project
    if trackers:
        check_trackers_available(trackers, where="--report-to")
        apply_environment(
            tracker_environment(trackers, cfg.tracking_dir, project, run_name, cfg.stage)
        )

    on_cuda = device == "cuda"
    tf32 = cfg.tf32 and on_cuda
    if cfg.tf32 and not tf32:
        log.warning("--tf32 ignored: no CUDA device")
    setup: dict = {}
    if deepspeed_config is not None and not on_cuda:
        # Without CUDA, accelerate would set DeepSpeed up with no backend and count one
        # process whatever the world size; a state configured here with gloo counts right.
        from accelerate import PartialState

        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        try:
            PartialState(backend="gloo")
        finally:
            del os.environ["ACCELERATE_USE_DEEPSPEED"]
        setup["accelerator_config"] = {"use_configured_state": True}
    return SpagTrainingArguments.from_settings(
        cfg,
        **setup,
        deepspeed=deepspeed_config,
        tf32=tf32 or None,  # None: leave the backends' setting alone
        report_to=trackers or "none",
        run_name=f"{run_name}-{cfg.stage}",
        project=project,
        # use_cpu would bypass the DeepSpeed set-up; DeepSpeed picks its CPU accelerator itself.
        use_cpu=not on_cuda and deepspeed_config is None,
    )


def peak_memory_gib(device: str) -> float:
    """This rank's peak memory so far: CUDA's allocator on a GPU, else the process's
    largest resident size."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def train(cfg: TrainConfig) -> Path:
    """Run training as configured; return the output model folder."""
    from spag.generation.base import check_model_dir

    for folder in {cfg.model, cfg.ref_model or cfg.model}:
        check_model_dir(folder)
    ref_dir = cfg.ref_model or cfg.model
    # Before anything is loaded: a GPU job without working CUDA stops here.
    device = select_device(cfg.device, "spag train")
    deepspeed_config = resolve_deepspeed(cfg.deepspeed)
    if deepspeed_config is not None:
        if device == "cpu":
            # DeepSpeed would pick CUDA by itself where it works.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        ensure_distributed_env()
        # DeepSpeed's ops (CPU Adam, the CPU's collectives) compiled, or loaded, in the
        # node's own folder before the engine asks for them (spag.training.extensions).
        build_ops(needed_ops(deepspeed_config), setting=f"--deepspeed {cfg.deepspeed}")

    from spag.data.tables import read_parquet
    from spag.training.collate import build_features, check_sample_table
    from spag.training.scoring import check_reference, model_identity

    table = check_sample_table(read_parquet(cfg.samples, "samples"), cfg.samples, need_ref=True)
    ref_meta = check_reference(table, cfg.samples, ref_dir, cfg.max_length, cfg.prompt_format)

    # The arguments come before the model: with ZeRO-3 they make from_pretrained
    # partition the weights as they load.
    args = training_arguments(cfg, deepspeed_config, device)
    is_main = args.process_index == 0
    fingerprint = run_fingerprint(cfg, model_identity(cfg.model), args.world_size)
    resume = prepare_checkpoint_dir(cfg, fingerprint, is_main)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.training.collate import SampleCollator, SampleDataset, pad_token_id
    from spag.training.head import use_chunked_head
    from spag.training.packing import PackedCollator, use_packed_attention
    from spag.training.trainer import LossLogCallback, SpagTrainer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
    adapter = cfg.peft is not None
    load_dtype = getattr(torch, weights_dtype(cfg.bf16, deepspeed_config, adapter) or "float32")
    model = AutoModelForCausalLM.from_pretrained(
        cfg.model,
        dtype=load_dtype,
        use_safetensors=True,
        trust_remote_code=cfg.trust_remote_code,
    )
    model.config.use_cache = False
    padding_free = cfg.padding_free
    if padding_free and args.n_gpu > 1:
        # torch.nn.DataParallel (several GPUs, one process) splits every tensor along
        # its first dimension: a packed row cannot be split that way.
        log.warning(
            "padding_free: off (%d GPUs in one process: DataParallel splits batches by "
            "row; launch one process per GPU with torchrun to train padding-free)",
            args.n_gpu,
        )
        padding_free = False
    from spag.training.objectives import OBJECTIVES

    needs_moves = OBJECTIVES[cfg.objective].needs_moves
    if needs_moves and not padding_free:
        raise SpagInputError(
            f"--objective {cfg.objective} reads the legal moves on packed rows: it needs "
            "padding_free (and one process per GPU)"
        )
    if padding_free:
        use_packed_attention(model)
    # The vocabulary projection a chunk of learned positions at a time, as scoring's.
    use_chunked_head(model)
    if cfg.peft is not None:
        from transformers import set_seed

        from spag.training.lora import add_adapter

        # The adapter's A matrices are drawn at random here, before the Trainer seeds:
        # seeded, a rerun of the stage trains the same adapter.
        set_seed(args.seed)
        model = add_adapter(model, cfg.peft, setting="--peft")
    scored_packed = ref_meta.get("padding_free", "false") == "true"
    if scored_packed != padding_free:
        # Another attention path than scoring's: the step-0 ratio is 1 only up to the
        # difference of the two kernels, not up to the dtype's rounding.
        log.warning(
            "%s was scored %s, training runs %s: score it with the same padding_free",
            cfg.samples,
            "packed" if scored_packed else "padded",
            "packed" if padding_free else "padded",
        )
    features, _report = build_features(
        table,
        tokenizer,
        cfg.max_length,
        cfg.samples,
        with_ref=True,
        prompt_format=cfg.prompt_format,
        moves=needs_moves,
    )
    dataset = SampleDataset(features)
    work_log = Path(cfg.checkpoint_dir) / WORK_LOSS_LOG
    trainer = SpagTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=PackedCollator() if padding_free else SampleCollator(pad_token_id(tokenizer)),
        callbacks=[LossLogCallback(work_log)],
        lengths=dataset.lengths,
    )
    guard_tracker_callbacks(trainer, parse_report_to(cfg.report_to))
    if resume is not None:
        log.info("resuming from %s", resume)
    else:
        log.info("starting from step 0 (no complete checkpoint in %s)", cfg.checkpoint_dir)
    log.info(
        "training %s on %d samples (%d game, %d sft), %d rank(s)",
        cfg.objective,
        len(features),
        sum(not f["is_sft"] for f in features),
        sum(f["is_sft"] for f in features),
        args.world_size,
    )
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    # The steps' own time and memory, apart from loading and saving (spag.ops.calibration
    # reads this line).
    log.info(
        "trained %d steps in %.2f s: %d tokens, peak memory %.2f GiB",
        trainer.state.global_step,
        time.perf_counter() - started,
        trainer.tokens_trained,
        peak_memory_gib(device),
    )
    save_final(trainer, cfg, work_log, is_main, str(load_dtype).removeprefix("torch."))
    end_distributed()
    return Path(cfg.output)
