"""A target's time, job by job: what its finished jobs took and what the rest will take.

The plan comes from Snakemake itself (``snakemake -n --forceall TARGET``: every job of
the target with its rule, wildcards and benchmark file; ``snakemake -n TARGET``: those
still to run). A job still to run is timed from the best figure there is, in this order:

1. **the run's own finished jobs** of the same rule (their Snakemake benchmark files:
   the mean wall time of a job, as measured);
2. **the calibration** (:mod:`spag.ops.calibration`): the family's fixed seconds a job
   plus the job's tokens at the measured rate; the tokens from the games' measured
   shape (the latest epoch's episodes, else the calibration's games) against the
   config's upper bound;
3. **a light step** (a rule of none of the GPU families): the mean of the run's
   finished light steps.

A job with none of these has no figure and is counted apart. Every figure says where it
came from. Wall time assumes the rules run one after another, each rule's jobs
``jobs_at_once`` at a time (shards side by side), each job its figure plus the
executor's own time a job (submission, start-up, polling: :func:`executor_overheads`,
from the run's Snakemake logs); evaluation jobs that overlap the next epoch make it an
upper bound there.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.ops.calibration import benchmark_seconds, read_calibration

# Rules timed from a calibration family, and how their tokens are counted.
PLAY_RULES = ("selfplay",)
EVAL_PLAY_RULES = (
    "eval_play",
    "eval_play_baseline",
    "eval_play_sampled",
    "eval_play_sampled_baseline",
)
CALIBRATED = {
    **{r: "selfplay" for r in PLAY_RULES + EVAL_PLAY_RULES},
    "score_imitation": "score",
    "score_ref": "score",
    "train_imitation": "train_imitation",
    "train_spag": "train_spag",
}
# Rules that run on a GPU family but no calibration measures (lm-eval's tasks, the
# listener's hints, the teacher's games): timed from the run's own jobs only.
UNCALIBRATED = ("eval_reasoning", "eval_hints", "eval_inference", "teacher_play", "base_model")
_BLOCK = re.compile(r"^(?P<local>local)?rule (?P<rule>\w+):$")


@dataclass
class PlannedJob:
    rule: str
    wildcards: str
    benchmark: str | None
    local: bool
    pending: bool = True
    seconds: float | None = None  # measured (finished jobs)

    @property
    def key(self) -> tuple[str, str]:
        return (self.rule, self.wildcards)


def parse_dry_run(text: str) -> list[PlannedJob]:
    """The jobs of ``snakemake -n`` output: rule, wildcards, benchmark, local or not."""
    jobs: list[PlannedJob] = []
    for line in text.splitlines():
        m = _BLOCK.match(line.strip())
        if m:
            jobs.append(PlannedJob(m["rule"], "", None, bool(m["local"])))
            continue
        if not jobs:
            continue
        key, _, value = line.strip().partition(": ")
        if key == "wildcards":
            jobs[-1].wildcards = value
        elif key == "benchmark":
            jobs[-1].benchmark = value
    return jobs


def snakemake_plan(
    target: str, workdir: str | os.PathLike, configfiles: list[str], snakemake: str | None = None
) -> list[PlannedJob]:
    """Every job of ``target`` in the run folder ``workdir``, marked pending or not."""
    exe = snakemake or shutil.which("snakemake")
    if exe is None:
        raise SpagInputError("snakemake is not on PATH: the plan's jobs come from its dry-run")

    # Both dry runs at once: each is mostly Snakemake's start and the DAG.
    cmds = [
        [exe, "-n", target, "--configfile", *configfiles, *extra] for extra in (["--forceall"], [])
    ]
    procs = [
        subprocess.Popen(
            c, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for c in cmds
    ]
    texts = []
    for cmd, proc in zip(cmds, procs, strict=True):
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            tail = "\n".join(out.strip().splitlines()[-5:])
            raise SpagInputError(f"`{' '.join(cmd[1:])}` failed in {workdir}:\n{tail}")
        texts.append(out)
    # The target's own rule runs no command.
    every = [j for j in parse_dry_run(texts[0]) if j.rule != target]
    pending = {j.key for j in parse_dry_run(texts[1])}
    root = Path(workdir)
    for job in every:
        job.pending = job.key in pending
        if not job.pending and job.benchmark:
            job.seconds = _benchmark(root / job.benchmark)
    return every


def _benchmark(path: Path) -> float | None:
    """A finished job's command time, None where its benchmark file does not read."""
    try:
        return benchmark_seconds(path)
    except SpagInputError:
        return None


_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) ")


