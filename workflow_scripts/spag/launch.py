"""Launcher prefixes for distributed training jobs.

The training rule runs ``{prefix} spag train ...``. The prefix starts one process per
GPU with torchrun; on several nodes it starts one torchrun per node through ``srun``,
with a c10d rendezvous on the job's first node.

On SLURM a multi-node training job is submitted with the resources that
:func:`multinode_resources` returns: ``mpi`` tells the job-step plugin to run the rule's
shell command as it is on the first node (instead of wrapping it in a one-task
``srun``), so that the ``srun`` of the prefix can spread over all the nodes.
"""

from __future__ import annotations

RDZV_PORT = 29500
# Jobs that share a first node must not share a rendezvous port: the port is offset
# by the SLURM job id modulo this span.
RDZV_PORT_SPAN = 1000

# The multi-node command runs in the batch step, which SLURM starts on the first node
# of the allocation; the job-step plugin strips SLURM_JOB_NODELIST from the rule's
# environment, so the batch host's own name is the rendezvous host.
_HEAD_NODE = "$(hostname)"


def _check_shape(gpus: int, nodes: int) -> None:
    if isinstance(nodes, bool) or isinstance(gpus, bool):
        raise ValueError(f"invalid launch shape: nodes={nodes!r}, gpus={gpus!r}")
    if not isinstance(nodes, int) or not isinstance(gpus, int) or nodes < 1 or gpus < 0:
        raise ValueError(f"invalid launch shape: nodes={nodes!r}, gpus={gpus!r}")


def rendezvous_port_expr(port: int = RDZV_PORT) -> str:
    """Shell arithmetic for the rendezvous port, evaluated inside the job."""
    # no spaces: the endpoint stays one shell word
    return f"$(({port}+${{SLURM_JOB_ID:-0}}%{RDZV_PORT_SPAN}))"


def srun_torchrun_prefix(gpus: int, nodes: int, port: int = RDZV_PORT) -> str:
    """``srun`` + ``torchrun`` over ``nodes`` nodes, ``max(gpus, 1)`` processes per node.

    Every torchrun joins the c10d rendezvous on the first node, under the SLURM job id.
    """
    _check_shape(gpus, nodes)
    procs = max(gpus, 1)
    return (
        f"srun --nodes {nodes} --ntasks {nodes} --ntasks-per-node 1 --kill-on-bad-exit=1 "
        f"torchrun --no-python --nnodes {nodes} --nproc_per_node {procs} "
        f'--rdzv_backend c10d --rdzv_id "${{SLURM_JOB_ID:-0}}" '
        f"--rdzv_endpoint {_HEAD_NODE}:{rendezvous_port_expr(port)}"
    )


def torchrun_prefix(gpus: int, nodes: int = 1, port: int = RDZV_PORT) -> str:
    """Return the command prefix that launches ``spag train`` on ``nodes`` x ``gpus``.

    Zero GPUs (CPU runs) and one GPU on one node run a single plain process; several
    GPUs on one node run ``torchrun --standalone`` with one process per GPU.
    """
    _check_shape(gpus, nodes)
    procs = max(gpus, 1)
    if nodes == 1:
        if procs == 1:
            return ""
        return f"torchrun --no-python --standalone --nproc_per_node {procs}"
    return srun_torchrun_prefix(gpus, nodes, port)


def multinode_resources(gpus: int, nodes: int) -> dict[str, object]:
    """Extra Snakemake resources of a training job spread over ``nodes`` > 1 nodes.

    ``gres`` asks for ``gpus`` per node (``gpu=N`` would be N for the whole job);
    ``tasks`` = one task per node for the ``srun`` of :func:`srun_torchrun_prefix`;
    ``mpi`` makes the job-step plugin run the command unwrapped on the first node.
    Empty on one node.
    """
    _check_shape(gpus, nodes)
    if nodes == 1:
        return {}
    res: dict[str, object] = {"nodes": nodes, "tasks": nodes, "mpi": "srun"}
    if gpus > 0:
        res["gres"] = f"gpu:{gpus}"
    return res
