"""An epoch's cost before it runs: the tokens each rule family of the plan handles, from
the config's caps, over throughputs measured on GPUs (``ops/throughputs.csv``), scaled
to the model and the card where no measurement of that pair exists.

Tokens are upper bounds from the config: every game plays ``2 x max_turns`` messages of
``max_new_tokens`` (a real model stops earlier: ``reply_tokens`` sets the mean), every
message of the winner becomes a sample (of both roles for the schemes that train the
loser), and text is counted at :data:`CHARS_PER_TOKEN` characters a token.

A throughput is scaled, never guessed. Compute-bound work (scoring, prefill, training)
moves from the measured model to this one by FLOPs a token (``2N`` forward, ``6N`` full
training, ``4N`` LoRA, ``2N`` more with activation checkpointing: the same share of the
card) and from the measured card to this one by the bf16 peak. Decoding was measured
bound by the host (a step took about the same time from batch 1 to batch 128, one kernel
launch per operation per layer: perf/results/gpu/README.md), so it moves by the number
of layers (a step's launches), at the measurement's rows a step, and not with the card.
A card without a datasheet row here, or a kind of work measured on no card, has no
figure: the table says so and names what to measure.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError

THROUGHPUTS = Path(__file__).with_name("throughputs.csv")
# A measurement moves to another model size at most this factor away (a small model's
# GPU is bound by other things than its FLOPs).
MAX_SIZE_RATIO = 10.0
# English text in a BPE vocabulary of 32k-50k tokens: about four characters a token.
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class Card:
    """A GPU's datasheet figures (SXM parts): dense bf16 FLOP/s, memory."""

    bf16_flops: float
    memory_gib: float


CARDS = {
    "H200": Card(989e12, 141),
    "H100-80GB": Card(989e12, 80),
    "A100-80GB": Card(312e12, 80),
    "A100-40GB": Card(312e12, 40),
}
# Kinds of work bound by the host (scaled by layers, not by the card), the rest by FLOPs.
HOST_BOUND = ("decode", "decode_batch1")
# How to measure a kind of work that has no row.
MEASURE = {
    "decode": "GFC_STEPS=selfplay bash perf/gpu_first_contact.sh OUT",
    "decode_batch1": "GFC_STEPS=generation bash perf/gpu_first_contact.sh OUT",
    "forward": "GFC_STEPS=scoring bash perf/gpu_first_contact.sh OUT",
    "train_full": "GFC_STEPS=training bash perf/gpu_first_contact.sh OUT",
    "train_full_offload": "GFC_STEPS=shape7b bash perf/gpu_first_contact.sh OUT (its offload step)",
    "train_lora": "GFC_STEPS=training bash perf/gpu_first_contact.sh OUT --pairings lora_bf16",
}


def flops_per_token(work: str, checkpointing: bool) -> int:
    """FLOPs a token in units of the model's parameters N."""
    base = {"train_full": 6, "train_full_offload": 6, "train_lora": 4}.get(work, 2)
    return base + (2 if checkpointing and work.startswith("train") else 0)


@dataclass(frozen=True)
class ModelSize:
    parameters: int
    layers: int


@dataclass(frozen=True)
class Measured:
    card: str
    parameters: int
    layers: int
    work: str
    checkpointing: bool
    tokens_per_s: float
    shape: str
    source: str


