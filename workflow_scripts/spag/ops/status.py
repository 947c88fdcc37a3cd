"""Where a run stands, read from its files (and SLURM's queue where there is one).

Run from the workflow folder, also on a login node while jobs run: epochs done,
self-play shards done / running / failed per epoch, the last training step and
loss of each stage under way, the latest evaluation rates, and the SLURM jobs of
the run's rules. Nothing is written.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.ops.journal import journal_path

# The SLURM executor's job comment: rule_<rule>_wildcards_<values joined by _>.
_COMMENT = re.compile(r"^rule_(?P<rule>[A-Za-z0-9_]+?)(?:_wildcards_(?P<wildcards>.*))?$")


@dataclass
class EpochStatus:
    epoch: int
    shards: int
    done: int = 0
    running: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    merged: bool = False
    trained: bool = False
    evaluated: bool = False


@dataclass
class RunStatus:
    epochs: list[EpochStatus]
    imitation_done: bool
    training: dict[str, dict[str, str]]  # stage -> last loss-log row of a stage under way
    evaluation: dict[str, Any] | None  # latest evaluation table: model and rates by role
    slurm: list[dict[str, str]]  # SLURM jobs of this run's rules (id, state, rule, wildcards)


def _last_row(path: Path) -> dict[str, str] | None:
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError:
        return None
    return rows[-1] if rows else None


def _shard_state(results: Path, epoch: int, shard: int) -> str:
    name = f"shard_{shard:03d}.parquet"
    out = results / f"epoch{epoch}" / "selfplay" / name
    if out.is_file():
        return "done"
    journal = journal_path(out)
    partial = list(out.parent.glob(f".{name}.*")) if out.parent.is_dir() else []
    log = results / "logs" / f"epoch{epoch}" / "selfplay" / f"shard_{shard:03d}.log"
    if journal.exists() or partial:
        return "running"
    if log.is_file() and log.stat().st_size > 0:
        return "failed"  # a log, no output and nothing under way
    return "pending"


def require_run(workdir: Path) -> None:
    """Refuse a folder in which no run has started."""
    if not (workdir / "results").is_dir():
        raise SpagInputError(
            f"{workdir.resolve()}: no run here (no results/ folder); run `spag status` "
            "from the folder you run snakemake in"
        )


def slurm_jobs(workdir: Path, squeue: str | None = None) -> list[dict[str, str]]:
    """This user's SLURM jobs that Snakemake's SLURM executor submitted from ``workdir``
    (empty without SLURM)."""
    squeue = squeue or shutil.which("squeue")
    if squeue is None:
        return []
    try:
        proc = subprocess.run(
            [squeue, "--me", "-h", "-o", "%i|%T|%k|%Z"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    jobs = []
    here = str(workdir.resolve())
    for line in proc.stdout.splitlines():
        fields = line.split("|")
        if len(fields) != 4:
            continue
        job_id, state, comment, where = fields
        m = _COMMENT.match(comment.strip())
        if m and where.strip() == here:
            jobs.append(
                {
                    "id": job_id.strip(),
                    "state": state.strip(),
                    "rule": m["rule"],
                    "wildcards": m["wildcards"] or "",
                }
            )
    return jobs


def run_status(
    config: dict[str, Any],
    workdir: str | os.PathLike = ".",
    squeue: str | None = None,
) -> RunStatus:
    root = Path(workdir)
    require_run(root)
    results, checkpoints = root / "results", root / "checkpoints"
    shards = config["selfplay"]["num_shards"]
    jobs = slurm_jobs(root, squeue)
    queued = {
        j["wildcards"]: j["state"]
        for j in jobs
        if j["rule"] == "selfplay" and j["state"] in ("RUNNING", "PENDING", "CONFIGURING")
    }
    epochs = []
    for e in range(1, config["epochs"] + 1):
        st = EpochStatus(epoch=e, shards=shards)
        for s in range(shards):
            state = _shard_state(results, e, s)
            if state != "done" and f"{e}_{s:03d}" in queued:
                state = "running"
            st.done += state == "done"
            if state == "running":
                st.running.append(s)
            elif state == "failed":
                st.failed.append(s)
        st.merged = (results / f"epoch{e}" / "episodes.parquet").is_file()
        st.trained = (results / f"epoch{e}" / "model").is_dir()
        st.evaluated = (results / f"epoch{e}" / "eval" / "games.tsv").is_file()
        epochs.append(st)
    training = {}
    for stage, model in [("imitation", results / "imitation" / "model")] + [
        (f"epoch{e}", results / f"epoch{e}" / "model") for e in range(1, config["epochs"] + 1)
    ]:
        row = _last_row(checkpoints / stage / "loss_log.tsv")
        if row is not None and not model.is_dir():
            training[stage] = row
    evaluation = None
    tables = sorted(
        results.glob("epoch*/eval/games.tsv"), key=lambda p: int(p.parts[-3][len("epoch") :])
    )
    if not tables:
        tables = [p for p in (results / "eval" / "games" / "imitation.tsv",) if p.is_file()]
    if tables:
        with tables[-1].open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if rows:
            evaluation = {"model": rows[0].get("model"), "table": str(tables[-1]), "rows": rows}
    return RunStatus(
        epochs=epochs,
        imitation_done=(results / "imitation" / "model").is_dir(),
        training=training,
        evaluation=evaluation,
        slurm=jobs,
    )


def format_status(status: RunStatus) -> str:
    lines = [f"imitation (M0): {'done' if status.imitation_done else 'not done'}"]
    done = [e.epoch for e in status.epochs if e.trained]
    lines.append(f"epochs done: {len(done)} of {len(status.epochs)}")
    for e in status.epochs:
        parts = [f"shards {e.done}/{e.shards} done"]
        if e.running:
            parts.append(f"running {','.join(map(str, e.running))}")
        if e.failed:
            parts.append(f"failed {','.join(map(str, e.failed))}")
        steps = [n for n, ok in (("merged", e.merged), ("trained", e.trained)) if ok]
        if e.evaluated:
            steps.append("evaluated")
        lines.append(f"  epoch {e.epoch}: " + "; ".join(parts + steps))
    for stage, row in status.training.items():
        lines.append(
            f"training {stage}: step {row.get('step')}, loss {row.get('loss')}, "
            f"kl {row.get('kl')}, lr {row.get('learning_rate')}"
        )
    if status.evaluation:
        lines.append(f"latest evaluation ({status.evaluation['table']}):")
        for r in status.evaluation["rows"]:
            lines.append(
                f"  {r.get('model')} as {r.get('role')}: win {_rate(r.get('win_rate'))} "
                f"[{_rate(r.get('win_rate_lo'))}, {_rate(r.get('win_rate_hi'))}], "
                f"broke rules {_rate(r.get('broke_rules_rate'))}, games {r.get('games')}"
            )
    if status.slurm:
        lines.append("SLURM jobs:")
        for j in status.slurm:
            where = f" ({j['wildcards']})" if j["wildcards"] else ""
            lines.append(f"  {j['id']} {j['state']}: {j['rule']}{where}")
    return "\n".join(lines)


def _rate(text: str | None) -> str:
    try:
        return f"{float(text):.3f}"
    except (TypeError, ValueError):
        return str(text)
