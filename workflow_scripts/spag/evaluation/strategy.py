"""A model's exact strategy in a solved game (Kuhn Poker), read from its probabilities.

At each information set the prompt is rendered exactly as in play (the game's play
prompt, the model's prompt format); the model's probability of each legal move is
the probability that its whole reply *is* the move word (lower-case or capitalised,
after a space or not: ``Game.move_forms``), the word followed by the end of the turn,
as the demonstrations answer. What is left, ``1 - sum``, is the **mass outside the
legal moves**: illegal moves, replies that run on after the word ("callheck", a rule
break in play, which reads whole words) and replies with other words. It bounds what
play rejects from above: a reply such as "I bet" or "bet." is read as a bet in play but
counted outside here.

The strategy used for values is the legal moves' probabilities renormalised; from it,
exactly (``spag.game.kuhn_poker``): the exploitability, and the chips per hand
against the uniform-random player and an equilibrium player, both seats averaged.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.game import kuhn_poker as kuhn
from spag.game.kuhn_poker import InfoSet, Strategy

STRATEGY_COLUMNS = (
    "seat", "card", "history", "passive", "aggressive",
    "p_passive", "p_aggressive", "aggressive_probability", "illegal_mass",
)  # fmt: skip
SUMMARY_COLUMNS = ("model", "exploitability", "ev_vs_random", "ev_vs_equilibrium", "illegal_mass")
EQUILIBRIUM_ALPHA = Fraction(1, 6)  # the first seat's equilibrium player (issue: alpha 1/6)


def read_strategy(
    model_dir: str | os.PathLike,
    game: Any,
    prompts: Any,
    *,
    prompt_format: str,
    max_turns: int,
    dtype: str,
    device: str,
    trust_remote_code: bool,
) -> list[dict[str, Any]]:
    """One row per information set (:data:`STRATEGY_COLUMNS`)."""
    import torch

    from spag.models.rendering import PromptRenderer
    from spag.training.scoring import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_dir, dtype, trust_remote_code, device)
    model.eval()
    renderer = PromptRenderer(tokenizer, prompt_format, source=str(model_dir))
    queries, targets, where = [], [], []
    for infoset in game.infosets:
        history, role, secret = kuhn.infoset_prompt(infoset)
        prompt = game.play_prompt(prompts, history, role, secret, max_turns)
        for move in kuhn.legal_moves(infoset[2]):
            for form in game.move_forms(move):
                queries.append(prompt)
                targets.append(form)
                where.append((infoset, move))
    probs: dict[tuple[InfoSet, str], float] = {}
    with torch.inference_mode():
        for (q, t), key in zip(renderer.encode_pairs(queries, targets), where, strict=True):
            ids = torch.tensor([renderer.lead + q + t], device=device)
            logits = model(input_ids=ids, use_cache=False).logits[0, -len(t) - 1 : -1]
            lp = torch.log_softmax(logits.float(), dim=-1)
            total = float(lp.gather(1, torch.tensor(t, device=device)[:, None]).sum())
            probs[key] = probs.get(key, 0.0) + math.exp(total)
    rows = []
    for infoset in game.infosets:
        passive, aggressive = kuhn.legal_moves(infoset[2])
        p_pas, p_agg = probs[(infoset, passive)], probs[(infoset, aggressive)]
        legal = p_pas + p_agg
        rows.append(
            {
                "seat": infoset[0],
                "card": infoset[1],
                "history": " ".join(infoset[2]) or "-",
                "passive": passive,
                "aggressive": aggressive,
                "p_passive": p_pas,
                "p_aggressive": p_agg,
                # No legal mass at all: read as indifferent (the uniform player).
                "aggressive_probability": p_agg / legal if legal > 0 else 0.5,
                "illegal_mass": max(0.0, 1.0 - legal),
            }
        )
    return rows


def write_tsv(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], path: str | os.PathLike
) -> None:
    """Write ``rows`` atomically (a killed job leaves no file at ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, columns, delimiter="\t", lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    os.replace(tmp, path)


def load_strategy(path: str | os.PathLike) -> tuple[Strategy, float]:
    """A strategy table -> (the strategy, its mean mass outside the legal moves);
    a missing information set or column is named with the file."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    missing = [c for c in STRATEGY_COLUMNS if rows and c not in rows[0]]
    if missing or not rows:
        raise SpagInputError(f"{path}: not a strategy table (missing {missing or 'rows'})")
    strategy: dict[InfoSet, dict[str, float]] = {}
    illegal = []
    for i, row in enumerate(rows, start=2):
        history = () if row["history"] == "-" else tuple(row["history"].split())
        infoset = (row["seat"], row["card"], history)
        if infoset not in kuhn.INFOSETS:
            raise SpagInputError(f"{path}: line {i} is no information set: {infoset}")
        p = float(row["aggressive_probability"])
        strategy[infoset] = {row["passive"]: 1.0 - p, row["aggressive"]: p}
        illegal.append(float(row["illegal_mass"]))
    absent = [s for s in kuhn.INFOSETS if s not in strategy]
    if absent:
        raise SpagInputError(f"{path}: information set {absent[0]} is missing")
    return strategy, sum(illegal) / len(illegal)


def strategy_metrics(strategy: Strategy) -> dict[str, float]:
    """Exploitability and chips per hand against the fixed players, both seats averaged."""
    return {
        "exploitability": kuhn.exploitability(strategy),
        "ev_vs_random": kuhn.value_against(strategy, kuhn.uniform_random()),
        "ev_vs_equilibrium": kuhn.value_against(strategy, kuhn.equilibrium(EQUILIBRIUM_ALPHA)),
    }


def summarize_strategies(paths: Mapping[str, str | os.PathLike]) -> list[dict[str, Any]]:
    """One row per model (:data:`SUMMARY_COLUMNS`) from its strategy table."""
    rows = []
    for model, path in paths.items():
        strategy, illegal = load_strategy(path)
        rows.append({"model": model, **strategy_metrics(strategy), "illegal_mass": illegal})
    return rows
