"""Graded hints: how well a fixed listener could name the secret from a dialogue.

A win needs a defender that guesses; against one that never does (an echoing
opponent), a rule-abiding attacker cannot win, whatever its hints. The hint score
grades the hints themselves. A fixed listener reads the dialogue up to each attacker
message, as the defender's play prompt shows it, and scores the game's correct guess
(Taboo: ``I know the word! It is <w>!``) for the secret and for K distractors (other
held-out words, drawn per game from the seed); the secret's rank among the K + 1 is
1 when the listener would name it first. A scoring pass: nothing is generated.

The raw rank also measures the listener's prior for each word: some words rank first
whatever is said, others never. The calibrated rank orders the K + 1 guesses by their
log-probability after the dialogue minus their log-probability after a neutral
dialogue of the same shape (the same roles and number of messages, each message
:data:`NEUTRAL_MESSAGE`): what the hints added to the listener's belief. Both ranks
are kept; the summaries read either.

Both read a message in its dialogue, so one message gets other ranks in other
dialogues (and again when repeated within one), and the best of a dialogue's noisy
ranks sits above chance on dialogues that hint at nothing. The message rank reads
each message alone: the listener sees a dialogue of that one attacker message, and
the guesses are ordered by their log-probability there minus after the neutral
one-message dialogue. Each distinct (secret, message) is scored once, so identical
messages of a secret get one score, and ties (a message that changes nothing) count
as the expected reciprocal rank under a random order of the tied guesses: a message
that hints at nothing sits at chance. It is stored as its reciprocal rank
(``message_rr``). Summaries give each dialogue's first, last, best and mean message,
and how the scores' variance splits: between secrets (the listener's prior for each
word, and how hintable each word is), beside the share that secrets drawn at random
would give, and among identical messages of a secret (what the dialogue around a
message changes: 0 for the message rank).

The prompt and the guesses' shared opening are scored once and their keys/values
reused for the K + 1 guesses' own tokens, so the cost is about one forward pass over
the prompt per attacker message.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spag.errors import SpagInputError
from spag.evaluation.games import wilson_interval
from spag.evaluation.paired import cluster_bootstrap
from spag.generation.base import derive_seed
from spag.settings import Checked, opt

DEFAULT_K = 20
# The content of every message of the neutral dialogue that gives the listener's prior:
# it names nothing and hints at nothing.
NEUTRAL_MESSAGE = "..."
# The ranks a summary can read: raw (the dialogue's log-probabilities), calibrated
# (minus the neutral dialogue's) or message (the message alone, calibrated).
RANKS = ("calibrated", "raw", "message")
# The defender's inference reads these fixed dialogues: the same clues for every model.
INFERENCE_SOURCES = ("demonstrations", "m0_games")


@dataclass(frozen=True, kw_only=True)
class HintsSettings(Checked):
    """Graded hints of the evaluation games (config ``evaluation.hints``)."""

    listener: str | None = opt(
        "base",
        '"base", "imitation" (M0) or a model folder that reads the hints; null: no hint scores',
        schema={"minLength": 1},
    )
    k: int | None = opt(
        None,
        f"distractors (at most words.num_test - 1); null: {DEFAULT_K}, or "
        "words.num_test - 1 where fewer",
        ge=1,
    )
    inference_sources: tuple[str, ...] = opt(
        INFERENCE_SOURCES,
        "the fixed dialogues every model reads as the defender (results/eval/inference/): "
        "the shipped demonstrations (data.imitation; 72 games, 207 attacker messages in "
        "Taboo's) and M0's evaluation games",
        schema={"items": {"enum": list(INFERENCE_SOURCES)}, "minItems": 1, "uniqueItems": True},
    )


HINT_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string()),  # which dialogues (evaluation games, demonstrations)
        pa.field("episode_id", pa.string()),
        pa.field("target_word", pa.string()),
        pa.field("policy_role", pa.string()),
        pa.field("message", pa.int64()),  # index of the attacker message in the history
        pa.field("attacker_turn", pa.int64()),  # 1 for the attacker's first message
        pa.field("rank", pa.int64()),  # the secret's rank among the K + 1 guesses (1: first)
        pa.field("reciprocal_rank", pa.float64()),
        pa.field("candidates", pa.int64()),
        # The rank by log-probability minus the neutral dialogue's (the word's prior).
        pa.field("calibrated_rank", pa.int64()),
        # The message alone, calibrated; ties averaged: a reciprocal rank.
        pa.field("message_rr", pa.float64()),
        # The message's text, hashed: identical messages share it.
        pa.field("message_key", pa.string()),
    ]
)
# The column each kind of rank is read from (the message rank as its reciprocal).
RANK_COLUMN = {"raw": "rank", "calibrated": "calibrated_rank", "message": "message_rr"}
# Which message of a dialogue a summary reads.
WHENS = ("first", "last", "best", "mean")


def distractors(words: Sequence[str], secret: str, k: int, seed: int) -> list[str]:
    """K held-out words other than ``secret``, drawn from the seed and the secret: every
    model's games of one word meet the same distractors, so they pair up."""
    pool = sorted({w for w in words if w != secret})
    if k > len(pool):
        raise SpagInputError(
            f"key 'evaluation.hints.k' ({k}) is above the {len(pool)} other held-out words"
        )
    return random.Random(derive_seed("hints", seed, secret)).sample(pool, k)