def load_throughputs(path: str | Path = THROUGHPUTS) -> list[Measured]:
    """The committed table of measured throughputs (one row a measurement)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for i, r in enumerate(csv.DictReader(fh), start=2):
            try:
                rows.append(
                    Measured(
                        card=r["card"],
                        parameters=int(r["parameters"]),
                        layers=int(r["layers"]),
                        work=r["work"],
                        checkpointing=r["checkpointing"].strip().lower() == "true",
                        tokens_per_s=float(r["tokens_per_s"]),
                        shape=r["shape"],
                        source=r["source"],
                    )
                )
            except (KeyError, ValueError, AttributeError) as exc:
                raise SpagInputError(f"{path}: row {i}: {exc}") from None
    return rows


@dataclass(frozen=True)
class Figure:
    """A throughput (tokens/s on one GPU) and how it was had; None when there is none."""

    tokens_per_s: float | None
    basis: str
    measured: bool = False


def throughput(
    table: list[Measured], card: str, model: ModelSize, work: str, checkpointing: bool = False
) -> Figure:
    """The throughput of ``work`` for ``model`` on ``card``: measured where that card, size
    and checkpointing were measured, else scaled from the nearest measurement (the
    module's note), else none, saying what to measure."""
    rows = [r for r in table if r.work == work]
    if not rows:
        return Figure(None, f"no measurement of {work} on any card: {MEASURE[work]}")
    if card not in CARDS and not any(r.card == card for r in rows):
        return Figure(
            None,
            f"no figures for card {card} (datasheets: {', '.join(CARDS)}): run "
            f"{MEASURE[work]} on it and add its rows to {THROUGHPUTS.name}",
        )
    pool = [r for r in rows if r.card == card] or rows
    # The nearest size, then the same checkpointing where measured.
    size = min({r.parameters for r in pool}, key=lambda n: abs(math.log(n / model.parameters)))
    if not 1 / MAX_SIZE_RATIO <= size / model.parameters <= MAX_SIZE_RATIO:
        return Figure(
            None,
            f"no measurement of {work} within {MAX_SIZE_RATIO:g}x of {_size(model.parameters)} "
            f"parameters (nearest: {_size(size)}): run {MEASURE[work]} with such a model",
        )
    pool = [r for r in pool if r.parameters == size]
    pool = [r for r in pool if r.checkpointing == checkpointing] or pool
    source = pool[0]
    values = [r.tokens_per_s for r in pool]
    tps = statistics.fmean(values)
    spread = f"{min(values):,.0f}-{max(values):,.0f}" if len(values) > 1 else f"{tps:,.0f}"
    runs = f"{len(values)} run{'s' if len(values) > 1 else ''}"
    basis = [
        f"measured {spread} tokens/s ({runs}): {source.card}, {size / 1e9:.2f}B, {source.shape}"
    ]
    if work in HOST_BOUND:
        factor = source.layers / model.layers
        if factor != 1:
            basis.append(
                f"scaled x{factor:.3g} by layers ({source.layers} -> {model.layers}: the "
                "measured steps were bound by the host's launches)"
            )
        if source.card != card:
            basis.append(f"not scaled by card (host-bound; no {card} measurement)")
    else:
        factor = (flops_per_token(work, source.checkpointing) * size) / (
            flops_per_token(work, checkpointing) * model.parameters
        )
        if not math.isclose(factor, 1.0, rel_tol=1e-9):
            basis.append(
                f"scaled x{factor:.3g} by FLOPs a token ({_size(size)} -> "
                f"{_size(model.parameters)}"
                + (", checkpointing" if checkpointing != source.checkpointing else "")
                + ", the same share of the card)"
            )
        if source.card != card:
            ratio = CARDS[card].bf16_flops / CARDS[source.card].bf16_flops
            factor *= ratio
            basis.append(
                f"x{ratio:.3g} by bf16 peak ({source.card} -> {card}, no {card} measurement)"
            )
    return Figure(tps * factor, "; ".join(basis), measured=len(basis) == 1)


@dataclass(frozen=True)
class Work:
    """One rule family's work in an epoch (or a run), in tokens by kind."""

    family: str
    jobs: int
    gpus_per_job: int
    tokens: dict[str, float]  # work kind -> tokens
    checkpointing: bool = False
    note: str = ""


@dataclass(frozen=True)
class Shape:
    """What an epoch's token counts are made of (upper bounds from the config)."""

    games: int
    messages: float  # per game
    reply_tokens: float
    prompt_tokens: float
    game_samples: int
    sample_tokens: float
    sft_rows: int | None
    sft_tokens: float | None
    eval_games: int


def _size(parameters: float) -> str:
    return f"{parameters / 1e9:.2f}B" if parameters >= 1e9 else f"{parameters / 1e6:.1f}M"


def _text_tokens(texts: list[str]) -> float:
    return sum(len(t) for t in texts) / CHARS_PER_TOKEN


def epoch_shape(
    config: dict[str, Any], reply_tokens: float | None = None, messages: float | None = None
) -> Shape:
    """The token counts of one epoch of a validated config (see the module's note);
    ``reply_tokens`` and ``messages`` a game where measured, else the caps."""
    from spag.config import num_secrets
    from spag.game.base import load_game

    game = load_game(config["game"]["name"], config["game"]["settings"])
    turns = config["game"]["max_turns"]
    sp = config["selfplay"]
    games = num_secrets(config, "train") * sp["games_per_secret"]
    messages = float(messages) if messages else 2 * turns
    if not 0 < messages <= 2 * turns:
        raise SpagInputError(f"{messages:g} messages a game: at most 2 x game.max_turns")
    reply = float(reply_tokens if reply_tokens is not None else sp["max_new_tokens"])
    if not 0 < reply <= sp["max_new_tokens"]:
        raise SpagInputError(
            f"--reply-tokens {reply:g} must be above 0 and at most selfplay.max_new_tokens "
            f"({sp['max_new_tokens']})"
        )
    prompts = game.load_prompts(config["game"]["prompts"])
    roles = game.roles
    secret = (game.deals or ("example",))[0]
    prompt = _text_tokens(
        [game.play_prompt(prompts, [], role, secret, turns) for role in roles]
    ) / len(roles)
    # The winner's messages among the first 2T (both roles' where the scheme trains the
    # loser too); a sample's query is the dialogue before it: on average half of it.
    both = config["rewards"]["scheme"] != "winners"
    game_samples = round(games * (messages if both else messages / 2))
    sample_tokens = min(prompt + (messages / 2 + 0.5) * reply, config["spag"]["max_length"])
    sft_rows = sft_tokens = None
    sft_path = config["data"]["sft"]
    if sft_path and Path(sft_path).is_file():
        from spag.data.formats import load_instructions

        table = load_instructions(sft_path)
        cap = config["data"]["sft_max_rows"]
        share = min(1.0, cap / table.num_rows) if cap else 1.0
        sft_rows = round(table.num_rows * share)
        texts = table.column("query").to_pylist() + table.column("target").to_pylist()
        sft_tokens = _text_tokens(texts) * share
    eval_games = num_secrets(config, "test") * config["selfplay"]["games_per_secret"]
    return Shape(
        games=games,
        messages=messages,
        reply_tokens=reply,
        prompt_tokens=prompt,
        game_samples=game_samples,
        sample_tokens=sample_tokens,
        sft_rows=sft_rows,
        sft_tokens=sft_tokens,
        eval_games=eval_games,
    )


def _train_work(config: dict[str, Any], stage: str) -> str:
    s = config[stage]
    if s["peft"]:
        return "train_lora"
    return "train_full_offload" if "offload" in str(s["deepspeed"] or "") else "train_full"


def epoch_work(config: dict[str, Any], shape: Shape, research_code: int = 0) -> list[Work]:
    """The families of one SPAG epoch and their tokens; ``research_code`` GPUs: the
    research code's way (one process a GPU, one game at a time on each, each message's
    whole prompt computed again; its training as the config's)."""
    res = config["resources"]
    gpus = {k: max(int(res[k].get("gpus", 0) or 0), 1) for k in ("selfplay", "score", "evaluate")}
    train_gpus = max(int(res["train"].get("gpus", 0) or 0), 1) * max(
        int(res["train"].get("nodes", 1)), 1
    )
    decode = shape.games * shape.messages * shape.reply_tokens
    if research_code:
        # Message k's prompt: the rules and the k - 1 messages before it, computed anew.
        prefill = shape.games * sum(
            shape.prompt_tokens + k * shape.reply_tokens for k in range(round(shape.messages))
        )
        play = Work("selfplay", research_code, 1, {"decode_batch1": decode, "forward": prefill},
                    note="one game at a time on each GPU")  # fmt: skip
    else:
        # Kept keys/values and prefix caching: each token enters the cache once.
        prefill = shape.games * (shape.prompt_tokens + shape.messages * shape.reply_tokens)
        play = Work("selfplay", config["selfplay"]["num_shards"], gpus["selfplay"],
                    {"decode": decode, "forward": prefill})  # fmt: skip
    samples = shape.game_samples * shape.sample_tokens + (shape.sft_tokens or 0.0)
    sft_note = "" if shape.sft_rows is not None else "SFT rows not counted (data.sft not found)"
    epochs = config["spag"]["num_train_epochs"]
    train = Work(
        "train_spag", 1, train_gpus, {_train_work(config, "spag"): samples * epochs},
        checkpointing=config["spag"]["activation_checkpointing"], note=sft_note,
    )  # fmt: skip
    score = Work("score_ref", 1, gpus["score"], {"forward": samples}, note=sft_note)
    ev = config["evaluation"]
    eval_decode = shape.eval_games * shape.messages * min(shape.reply_tokens, ev["max_new_tokens"])
    evaluate = Work(
        "eval_play", ev["num_shards"], gpus["evaluate"],
        {"decode": eval_decode, "forward": shape.eval_games * (shape.prompt_tokens + shape.messages * shape.reply_tokens)},
        note="the model and its opponent share the GPU; lm-eval's tasks not estimated",
    )  # fmt: skip
    return [play, score, train, evaluate]


@dataclass(frozen=True)
class Row:
    family: str
    jobs: int
    gpus: int  # GPUs the family uses at once on the machines
    tokens: dict[str, float]
    figures: dict[str, Figure]
    gpu_hours: float | None
    wall_hours: float | None
    note: str


def estimate_rows(
    works: list[Work],
    table: list[Measured],
    card: str,
    model: ModelSize,
    gpus_per_node: int,
    nodes: int,
) -> list[Row]:
    """GPU-hours and wall hours of each family on ``nodes`` x ``gpus_per_node`` ``card``s:
    shards run side by side on the GPUs there are, training spans its job's GPUs
    (data-parallel throughput taken as linear: only a multi-GPU node measures NCCL and
    ZeRO-3's sharding)."""
    machine = gpus_per_node * nodes
    rows = []
    for w in works:
        figures = {k: throughput(table, card, model, k, w.checkpointing) for k in w.tokens}
        known = all(f.tokens_per_s for f in figures.values())
        gpu_seconds = (
            sum(t / figures[k].tokens_per_s for k, t in w.tokens.items()) if known else None
        )
        side_by_side = max(min(w.jobs, machine // max(w.gpus_per_job, 1)), 1)
        in_use = min(side_by_side * w.gpus_per_job, machine)
        wall = None
        if gpu_seconds is not None:
            per_job = gpu_seconds / w.jobs / w.gpus_per_job
            wall = math.ceil(w.jobs / side_by_side) * per_job / 3600
        rows.append(
            Row(
                w.family,
                w.jobs,
                in_use,
                w.tokens,
                figures,
                gpu_seconds / 3600 if gpu_seconds is not None else None,
                wall,
                w.note,
            )  # fmt: skip
        )
    return rows


def format_rows(rows: list[Row], title: str) -> str:
    """The table: a line a family, its figures' bases below it, then the epoch's total."""
    lines = [title]
    lines.append(
        f"  {'family':<11} {'jobs':>4} {'GPUs':>4} {'tokens':<36} {'GPU-h':>8} {'wall h':>7}"
    )
    for r in rows:
        tokens = ", ".join(f"{k} {v / 1e6:,.1f}M" for k, v in r.tokens.items())
        gh = f"{r.gpu_hours:,.1f}" if r.gpu_hours is not None else "-"
        wh = f"{r.wall_hours:,.2f}" if r.wall_hours is not None else "-"
        lines.append(f"  {r.family:<11} {r.jobs:>4} {r.gpus:>4} {tokens:<36} {gh:>8} {wh:>7}")
        for k, f in r.figures.items():
            rate = f"{f.tokens_per_s:,.0f} tokens/s a GPU" if f.tokens_per_s else "no figure"
            lines.append(f"      {k}: {rate} ({f.basis})")
        if r.note:
            lines.append(f"      note: {r.note}")
    chain = [r for r in rows if r.family != "eval_play"]
    if all(r.wall_hours is not None for r in chain):
        total = sum(r.wall_hours for r in chain)
        lines.append(f"  epoch (selfplay -> score_ref -> train_spag): {total:,.2f} h wall, "
                     f"{sum(r.gpu_hours for r in chain):,.1f} GPU-h; eval_play overlaps the next epoch")  # fmt: skip
    else:
        missing = sorted({k for r in chain for k, f in r.figures.items() if not f.tokens_per_s})
        lines.append(f"  epoch: no total ({', '.join(missing)} without a figure)")
    return "\n".join(lines)


def card_name(text: str) -> str:
    """The datasheet row of ``--card``: its own name (``H100-80GB``) or the name
    ``nvidia-smi`` prints (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``)."""
    import re

    if text in CARDS:
        return text
    memory = re.search(r"(\d+)\s*GB", text.upper())
    if "A100" in text.upper() and memory is None:
        raise SpagInputError(f"--card {text}: an A100 of 40 or 80 GB? give A100-40GB or A100-80GB")
    found = card_family(text, float(memory[1]) if memory else 80.0)
    if found is None:
        raise SpagInputError(
            f"--card {text}: no datasheet row ({', '.join(CARDS)}) for this name; give one "
            "of those or the name nvidia-smi prints for one (NVIDIA H100 80GB HBM3)"
        )
    return found


def card_family(name: str, memory_gib: float) -> str | None:
    """The datasheet row of a GPU as NVML names it (``NVIDIA H100 80GB HBM3``), or None."""
    text = name.upper()
    for key, card in (("H200", "H200"), ("H100", "H100-80GB")):
        if key in text:
            return card
    if "A100" in text:
        return "A100-80GB" if memory_gib > 60 else "A100-40GB"
    return None


def model_size(config: dict[str, Any]) -> ModelSize:
    """Parameters (counted as :func:`spag.ops.capacity.parameter_count`) and layers of a
    decoder's config (a ``config.json``'s keys)."""
    from spag.ops.capacity import parameter_count

    return ModelSize(parameter_count(config), int(config["num_hidden_layers"]))


def epoch_estimate(
    config: dict[str, Any],
    model: ModelSize,
    card: str,
    gpus_per_node: int,
    nodes: int,
    reply_tokens: float | None = None,
    where: str = "",
    messages: float | None = None,
    measured_from: str = "",
) -> str:
    """The estimate's text: the shape of an epoch, then its table for this pipeline and
    for the research code's way (one game at a time on each GPU)."""
    shape = epoch_shape(config, reply_tokens, messages)
    upper = epoch_shape(config)
    table = load_throughputs()
    lines = [
        f"one epoch: {_size(model.parameters)} parameters{f' ({where})' if where else ''}, "
        f"{nodes} node(s) x {gpus_per_node} {card}",
        f"  {'measured (' + measured_from + ')' if measured_from else 'at most'}: "
        f"{shape.games:,} games of {shape.messages:.3g} messages of "
        f"{shape.reply_tokens:g} tokens, rules prompt ~{shape.prompt_tokens:,.0f} tokens, "
        f"{shape.game_samples:,} game samples of ~{shape.sample_tokens:,.0f} tokens, "
        + (f"{shape.sft_rows:,} SFT rows" if shape.sft_rows is not None else "SFT rows unknown"),
    ]
    if measured_from:
        lines.append(
            f"  at most: {upper.messages:g} messages of {upper.reply_tokens:g} tokens a game, "
            f"{upper.game_samples:,} game samples of ~{upper.sample_tokens:,.0f} tokens"
        )
    research = "the research code's sampling (one game at a time on each GPU), the rest as above"
    for title, machine in (("this pipeline", 0), (research, gpus_per_node * nodes)):
        rows = estimate_rows(epoch_work(config, shape, machine), table, card, model,
                             gpus_per_node, nodes)  # fmt: skip
        lines.append(format_rows(rows, title))
    return "\n".join(lines)
