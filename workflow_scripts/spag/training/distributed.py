"""Process set-up shared by every rank: DeepSpeed configs, a one-rank world, barriers."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from spag.errors import SpagInputError

DEEPSPEED_DIR = Path(__file__).resolve().parents[1] / "deepspeed"


def resolve_deepspeed(name: str | None) -> str | None:
    """A shipped config's name, a JSON path, or None for ``none``.

    Shipped: ``zero3_offload`` and ``zero3`` (under bf16, gradients are accumulated and
    averaged in bf16, as the research code did), and ``zero3_fp32_grads`` and
    ``zero3_offload_fp32_grads`` (the same with ``data_types.grad_accum_dtype: fp32``:
    ZeRO-3 then accumulates and averages the gradient partitions in fp32).
    """
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


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# Whether this process ran a process group (set by ``end_distributed``).
_GROUP_ENDED = False


def end_distributed() -> None:
    """Destroy the process group at the end of a step: NCCL warns on every rank at exit
    when a group is left (and its communicators leak until then)."""
    global _GROUP_ENDED
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        _GROUP_ENDED = True


def group_ended() -> bool:
    """Whether this process ran a process group and ended it (``end_distributed``).

    Its backends' threads outlive the group (DeepSpeed and the Trainer still hold it)
    and are torn down with the interpreter: gloo's, in an order that can abort a rank
    (``terminate called without an active exception``) after its output is written, which
    would fail the finished job and have Snakemake delete that output. Such a process
    exits without the native teardown (``spag.cli.run``)."""
    return _GROUP_ENDED


def weights_dtype(bf16: bool, deepspeed: str | None, adapter: bool = False) -> str | None:
    """The dtype of the weights a training step runs: bfloat16 under DeepSpeed (its
    engine keeps float32 master weights) or under an adapter (a frozen base needs no
    master weights; peft keeps the adapter in float32 and the Trainer's autocast runs it
    in bfloat16); alone, the Trainer keeps float32 weights and runs them under bfloat16
    autocast with ``bf16`` (None: a mixed forward)."""
    if not bf16:
        return "float32"
    return "bfloat16" if deepspeed or adapter else None