class Listener:
    """A causal LM that scores continuations of a prompt, the prompt computed once."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        prompt_format: str,
        dtype: str,
        device: str,
        trust_remote_code: bool,
    ):
        from spag.models.rendering import PromptRenderer
        from spag.training.scoring import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(
            model_dir, dtype, trust_remote_code, device
        )
        self.model.eval()
        self.device = device
        self.renderer = PromptRenderer(self.tokenizer, prompt_format, source=str(model_dir))

    def logprobs(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """Log-probability of each continuation's tokens right after ``prompt``."""
        import torch

        pairs = self.renderer.encode_pairs([prompt] * len(continuations), list(continuations))
        conts = [t[:-1] for _, t in pairs]  # the guess, without the reply's end token
        # The guesses share their opening ("I know the word! It is"): it goes through the
        # model once with the prompt, and each guess feeds only its own tokens (at least
        # one) on the cached keys/values. The logits of the prompt's positions before
        # the shared part are not computed.
        shared = 0
        while shared < min(len(c) for c in conts) - 1 and len({c[shared] for c in conts}) == 1:
            shared += 1
        head = self.renderer.lead + pairs[0][0] + conts[0][:shared]
        tails = [c[shared:] for c in conts]
        width = max(len(t) for t in tails)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(tails), width), pad, dtype=torch.long)
        mask = torch.zeros((len(tails), len(head) + width), dtype=torch.long)
        mask[:, : len(head)] = 1
        for i, t in enumerate(tails):
            ids[i, : len(t)] = torch.tensor(t)
            mask[i, len(head) : len(head) + len(t)] = 1
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([head], device=self.device),
                use_cache=True,
                logits_to_keep=shared + 1,
            )
            cache = out.past_key_values
            cache.batch_repeat_interleave(len(tails))
            rest = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                past_key_values=cache,
                use_cache=False,
            ).logits.float()
            # Kept logits: position j predicts shared token j (j < shared) and the last
            # one a guess's first own token; own token j > 0 by the guess's token j - 1.
            kept = torch.log_softmax(out.logits[0].float(), -1)
            rest = torch.log_softmax(rest, -1)
        common = sum(float(kept[j, conts[0][j]]) for j in range(shared))
        scores = []
        for i, t in enumerate(tails):
            total = common + float(kept[shared, t[0]])
            for j in range(1, len(t)):
                total += float(rest[i, j - 1, t[j]])
            scores.append(total)
        return scores


def reciprocal_rank(scores: Sequence[float]) -> float:
    """The expected reciprocal rank of ``scores[0]`` among ``scores`` under a random order
    of the guesses it ties with: the mean of 1/r over the ranks it could take."""
    above = sum(x > scores[0] for x in scores[1:])
    tied = sum(x == scores[0] for x in scores[1:])
    return sum(1.0 / r for r in range(above + 1, above + tied + 2)) / (tied + 1)


def chance_rr(candidates: int) -> float:
    """The mean reciprocal rank of a guess ranked at random among ``candidates``."""
    return sum(1.0 / r for r in range(1, candidates + 1)) / candidates