def executor_overheads(workdir: str | os.PathLike) -> dict[bool, list[float]]:
    """Seconds a job costs beyond its command, local steps (True) and submitted jobs
    (False) apart: from the run's Snakemake logs (``.snakemake/log``), the time from a
    job's announcement to its end seen, minus its benchmark file's command time. On a
    cluster this is the submission, the queue, the job's own start-up and the polling."""
    import datetime as dt

    found: dict[bool, list[float]] = {True: [], False: []}
    root = Path(workdir)
    for log in sorted((root / ".snakemake" / "log").glob("*.snakemake.log")):
        now = None
        blocks: dict[str, tuple[dt.datetime, bool, str | None]] = {}
        current: list = []
        for line in log.read_text(errors="replace").splitlines():
            m = _STAMP.match(line)
            if m:
                now = dt.datetime.strptime(m[1], "%a %b %d %H:%M:%S %Y")
                continue
            m = _BLOCK.match(line)
            if m and now is not None:
                current = [now, bool(m["local"]), None, None]  # announced, local, id, bench
                continue
            key, _, value = line.strip().partition(": ")
            if current and key == "jobid":
                current[2] = value
            elif current and key == "benchmark":
                current[3] = value
                if current[2] is not None:
                    blocks[current[2]] = (current[0], current[1], value)
            m = _FINISHED.match(line)
            if m and now is not None and m[1] in blocks:
                announced, local, bench = blocks.pop(m[1])
                seconds = _benchmark(root / bench)
                if seconds is not None:
                    wall = (now - announced).total_seconds()
                    found[local].append(max(wall - seconds, 0.0))
    return found


# ---------------------------------------------------------------- shape
@dataclass(frozen=True)
class GameShape:
    messages: float  # a game's messages
    reply_tokens: float  # a message's tokens
    source: str
    upper_messages: int
    upper_reply: int


def game_shape(config: dict[str, Any], results: Path, calibration: dict[str, dict]) -> GameShape:
    """A game's measured messages and reply tokens: the latest epoch's episodes, else
    the calibration's games, else the config's caps (an upper bound)."""
    upper_m, upper_r = 2 * config["game"]["max_turns"], config["selfplay"]["max_new_tokens"]
    epochs = sorted(
        (int(p.parent.name.removeprefix("epoch")), p)
        for p in results.glob("epoch*/episodes.parquet")
        if p.parent.name.removeprefix("epoch").isdigit()
    )
    if epochs:
        import pyarrow.parquet as pq

        epoch, path = epochs[-1]
        table = pq.read_table(path, columns=["history", "message_tokens"])
        messages = [len(h) for h in table.column("history").to_pylist()]
        replies = [t for r in table.column("message_tokens").to_pylist() for t in r or []]
        if messages and replies:
            return GameShape(statistics.fmean(messages), statistics.fmean(replies),
                             f"epoch {epoch}'s {len(messages)} games ({path})", upper_m, upper_r)  # fmt: skip
    sp = calibration.get("selfplay")
    if sp and sp["figures"].get("messages_per_game"):
        f = sp["figures"]
        return GameShape(f["messages_per_game"], f["reply_tokens"],
                         f"the calibration's {f['games']} games", upper_m, upper_r)  # fmt: skip
    return GameShape(upper_m, upper_r, "the config's caps (an upper bound)", upper_m, upper_r)


def job_tokens(
    rule: str,
    config: dict[str, Any],
    shape: GameShape,
    calibration: dict[str, dict],
    results: Path = Path("results"),
) -> tuple[float, str] | None:
    """The tokens one job of ``rule`` handles (what its calibration rate is of)."""
    from spag.config import num_secrets

    sp, ev = config["selfplay"], config["evaluation"]
    if rule in PLAY_RULES:
        games = math.ceil(num_secrets(config, "train") / sp["num_shards"]) * sp["games_per_secret"]
        return games * shape.messages * shape.reply_tokens, f"{games} games a shard"
    if rule in EVAL_PLAY_RULES:
        per_role = ev["sampled_games_per_secret"] if "sampled" in rule else 1
        words = math.ceil(num_secrets(config, "test") / ev["num_shards"])
        games = words * 2 * per_role
        reply = min(shape.reply_tokens, ev["max_new_tokens"])
        return games * shape.messages * reply, f"{games} games a shard (both roles)"
    score = calibration.get("score")
    if score is None:
        return None
    per_row = score["figures"]["tokens"] / max(score["figures"]["samples"], 1)
    if rule in ("score_imitation", "train_imitation"):
        rows = _rows(results / "imitation" / "samples.parquet")
        if rows is None:
            return None
        epochs = config["imitation"]["num_train_epochs"] if rule.startswith("train") else 1
        return rows * per_row * epochs, f"{rows} imitation samples x {per_row:.0f} tokens"
    if rule in ("score_ref", "train_spag"):
        games = num_secrets(config, "train") * sp["games_per_secret"]
        both = config["rewards"]["scheme"] != "winners"
        samples = games * shape.messages * (1.0 if both else 0.5)
        tokens = samples * (per_row + shape.reply_tokens * shape.messages / 2)
        epochs = config["spag"]["num_train_epochs"] if rule.startswith("train") else 1
        return tokens * epochs, f"~{samples:,.0f} game samples (SFT rows not counted)"
    return None


