"""Calibration: a few minutes of each GPU family's real work, measured on the run's own
machines, model, engine and settings, before the run (``snakemake calibrate``).

The calibration's jobs are the real rules run on a small input (rules/calibrate.smk):
self-play plays one engine batch of the first epoch's games with the base model,
reference scoring scores a sample of the imitation samples, and each training stage
runs a few optimizer steps on those scored samples at its configured shape (DeepSpeed,
offload, LoRA, launch). Each job's log, Snakemake benchmark and job record
(``<output>.job.json``: host, GPUs, versions, date) give one figure file a family,
``results/calibration/<family>.json``: a rate (tokens/s of the job's own work), the
job's fixed part (start, load, save: its wall time minus the work), and for self-play
the games' shape (messages a game, tokens a reply). ``spag estimate`` and ``spag
status`` read them (:mod:`spag.ops.timing`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.settings import Checked, opt

# The families a calibration measures, each from the rules whose jobs it stands for.
FAMILIES = ("selfplay", "score", "train_imitation", "train_spag")
# Lines of the steps' logs that the figures are read from (spag play, score-ref, train).
PLAY_LINE = re.compile(
    r"wrote .*: (?P<games>\d+) episodes, (?P<tokens>\d+) generated tokens in "
    r"(?P<seconds>[0-9.]+) s"
)
ENGINE_LINE = re.compile(r"model: (?P<prompt>\d+) prompt tokens, (?P<computed>\d+) run through it")
SCORE_LINE = re.compile(
    r"scoring took (?P<seconds>[0-9.]+) s for (?P<tokens>\d+) tokens of (?P<rows>\d+) samples"
)
TRAIN_LINE = re.compile(
    r"trained (?P<steps>\d+) steps in (?P<seconds>[0-9.]+) s: (?P<tokens>\d+) tokens"
    r"(?:, peak memory (?P<peak>[0-9.]+) GiB)?"
)


@dataclass(frozen=True, kw_only=True)
class CalibrationSettings(Checked):
    """``snakemake calibrate``: how much of each family's real work its calibration job
    does. Each job's time limit is ``minutes``, so the calibration costs at most its jobs
    x their GPUs x ``minutes``, printed before any of them starts."""

    games: int | None = opt(
        None,
        "self-play games the calibration plays; default: one engine batch "
        "(selfplay.batch_size), at most a shard's games",
        ge=1,
    )
    samples: int = opt(256, "imitation samples scored, then trained on", ge=1)
    train_steps: int = opt(
        6, "optimizer steps of each training stage (the first, warm-up, is not a rate)", ge=2
    )
    minutes: int = opt(30, "each calibration job's time limit (SLURM's and Snakemake's)", ge=1)


def calibration_games(config: dict[str, Any], words: int) -> int:
    """The self-play games the calibration plays (see :class:`CalibrationSettings`)."""
    sp = config["selfplay"]
    shard = math.ceil(words / sp["num_shards"]) * sp["games_per_secret"]
    wanted = config["calibration"]["games"] or sp["batch_size"]
    return max(min(wanted, shard), 1)


def calibration_shards(config: dict[str, Any], words: int) -> int:
    """The number of shards whose shard 0 holds the calibration's words (shards are
    strided slices of the word list, so shard 0 of K holds ceil(words / K) words)."""
    per_word = config["selfplay"]["games_per_secret"]
    needed = math.ceil(calibration_games(config, words) / per_word)
    return max(words // max(needed, 1), 1)


def calibration_gpus(config: dict[str, Any]) -> dict[str, int]:
    """The GPUs each calibration job takes (its family's; 0: a CPU job)."""
    r = config["resources"]
    train = r["train"]["gpus"] * r["train"]["nodes"]
    return {
        "selfplay": r["selfplay"]["gpus"],
        "score": r["score"]["gpus"],
        "train_imitation": train,
        "train_spag": train,
    }


def calibration_train_flags(config: dict[str, Any], stage: str) -> str:
    """``spag train``'s flags of a stage's calibration job: the stage's own, a few steps,
    under a name of their own in trackers."""
    from spag.settings import step_flags
    from spag.training.settings import TrainConfig, stage_arguments

    options = stage_arguments(config, stage)
    options.update(stage=f"calibration_{stage}", max_steps=config["calibration"]["train_steps"])
    return step_flags(TrainConfig, **options)


def cost_bound(config: dict[str, Any], gpus: dict[str, int]) -> str:
    """What the calibration costs at most: its jobs, their GPUs and time limit."""
    minutes = config["calibration"]["minutes"]
    lines = [f"calibration: {len(FAMILIES)} jobs, each stopped after {minutes} min:"]
    total = 0.0
    for family in FAMILIES:
        g = gpus[family]
        total += g * minutes / 60
        res = "train" if family.startswith("train") else family
        kind = f"{g} GPU(s)" if g else f"CPU ({config['resources'][res]['cpus']} cores)"
        lines.append(f"  {family}: {kind} x {minutes} min")
    lines.append(
        f"  at most {total:.2f} GPU-hours and {len(FAMILIES) * minutes} job-minutes "
        "(most finish in a few minutes)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- figures
def benchmark_seconds(path: str | Path) -> float:
    """A Snakemake benchmark file's wall time (column ``s``, its last row)."""
    import csv

    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        return float(rows[-1]["s"])
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise SpagInputError(f"{path}: not a Snakemake benchmark file ({exc})") from None


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError as exc:
        raise SpagInputError(f"{log}: {exc.strerror}") from None


def _match(pattern: re.Pattern, log: Path, text: str | None = None) -> re.Match:
    found = list(pattern.finditer(_read(log) if text is None else text))
    if not found:
        raise SpagInputError(f"{log}: no line matching {pattern.pattern!r}")
    return found[-1]


def _rate(tokens: int, seconds: float, benchmark: str | Path) -> dict:
    """A job's rate over its work's own seconds, and the rest of its wall time (fixed)."""
    wall = benchmark_seconds(benchmark)
    return {
        "job_seconds": wall,
        "tokens_per_s": tokens / max(seconds, 1e-9),
        "fixed_seconds": max(wall - seconds, 0.0),
    }


def job_record(output: str | Path) -> dict[str, Any]:
    """The job record ``spag`` wrote beside a calibration output (host, GPUs, versions)."""
    from spag.ops.provenance import job_record_path

    path = job_record_path(output)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SpagInputError(f"{path}: no job record ({exc})") from None


def _where(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("hostname", "gpus", "packages", "python", "started", "slurm_job_id", "spag")
    return {k: record.get(k) for k in keep}


def selfplay_figures(episodes: str | Path, log: str | Path, benchmark: str | Path) -> dict:
    """Self-play's rate and its games' shape from the calibration's games."""
    import pyarrow.parquet as pq

    text = _read(Path(log))
    m = _match(PLAY_LINE, Path(log), text)
    table = pq.read_table(episodes, columns=["history", "message_tokens", "end_reason"])
    messages = [len(h) for h in table.column("history").to_pylist()]
    replies = [t for row in table.column("message_tokens").to_pylist() for t in row or []]
    engine = list(ENGINE_LINE.finditer(text))
    seconds, tokens = float(m["seconds"]), int(m["tokens"])
    return {
        "games": int(m["games"]),
        "generated_tokens": tokens,
        "play_seconds": seconds,
        **_rate(tokens, seconds, benchmark),
        "messages_per_game": statistics.fmean(messages) if messages else None,
        "reply_tokens": statistics.fmean(replies) if replies else None,
        "games_finished": sum(r != "max_turns" for r in table.column("end_reason").to_pylist()),
        "prompt_tokens_seen": sum(int(e["prompt"]) for e in engine),
        "prompt_tokens_computed": sum(int(e["computed"]) for e in engine),
    }


def score_figures(log: str | Path, benchmark: str | Path) -> dict:
    m = _match(SCORE_LINE, Path(log))
    seconds, tokens = float(m["seconds"]), int(m["tokens"])
    return {
        "samples": int(m["rows"]),
        "tokens": tokens,
        "work_seconds": seconds,
        **_rate(tokens, seconds, benchmark),
    }


def train_figures(log: str | Path, loss_log: str | Path, benchmark: str | Path) -> dict:
    """A training stage's steady rate (the loss log's tokens/s from step 2 on: step 1
    builds and warms up), and the job's fixed part (its wall time minus the steps)."""
    import csv

    m = _match(TRAIN_LINE, Path(log))
    with open(loss_log, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    rates = [float(r["tokens_per_s"]) for r in rows if int(r["step"]) >= 2 and r["tokens_per_s"]]
    if not rates:
        raise SpagInputError(f"{loss_log}: no step from 2 on with tokens_per_s")
    seconds, tokens, steps = float(m["seconds"]), int(m["tokens"]), int(m["steps"])
    wall = benchmark_seconds(benchmark)
    rate = statistics.median(rates)
    return {
        "steps": steps,
        "tokens": tokens,
        "train_seconds": seconds,
        "job_seconds": wall,
        "tokens_per_s": rate,
        "step_seconds": seconds / max(steps, 1),
        # The steps' time at the steady rate is work; the rest (start, load, the first
        # step's build, the save) is paid once a job.
        "fixed_seconds": max(wall - tokens / rate, 0.0),
        "peak_gib": float(m["peak"]) if m["peak"] else None,
    }


def write_figures(
    family: str, figures: dict, output: str | Path, record_of: str | Path, **extra: Any
) -> dict:
    """One family's figure file: its figures, where and when they were measured."""
    from spag.data.tables import atomic_path

    record = job_record(record_of)
    doc = {"family": family, "figures": figures, "measured": _where(record), **extra}
    with atomic_path(Path(output), suffix=".json.tmp") as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def read_calibration(folder: str | Path) -> dict[str, dict]:
    """The figure files a calibration left (family -> its document); a file that does
    not read is refused naming it."""
    found = {}
    for family in FAMILIES:
        path = Path(folder) / f"{family}.json"
        if not path.is_file():
            continue
        try:
            found[family] = json.loads(path.read_text())
            found[family]["path"] = str(path)
        except ValueError as exc:
            raise SpagInputError(f"{path}: not JSON ({exc})") from None
    return found


def describe(doc: dict) -> str:
    """Where and when a figure file was measured, in one line."""
    m = doc.get("measured", {})
    gpus = ", ".join(sorted(set(m.get("gpus") or []))) or "no GPU"
    return f"{doc.get('path', doc['family'])}: {m.get('hostname')}, {gpus}, {m.get('started')}"


def format_figures(docs: dict[str, dict]) -> str:
    """The calibration's table, a line a family."""
    lines = ["calibration (measured on the run's own machines):"]
    for family, doc in docs.items():
        f = doc["figures"]
        text = f"{f['tokens_per_s']:,.0f} tokens/s, {f['fixed_seconds']:.0f} s fixed"
        if family == "selfplay":
            text += (
                f"; {f['games']} games, {f['messages_per_game']:.1f} messages a game, "
                f"{f['reply_tokens']:.1f} tokens a reply, {f['games_finished']} finished "
                f"before max_turns; prompt tokens {f['prompt_tokens_seen']:,} seen, "
                f"{f['prompt_tokens_computed']:,} computed"
            )
        elif family.startswith("train"):
            text += f"; {f['step_seconds']:.2f} s a step"
            if f.get("peak_gib") is not None:
                text += f", peak {f['peak_gib']:.2f} GiB"
            if doc.get("estimated_gib") is not None:
                text += f" (spag training-memory: {doc['estimated_gib']:.2f} GiB)"
        lines.append(f"  {family}: {text}")
        lines.append(f"      {describe(doc)}")
    return "\n".join(lines)