def message_key(text: str) -> str:
    """A message's identity in the hint tables (a hash of its text)."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def hint_ranks(
    listener: Listener,
    game: Any,
    prompts: Any,
    episodes: Sequence[dict[str, Any]],
    words: Sequence[str],
    *,
    k: int,
    seed: int,
    source: str = "eval",
) -> pa.Table:
    """One row per attacker message of every game (:data:`HINT_SCHEMA`); ``source``
    names the dialogues (the rows of several sources can be stacked)."""
    first_role, listener_role = game.roles
    rows: dict[str, list] = {f.name: [] for f in HINT_SCHEMA}
    pool = sorted(set(words))
    priors: dict[str, dict[str, float]] = {}

    def prior(history: Sequence[dict[str, Any]], secret: str, max_turns: int) -> dict[str, float]:
        """Each word's log-probability after the neutral dialogue of ``history``'s
        shape: the held-out words scored once per shape, a secret from outside them (a
        demonstration's) when first met. A word's score does not depend on which
        others are scored with it."""
        neutral = [{"role": m["role"], "content": NEUTRAL_MESSAGE} for m in history]
        prompt = game.play_prompt(prompts, neutral, listener_role, secret, max_turns)
        known = priors.setdefault(prompt, {})
        missing = [w for w in dict.fromkeys([*pool, secret]) if w not in known]
        if missing:
            scores = listener.logprobs(prompt, [game.guess_text(w) for w in missing])
            known.update(zip(missing, scores, strict=True))
        return known

    alone: dict[tuple[str, str], float] = {}

    def message_rr(message: dict[str, Any], secret: str, others: Sequence[str],
                   max_turns: int) -> float:  # fmt: skip
        """The message alone: its calibrated reciprocal rank, scored once per (secret,
        message)."""
        key = (secret, message["content"])
        if key not in alone:
            words_ = (secret, *others)
            prompt = game.play_prompt(prompts, [message], listener_role, secret, max_turns)
            scores = listener.logprobs(prompt, [game.guess_text(w) for w in words_])
            base = prior([message], secret, max_turns)
            alone[key] = reciprocal_rank([s - base[w] for s, w in zip(scores, words_, strict=True)])
        return alone[key]

    for ep in episodes:
        secret, history = ep["target_word"], ep["history"]
        others = distractors(words, secret, k, seed)
        # A message that broke the rules (Taboo: it says the word) grades nothing: the
        # listener would rank the secret first for it.
        outcome, n = game.judge(history, secret, ep["max_turns"])
        broken = n - 1 if game.rule_breaker(outcome) == first_role else None
        guesses = [game.guess_text(w) for w in (secret, *others)]
        turn = 0
        for i, message in enumerate(history):
            if message["role"] != first_role or i == broken:
                continue
            turn += 1
            prompt = game.play_prompt(prompts, history[: i + 1], listener_role, secret,
                                      ep["max_turns"])  # fmt: skip
            scores = listener.logprobs(prompt, guesses)
            rank = 1 + sum(s > scores[0] for s in scores[1:])
            base = prior(history[: i + 1], secret, ep["max_turns"])
            lifted = [s - base[w] for s, w in zip(scores, (secret, *others), strict=True)]
            rows["source"].append(source)
            rows["episode_id"].append(ep["episode_id"])
            rows["target_word"].append(secret)
            rows["policy_role"].append(ep.get("policy_role"))
            rows["message"].append(i)
            rows["attacker_turn"].append(turn)
            rows["rank"].append(rank)
            rows["reciprocal_rank"].append(1.0 / rank)
            rows["candidates"].append(len(guesses))
            rows["calibrated_rank"].append(1 + sum(c > lifted[0] for c in lifted[1:]))
            rows["message_rr"].append(message_rr(message, secret, others, ep["max_turns"]))
            rows["message_key"].append(message_key(message["content"]))
    return pa.table(rows, schema=HINT_SCHEMA)


def unique_dialogues(episodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episodes with each dialogue (secret and messages) kept once, in order: a
    dialogue read twice would count twice in the means and narrow their intervals."""
    seen: set = set()
    out = []
    for ep in episodes:
        key = (ep["target_word"], tuple((m["role"], m["content"]) for m in ep["history"]))
        if key not in seen:
            seen.add(key)
            out.append(ep)
    return out


def _bootstrap_mean(clusters: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """Mean of every value and its 95% percentile bootstrap interval, resampling whole
    clusters (a secret's games or dialogues). A percentile interval stays inside the
    values' range, as a reciprocal rank does (a normal one fell below 0 at a few
    games). Under two clusters the interval is unknown (nan)."""
    n = sum(len(c) for c in clusters)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = sum(map(sum, clusters)) / n
    lo, hi = cluster_bootstrap([sum(c) for c in clusters], [len(c) for c in clusters])
    return mean, lo, hi


def _unit(g: dict[str, Any]) -> tuple[str, str]:
    """What the bootstrap resamples: a secret of a source. Its games, or dialogues,
    share the secret and the distractors drawn for it, so they move together."""
    return g["source"], g["word"]


def _clusters(items: Sequence[tuple[Any, float]]) -> list[list[float]]:
    """Values grouped by their cluster key, in first-seen order."""
    out: dict[Any, list[float]] = {}
    for key, value in items:
        out.setdefault(key, []).append(value)
    return list(out.values())


def ranks_in(*tables: pa.Table) -> tuple[str, ...]:
    """The kinds of rank (:data:`RANKS`) every table holds: hint ranks scored before the
    calibrated rank existed hold only the raw one."""
    return tuple(k for k in RANKS if all(RANK_COLUMN[k] in t.column_names for t in tables))


def per_game(table: pa.Table, rank: str = "calibrated") -> dict[tuple[str, str], dict[str, Any]]:
    """Each game's reciprocal ranks (``rank``: calibrated, raw or message) after the
    attacker's first, last and best message, and their mean over its messages."""
    column = RANK_COLUMN[rank]
    if column not in table.column_names:
        raise SpagInputError(
            f"hint ranks without '{column}' (written before {rank} ranks were scored): "
            "score the hints again"
        )
    games: dict[tuple[str, str], dict[str, Any]] = {}
    for r in table.to_pylist():
        g = games.setdefault(
            (r["source"], r["episode_id"]),
            {"word": r["target_word"], "role": r["policy_role"], "source": r["source"],
             "episode": r["episode_id"], "ranks": []},
        )  # fmt: skip
        value = r[column] if rank == "message" else 1.0 / r[column]
        g["ranks"].append((r["attacker_turn"], value))
    for g in games.values():
        rr = [v for _, v in sorted(g["ranks"])]
        g.update(first=rr[0], last=rr[-1], best=max(rr), mean=sum(rr) / len(rr))
    return games


def variance_shares(table: pa.Table, rank: str) -> dict[str, float]:
    """How the messages' reciprocal ranks (``rank``) vary.

    ``identical_messages_share``: the share of the messages' variance left among
    identical messages of a secret (the within-(secret, message) sum of squares over the
    total): what the dialogue around a message changes.

    ``between_secrets_share``: eta squared by secret over the distinct (secret, message)
    pairs, each at its mean, so that a message said five times weighs as one. Even with
    no difference between secrets at all, k secrets among n pairs give a share of
    (k - 1) / (n - 1) on average (the expectation of eta squared when the values are
    shuffled across the same groups): ``between_secrets_chance``. What the secrets add
    beyond that, ``between_secrets_excess`` = (share - chance) / (1 - chance), is the
    chance-corrected share (epsilon squared's form), 0 on average when the secrets do
    not matter."""
    nan = {k: math.nan for k in ("between_secrets_share", "between_secrets_chance",
                                 "between_secrets_excess", "identical_messages_share")}  # fmt: skip
    column = RANK_COLUMN[rank]
    rows = table.to_pylist()
    values = [r[column] if rank == "message" else 1.0 / r[column] for r in rows]
    if not values or "message_key" not in table.column_names:
        return nan

    def squares(groups: list[list[float]]) -> tuple[float, float]:
        """The total and the within-group sums of squares of the grouped values."""
        flat = [v for g in groups for v in g]
        mean = sum(flat) / len(flat)
        within = sum(sum((v - sum(g) / len(g)) ** 2 for v in g) for g in groups)
        return sum((v - mean) ** 2 for v in flat), within

    by_pair: dict[tuple, list[float]] = {}
    for r, v in zip(rows, values, strict=True):
        by_pair.setdefault((r["target_word"], r["message_key"]), []).append(v)
    total, within_pairs = squares(list(by_pair.values()))
    if total == 0:
        return nan
    means = [sum(v) / len(v) for v in by_pair.values()]
    secrets = [secret for secret, _ in by_pair]
    pair_total, within_secrets = squares(_clusters(list(zip(secrets, means, strict=True))))
    k, n = len(set(secrets)), len(means)
    share = 1.0 - within_secrets / pair_total if pair_total > 0 else math.nan
    chance = (k - 1) / (n - 1) if n > 1 else math.nan
    excess = (share - chance) / (1.0 - chance) if chance < 1 else math.nan
    return {
        "between_secrets_share": share,
        "between_secrets_chance": chance,
        "between_secrets_excess": excess,
        "identical_messages_share": within_pairs / total,
    }


def summarize_hints(
    table: pa.Table, model: str, by: str = "role", rank: str = "calibrated"
) -> list[dict[str, Any]]:
    """Per role of the evaluated model (``by="role"``, and both) or per source of the
    dialogues (``by="source"``): mean reciprocal rank and top-1 rate of the secret
    (``rank``: calibrated, raw or message) after the attacker's first, last and best
    message and over its messages (mean; top-1: every message first), with 95%
    intervals; the shares of the messages' variance between secrets and among identical
    messages (:func:`variance_shares`); and the chance level of the MRR."""
    import pyarrow.compute as pc

    games = per_game(table, rank)
    groups = sorted({g[by] for g in games.values() if g[by]})
    column = "policy_role" if by == "role" else "source"
    candidates = table.column("candidates").to_pylist()
    out = []
    for group in [*groups, "all"]:
        sel = [g for g in games.values() if group in ("all", g[by])]
        row: dict[str, Any] = {"model": model, by: group, "rank": rank, "games": len(sel)}
        part = table if group == "all" else table.filter(pc.equal(table[column], group))
        row.update(variance_shares(part, rank))
        row["mrr_chance"] = chance_rr(max(candidates)) if candidates else math.nan
        for when in WHENS:
            m, lo, hi = _bootstrap_mean(_clusters([(_unit(g), g[when]) for g in sel]))
            row.update({f"mrr_{when}": m, f"mrr_{when}_lo": lo, f"mrr_{when}_hi": hi})
            # A rate: Wilson's interval, as the win rates (a normal one leaves [0, 1]).
            hits = sum(g[when] == 1 for g in sel)
            lo, hi = wilson_interval(hits, len(sel))
            rate = hits / len(sel) if sel else math.nan
            row.update({f"top1_{when}": rate, f"top1_{when}_lo": lo, f"top1_{when}_hi": hi})
        out.append(row)
    return out


def paired_difference(
    table: pa.Table,
    reference: pa.Table,
    pair_by: tuple[str, ...] = ("word", "role"),
    when: str = "best",
    rank: str = "calibrated",
) -> dict[str, float]:
    """The mean difference in reciprocal rank after the attacker's ``when`` message
    (first, last, best, or the mean over its messages; ``rank``: calibrated, raw or
    message), game by game on the same words and
    roles (or the same dialogues: ``pair_by=("source", "episode")``), with its 95%
    bootstrap interval (resampling secrets: a secret's games or dialogues move together)
    and each side's mean over the pairs (``mean``, ``reference_mean``)."""
    a, b = per_game(table, rank), per_game(reference, rank)
    key = lambda g: tuple(g[k] for k in pair_by)  # noqa: E731
    ref = {key(g): g[when] for g in b.values()}
    pairs = [(_unit(g), g[when], ref[key(g)]) for g in a.values() if key(g) in ref]
    if not pairs:
        return {"pairs": 0, f"mrr_{when}_diff": math.nan, "lo": math.nan, "hi": math.nan,
                "mean": math.nan, "reference_mean": math.nan}  # fmt: skip
    diff, lo, hi = _bootstrap_mean(_clusters([(u, x - y) for u, x, y in pairs]))
    return {
        "pairs": len(pairs),
        "mean": sum(x for _, x, _ in pairs) / len(pairs),
        "reference_mean": sum(y for _, _, y in pairs) / len(pairs),
        f"mrr_{when}_diff": diff,
        "lo": lo,
        "hi": hi,
    }