def _rows(path: Path) -> int | None:
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- figures
@dataclass
class RuleTime:
    rule: str
    done: int = 0
    pending: int = 0
    spent: float = 0.0  # seconds of its finished jobs
    per_job: float | None = None  # seconds a job still to run
    source: str = "no figure"
    local: bool = False  # run where Snakemake runs (no submission)
    overhead: float = 0.0  # the executor's seconds a job beyond its command

    @property
    def left(self) -> float | None:
        return None if self.per_job is None else self.pending * self.per_job


def rule_times(
    jobs: list[PlannedJob], config: dict[str, Any], workdir: str | os.PathLike = "."
) -> tuple[list[RuleTime], GameShape]:
    """Each rule's finished time and a figure for its jobs still to run (module note)."""
    root = Path(workdir)
    calibration = read_calibration(root / "results" / "calibration")
    shape = game_shape(config, root / "results", calibration)
    by_rule: dict[str, RuleTime] = {}
    measured: dict[str, list[float]] = defaultdict(list)
    light: list[float] = []
    overheads = executor_overheads(root)
    for j in jobs:
        t = by_rule.setdefault(j.rule, RuleTime(j.rule, local=j.local))
        if j.pending:
            t.pending += 1
        else:
            t.done += 1
            if j.seconds is not None:
                t.spent += j.seconds
                measured[j.rule].append(j.seconds)
                if j.rule not in CALIBRATED and j.rule not in UNCALIBRATED:
                    light.append(j.seconds)
    for rule, t in by_rule.items():
        # The median: a job's queue wait behind the run's own jobs is counted in waves.
        t.overhead = statistics.median(overheads[t.local]) if overheads[t.local] else 0.0
        if measured[rule]:
            values = measured[rule]
            t.per_job = statistics.fmean(values)
            t.source = (
                f"the run's {len(values)} finished job(s) of this rule "
                f"({min(values):.0f}-{max(values):.0f} s)"
            )
        elif rule in CALIBRATED and CALIBRATED[rule] in calibration:
            doc = calibration[CALIBRATED[rule]]
            tokens = job_tokens(rule, config, shape, calibration, root / "results")
            if tokens is not None:
                f = doc["figures"]
                t.per_job = f["fixed_seconds"] + tokens[0] / f["tokens_per_s"]
                t.source = (
                    f"calibration {doc['path']}: {f['fixed_seconds']:.0f} s fixed + "
                    f"{tokens[0]:,.0f} tokens ({tokens[1]}) at {f['tokens_per_s']:,.0f} "
                    f"tokens/s"
                )
        elif rule not in CALIBRATED and rule not in UNCALIBRATED and light:
            t.per_job = statistics.fmean(light)
            t.source = f"a light step: the mean of the run's {len(light)} finished ones"
    return list(by_rule.values()), shape


def format_times(times: list[RuleTime], shape: GameShape, jobs_at_once: int, title: str) -> str:
    """The table: a line a rule (finished, spent, still to run, left), then the target."""
    lines = [title, f"  a game: {shape.messages:.1f} messages of {shape.reply_tokens:.1f} tokens "
             f"(from {shape.source}); at most {shape.upper_messages} of {shape.upper_reply}"]  # fmt: skip
    lines.append(f"  {'rule':<27} {'done':>5} {'spent':>9} {'to run':>6} {'a job':>8} {'left':>9}")
    for t in times:
        a_job = _hms(t.per_job) if t.per_job is not None else "-"
        left = _hms(t.left) if t.left is not None else ("-" if t.pending else _hms(0))
        lines.append(
            f"  {t.rule:<27} {t.done:>5} {_hms(t.spent):>9} {t.pending:>6} {a_job:>8} {left:>9}"
        )
        if t.pending:
            lines.append(f"      {t.source}")
    spent = sum(t.spent for t in times)
    left = sum(t.left or 0.0 for t in times)
    wall = sum(
        math.ceil(t.pending / max(jobs_at_once, 1)) * (t.per_job + t.overhead)
        for t in times
        if t.per_job is not None and t.pending
    )
    remote = next((t.overhead for t in times if not t.local), 0.0)
    local = next((t.overhead for t in times if t.local), 0.0)
    unknown = [f"{t.rule} ({t.pending})" for t in times if t.pending and t.per_job is None]
    lines.append(
        f"  the executor's time a job beyond its command (median, the run's Snakemake logs): "
        f"{remote:.0f} s submitted, {local:.0f} s local"
    )
    lines.append(
        f"  target: {_hms(spent)} of job time spent; {_hms(left)} of job time left, about "
        f"{_hms(wall)} wall at {jobs_at_once} job(s) at once"
        + (f"; no figure for {', '.join(unknown)}" if unknown else "")
    )
    return "\n".join(lines)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"
