"""Launcher prefixes for distributed training jobs.

The training rule runs ``{prefix} spag train ...``; the prefix starts one process per
GPU with torchrun, and on several nodes one torchrun per node through ``srun`` with a
rendezvous on the job's first node.
"""

from __future__ import annotations

RDZV_PORT = 29500


def torchrun_prefix(gpus: int, nodes: int = 1, port: int = RDZV_PORT) -> str:
    """Return the command prefix that launches ``spag train`` on ``nodes`` x ``gpus``.

    Zero GPUs (CPU runs) and one GPU on one node run a single plain process.
    """
    if nodes < 1 or gpus < 0:
        raise ValueError(f"invalid launch shape: nodes={nodes}, gpus={gpus}")
    procs = max(gpus, 1)
    if nodes == 1:
        if procs == 1:
            return ""
        return f"torchrun --no-python --standalone --nproc_per_node {procs}"
    # $SLURM_* are expanded by the job's shell, inside the allocation.
    head = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    return (
        f"srun --nodes {nodes} --ntasks-per-node 1 --kill-on-bad-exit=1 "
        f"torchrun --no-python --nnodes {nodes} --nproc_per_node {procs} "
        f'--rdzv_backend c10d --rdzv_id "$SLURM_JOB_ID" --rdzv_endpoint {head}:{port}'
    )
