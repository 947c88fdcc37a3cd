"""Launcher prefixes for distributed training jobs, and the resources of every rule family.

The training rule runs ``{prefix} spag train ...``. The prefix starts one process per
GPU with torchrun; on several nodes it starts one torchrun per node through ``srun``,
with a c10d rendezvous on the job's first node.

On SLURM a multi-node training job is submitted with the resources that
:func:`multinode_resources` returns: ``mpi`` tells the job-step plugin to run the rule's
shell command as it is on the first node (instead of wrapping it in a one-task
``srun``), so that the ``srun`` of the prefix can spread over all the nodes.

:func:`family_resources` shapes the Snakemake resources of every rule family (config
``resources.<family>``) so that snakemake-executor-plugin-slurm (2.8) submits:

- one node, G > 0 GPUs: ``--nodes=1 --gpus=G --cpus-per-task=C`` (no task geometry);
- N > 1 nodes, G GPUs each: ``--nodes=N --ntasks=N --gres=gpu:G --cpus-per-task=C``;
- no GPU: ``--ntasks=1 --cpus-per-task=C``;

plus ``--mem``/``-t`` that grow with the attempt up to a ceiling, and the family's
``-p``/``-A``/``-C``/``--qos`` and ``slurm_extra``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spag.settings import Checked, opt

RDZV_PORT = 29500
# Jobs that share a first node must not share a rendezvous port: the port is offset
# by the SLURM job id modulo this span.
RDZV_PORT_SPAN = 1000

# The multi-node command runs in the batch step, which SLURM starts on the first node
# of the allocation; the job-step plugin strips SLURM_JOB_NODELIST from the rule's
# environment, so the batch host's own name is the rendezvous host.
_HEAD_NODE = "$(hostname)"


@dataclass(frozen=True, kw_only=True)
class ResourceSettings(Checked):
    """What one rule family asks of its machines (config ``resources.<family>``)."""

    gpus: int = opt(
        0, "GPUs per node for the job; on one node SLURM gets --nodes=1 --gpus=<gpus>", ge=0
    )
    nodes: int = opt(
        1,
        "nodes (training only); on SLURM N > 1 asks --nodes=N --ntasks=N --gres=gpu:<gpus>, one "
        "torchrun per node",
        ge=1,
    )
    cpus: int = opt(1, "CPU threads of the job", ge=1)
    mem_mb: int = opt(
        4000,
        "MB per node at the first attempt (sbatch --mem); attempt k asks k x mem_mb, at most "
        "max_mem_mb",
        ge=100,
    )
    max_mem_mb: int | None = opt(
        None,
        "MB a retry may ask for at most (not below mem_mb); null: 2 x mem_mb. Keep it within "
        "the partition's node memory",
        ge=100,
    )
    runtime: int = opt(
        60,
        "minutes at the first attempt (sbatch -t); attempt k asks k x runtime, at most max_runtime",
        ge=1,
    )
    max_runtime: int | None = opt(
        None,
        "minutes a retry may ask for at most (not below runtime); null: 2 x runtime. Keep it "
        "within the partition's MaxTime",
        ge=1,
    )
    slurm_partition: str | None = opt(None, "sbatch -p; null: the profile's default-resources")
    slurm_account: str | None = opt(
        None, "sbatch -A; null: the profile's, else the plugin looks one up"
    )
    constraint: str | None = opt(
        None,
        'node features (sbatch -C), e.g. "a100" or "a100|h100"',
        schema={"minLength": 1},
    )
    qos: str | None = opt(None, "quality of service (sbatch --qos)", schema={"minLength": 1})
    slurm_extra: str | None = opt(
        None,
        'other sbatch flags, e.g. "--exclusive --mail-type=FAIL". The plugin refuses the flags '
        "it sets itself (--qos, --constraint, --partition, --account, --mem, --time, --nodes, "
        "--ntasks, --cpus-per-task, --gres, --gpus, ...): use the keys above",
    )


def _check_shape(gpus: int, nodes: int) -> None:
    if isinstance(nodes, bool) or isinstance(gpus, bool):
        raise ValueError(f"invalid launch shape: nodes={nodes!r}, gpus={gpus!r}")
    if not isinstance(nodes, int) or not isinstance(gpus, int) or nodes < 1 or gpus < 0:
        raise ValueError(f"invalid launch shape: nodes={nodes!r}, gpus={gpus!r}")


def rendezvous_port_expr(port: int = RDZV_PORT) -> str:
    """Shell arithmetic for the rendezvous port, evaluated inside the job."""
    # no spaces: the endpoint stays one shell word
    return f"$(({port}+${{SLURM_JOB_ID:-0}}%{RDZV_PORT_SPAN}))"


def threads_per_rank(cpus: int | None, procs: int) -> int | None:
    """CPU threads of each of ``procs`` ranks sharing a node's ``cpus`` (None: not set)."""
    return None if cpus is None else max(cpus // procs, 1)


def _omp(cpus: int | None, procs: int) -> str:
    # torchrun sets OMP_NUM_THREADS=1 for several processes per node: CPU Adam's OpenMP
    # loop (ZeRO offload) and the data path would then run on one core per rank.
    # `env` rather than a bare assignment: rule shells `exec` their prefix.
    n = threads_per_rank(cpus, procs)
    return "" if n is None else f"env OMP_NUM_THREADS={n} "


def srun_torchrun_prefix(
    gpus: int, nodes: int, cpus: int | None = None, port: int = RDZV_PORT
) -> str:
    """``srun`` + ``torchrun`` over ``nodes`` nodes, ``max(gpus, 1)`` processes per node.

    Every torchrun joins the c10d rendezvous on the first node, under the SLURM job id.
    The step asks for the node's ``cpus`` and ``gpus`` itself: the job-step plugin strips
    ``SLURM_*`` from the environment, and srun does not inherit ``--cpus-per-task``
    (Slurm >= 22.05), so without them every node's ranks would share one core.
    """
    _check_shape(gpus, nodes)
    procs = max(gpus, 1)
    step = f"--cpus-per-task {cpus} " if cpus else ""
    if gpus > 0:
        step += f"--gres=gpu:{gpus} "
    return (
        f"{_omp(cpus, procs)}srun --nodes {nodes} --ntasks {nodes} --ntasks-per-node 1 "
        f"{step}--kill-on-bad-exit=1 "
        f"torchrun --no-python --nnodes {nodes} --nproc_per_node {procs} "
        f'--rdzv_backend c10d --rdzv_id "${{SLURM_JOB_ID:-0}}" '
        f"--rdzv_endpoint {_HEAD_NODE}:{rendezvous_port_expr(port)}"
    )


def torchrun_prefix(
    gpus: int, nodes: int = 1, cpus: int | None = None, port: int = RDZV_PORT
) -> str:
    """Return the command prefix that launches ``spag train`` on ``nodes`` x ``gpus``.

    Zero GPUs (CPU runs) and one GPU on one node run a single plain process; several
    GPUs on one node run ``torchrun --standalone`` with one process per GPU. With
    ``cpus`` (the family's CPUs per node), each rank gets ``OMP_NUM_THREADS`` = its share.
    """
    _check_shape(gpus, nodes)
    procs = max(gpus, 1)
    if nodes == 1:
        if procs == 1:
            return ""
        # The GPUs leased first where no scheduler chose them (spag.ops.gpu_lease).
        return (
            f"{_omp(cpus, procs)}spag gpu-lease {procs} "
            f"torchrun --no-python --standalone --nproc_per_node {procs}"
        )
    return srun_torchrun_prefix(gpus, nodes, cpus, port)


def multinode_resources(gpus: int, nodes: int) -> dict[str, object]:
    """Extra Snakemake resources of a training job spread over ``nodes`` > 1 nodes.

    ``gres`` asks for ``gpus`` per node (``gpu=N`` would be N for the whole job);
    ``tasks`` = one task per node for the ``srun`` of :func:`srun_torchrun_prefix`;
    ``tasks_per_gpu`` = 0 keeps the plugin from turning ``tasks`` into
    ``--ntasks-per-gpu`` (N tasks per GPU, N x G tasks per node, would contradict one
    task per node); ``mpi`` makes the job-step plugin run the command unwrapped on the
    first node. Empty on one node.
    """
    _check_shape(gpus, nodes)
    if nodes == 1:
        return {}
    res: dict[str, object] = {"nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun"}
    if gpus > 0:
        res["gres"] = f"gpu:{gpus}"
    return res


# Without a configured ceiling, a retry may ask for at most this many times the first
# attempt's memory or run time: with the profile's `retries: 2`, attempts get 1x, 2x,
# 2x. Unbounded growth (3x a 48 h job) asks for more than partitions allow, and the
# job then pends forever instead of failing.
DEFAULT_GROWTH_CAP = 2


def ceiling(base: int, cap: int | None, where: str = "resource") -> int:
    """The most a retry may ask for: ``cap``, or ``DEFAULT_GROWTH_CAP`` x ``base``."""
    if cap is None:
        return base * DEFAULT_GROWTH_CAP
    if cap < base:
        # a ceiling under the first attempt would silently shrink every job
        raise ValueError(f"{where}: ceiling {cap} is below the first attempt's {base}")
    return cap


def grown(base: int, attempt: int, cap: int | None = None) -> int:
    """``base`` x ``attempt`` (attempt 1 is the first submission), at most the ceiling."""
    return min(base * max(attempt, 1), ceiling(base, cap))


def growing(base: int, cap: int | None, where: str = "resource") -> Callable[[Any, int], int]:
    """A Snakemake resource callable ``(wildcards, attempt) -> grown value``."""
    top = ceiling(base, cap, where)  # checked when the rules are parsed, not at a retry
    return lambda wildcards, attempt: grown(base, attempt, top)


# Family keys passed to the plugin as resources of the same name, when set.
_PASSED_THROUGH = ("slurm_partition", "slurm_account", "constraint", "qos", "slurm_extra")


# Config keys that replace options the plugin refuses in slurm_extra.
_INSTEAD = {
    "quality of service": "qos",
    "node constraints": "constraint",
    "partition": "slurm_partition",
    "account": "slurm_account",
    "memory": "mem_mb",
    "runtime/time limit": "runtime",
    "number of nodes": "nodes",
    "generic resources (GRES)": "gpus",
    "GPU allocation": "gpus",
    "CPUs per task": "cpus",
}


def check_slurm_extra(extra: str, where: str = "slurm_extra") -> None:
    """Refuse, when the rules are parsed, what the SLURM plugin would refuse at submission.

    Uses the plugin's own list of the sbatch options it manages; without the plugin
    installed there is nothing to check against (and no SLURM submission either).
    """
    try:
        from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options
    except ImportError:
        return
    family = where.rpartition(".")[0]
    for pattern, option in get_forbidden_slurm_options().items():
        if re.search(pattern, extra):
            key = _INSTEAD.get(option)
            hint = f"; set it with {family}.{key}" if key and family else ""
            raise ValueError(
                f"{where}: {extra!r} sets the {option}, which snakemake-executor-plugin-slurm"
                f" sets itself and refuses in slurm_extra{hint}"
            )


def family_resources(r: Mapping[str, Any], where: str = "resources") -> dict[str, object]:
    """Snakemake resources of one rule family from its config ``resources.<family>``.

    The same resources serve local runs (``mem_mb``, ``runtime``, ``gpu`` limits) and
    SLURM submission; the module docstring shows the sbatch request each shape becomes.
    """
    res: dict[str, object] = {
        "mem_mb": growing(r["mem_mb"], r.get("max_mem_mb"), f"{where}.max_mem_mb"),
        "runtime": growing(r["runtime"], r.get("max_runtime"), f"{where}.max_runtime"),
        # The SLURM plugin takes CPUs from here; `threads` alone is capped by the
        # workflow profile's `cores`, which a cluster profile cannot override.
        "cpus_per_task": r["cpus"],
    }
    gpus, nodes = r["gpus"], r["nodes"]
    if nodes > 1:
        # GPUs per node as gres, one srun task per node.
        res.update(multinode_resources(gpus, nodes))
    elif gpus > 0:
        # `--gpus` alone may be spread over several nodes, while the job runs on the
        # first only; `nodes` pins the job (and its step) to one node.
        res.update(nodes=1, gpu=gpus)
    for key in _PASSED_THROUGH:
        if r.get(key):
            res[key] = r[key]
    if r.get("slurm_extra"):
        check_slurm_extra(r["slurm_extra"], f"{where}.slurm_extra")
    return res
