"""Tokenisation, masking, padding and length grouping of training samples (docs/design.md section 4).

A sample becomes ``[BOS] + query + target + [EOS]`` (BOS where the tokenizer uses one;
with ``prompt_format: chat`` the query is the chat rendering and EOS the template's
end-of-turn token, see :mod:`spag.models.rendering`); only the target tokens and the
final EOS are learned (query, BOS and padding carry the label ``IGNORE_INDEX``).
Query and target are tokenised separately, so the boundary between them is exact and
matches generation, where the model continues the tokenised prompt.
Too long a sample loses the oldest tokens of its query (left truncation); BOS is kept
so that the model always sees a well-formed start. A sample whose target is empty, or
whose target alone does not fit in ``max_length``, is skipped, counted and logged.
The same encoding is used by the scoring step and by training, so ``ref_logprob`` and
the policy's log-prob are taken over exactly the same tokens.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import torch

from spag.data.tables import REF_LOGPROB_FIELD, SAMPLE_FIELDS, require_columns
from spag.errors import SpagInputError
from spag.game.settings import GameSettings
from spag.models.rendering import PromptRenderer
from spag.training.losses import IGNORE_INDEX

log = logging.getLogger(__name__)

SKIP_EMPTY_TARGET = "empty target"
SKIP_TARGET_TOO_LONG = "target does not fit in max_length"


def pad_token_id(tokenizer) -> int:
    """The id used for padding: the tokenizer's pad token, else EOS (vocabulary never resized)."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    if tokenizer.eos_token_id is None:
        raise SpagInputError("the tokenizer has neither a pad token nor an EOS token")
    return int(tokenizer.eos_token_id)


@dataclass
class SkipReport:
    """Rows left out of training or scoring, by reason (row numbers of the input table)."""

    rows: dict[str, list[int]] = field(default_factory=dict)
    truncated: int = 0

    def add(self, reason: str, row: int) -> None:
        self.rows.setdefault(reason, []).append(row)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.rows.values())

    def log(self, source: str) -> None:
        if self.truncated:
            log.info("%s: %d sample(s) left-truncated to max_length", source, self.truncated)
        for reason, rows in self.rows.items():
            head = ", ".join(map(str, rows[:10])) + (" ..." if len(rows) > 10 else "")
            log.warning("%s: skipped %d sample(s): %s (rows %s)", source, len(rows), reason, head)
        if not self.rows:
            log.info("%s: no sample skipped", source)


def encode_pairs(
    tokenizer,
    queries: Sequence[str],
    targets: Sequence[str],
    max_length: int,
    prompt_format: str = GameSettings.prompt_format,
) -> tuple[list[tuple[list[int], int] | None], SkipReport]:
    """Encode (query, target) pairs as ``(input_ids, target_start)``, or None when skipped.

    ``target_start`` is the index in ``input_ids`` of the first learned token. The
    query is rendered and encoded exactly as ``spag play`` encodes a prompt
    (:class:`spag.models.rendering.PromptRenderer`); the target ends with the reply's end token.
    """
    if max_length < 3:
        raise SpagInputError(
            f"max_length must be at least 3 (BOS, one token, EOS), got {max_length}"
        )
    renderer = PromptRenderer(tokenizer, prompt_format)
    report = SkipReport()
    out: list[tuple[list[int], int] | None] = []
    for row, pair in enumerate(renderer.encode_pairs(queries, targets)):
        if pair is None:
            report.add(SKIP_EMPTY_TARGET, row)
            out.append(None)
            continue
        q, t = pair
        lead = renderer.lead
        room = max_length - len(lead) - len(t)
        if room < 0:
            report.add(SKIP_TARGET_TOO_LONG, row)
            out.append(None)
            continue
        if len(q) > room:
            q = q[len(q) - room :] if room > 0 else []
            report.truncated += 1
        out.append((lead + q + t, len(lead) + len(q)))
    return out, report


# Bounds of a sane sample: rewards are decayed game outcomes (a few units), and a mean
# log-probability is at most 0 (up to rounding).
MAX_ABS_REWARD = 1e4
REF_LOGPROB_SLACK = 1e-4


def check_sample_table(table: pa.Table, path: str | os.PathLike, need_ref: bool) -> pa.Table:
    """Check the sample contract (columns, types, values) and cast to it."""
    fields = [*SAMPLE_FIELDS, REF_LOGPROB_FIELD] if need_ref else list(SAMPLE_FIELDS)
    table = require_columns(table, fields, path)
    if table.num_rows == 0:
        raise SpagInputError(f"{path}: the sample table has no rows")
    for name in ("type", "query", "target"):
        nulls = table.column(name).null_count
        if nulls:
            row = table.column(name).to_pylist().index(None)
            raise SpagInputError(
                f"{path}: column '{name}' is null in {nulls} row(s), first row {row}"
            )
    types = table.column("type").to_pylist()
    bad = [i for i, t in enumerate(types) if t not in ("game", "sft")]
    if bad:
        raise SpagInputError(
            f"{path}: column 'type' must be 'game' or 'sft'; row {bad[0]} has {types[bad[0]]!r}"
        )
    for name in ("reward", "weight"):
        values = table.column(name).to_pylist()
        for i, (t, v) in enumerate(zip(types, values, strict=True)):
            if v is None and t == "game":
                raise SpagInputError(f"{path}: column '{name}' is null in game row {i}")
            if v is not None and not math.isfinite(v):
                raise SpagInputError(f"{path}: column '{name}' is not finite in row {i}")
            if v is not None and name == "weight" and v < 0:
                raise SpagInputError(f"{path}: column 'weight' is negative in row {i} ({v})")
            if v is not None and name == "reward" and abs(v) > MAX_ABS_REWARD:
                # SPAG's rewards are decayed game outcomes, a few units at most: such a value
                # is a bug upstream, and would make the loss and its gradient overflow.
                raise SpagInputError(
                    f"{path}: column 'reward' is {v} in row {i}, beyond +-{MAX_ABS_REWARD:g}"
                )
    if need_ref:
        refs = table.column("ref_logprob").to_pylist()
        for i, v in enumerate(refs):
            if v is not None and (not math.isfinite(v) or v > REF_LOGPROB_SLACK):
                raise SpagInputError(
                    f"{path}: column 'ref_logprob' is {v} in row {i}: a mean log-probability "
                    "is finite and at most 0; score the samples again with `spag score-ref`"
                )
    return table


def move_branches(
    table: pa.Table, tokenizer, path: str | os.PathLike, prompt_format: str
) -> list[dict | None]:
    """Per row, what reading its move needs, or None (instruction rows, rows without legal
    moves): ``forms`` (token ids of each legal move's forms, each a whole reply: the
    form's tokens and the end token, as a target is encoded), ``form_move`` (the legal
    move of each form, by index), ``n_moves`` and ``move`` (the index of the row's move
    among the legal ones, -1 when it names none or an illegal one). The forms are the game's (``Game.move_forms``), the game named in the
    table's metadata; tokenised as a target is, after the query. With the end token a
    form's probability is that of the reply being the form, so a reply that runs on
    after the move word ("callheck", a rule break in play) is outside every form."""
    from spag.data.tables import META_GAME
    from spag.game.base import load_game

    missing = [c for c in ("move", "legal_moves") if c not in table.column_names]
    name = (table.schema.metadata or {}).get(META_GAME)
    if missing or name is None:
        raise SpagInputError(
            f"{path}: the samples carry no legal moves (column "
            f"{missing[0] if missing else 'metadata spag.game'} missing): they come from a game "
            "without a closed move set, or from an older assign-rewards; make them again"
        )
    game = load_game(name.decode())
    renderer = PromptRenderer(tokenizer, prompt_format)
    tokens: dict[str, list[int]] = {}

    def form_ids(form: str) -> list[int]:
        if form not in tokens:
            (pair,) = renderer.encode_pairs(["."], [form])
            tokens[form] = list(pair[1])
        return tokens[form]

    out: list[dict | None] = []
    for kind, move, legal in zip(
        table.column("type").to_pylist(),
        table.column("move").to_pylist(),
        table.column("legal_moves").to_pylist(),
        strict=True,
    ):
        if kind != "game" or not legal:
            out.append(None)
            continue
        forms, form_move = [], []
        for i, m in enumerate(legal):
            for form in game.move_forms(m):
                forms.append(form_ids(form))
                form_move.append(i)
        out.append(
            {
                "forms": forms,
                "form_move": form_move,
                "n_moves": len(legal),
                "move": legal.index(move) if move in legal else -1,
            }
        )
    return out


def build_features(
    table: pa.Table,
    tokenizer,
    max_length: int,
    path: str | os.PathLike,
    with_ref: bool,
    prompt_format: str = GameSettings.prompt_format,
    moves: bool = False,
) -> tuple[list[dict], SkipReport]:
    """Encode a checked sample table into per-sample feature dicts (skips counted and logged).

    Each dict holds ``input_ids``, ``target_start``, ``reward``, ``weight``, ``is_sft``,
    ``episode``, ``row`` and, with ``with_ref``, ``ref_logprob``. With ``moves`` a game row
    with legal moves also holds :func:`move_branches`' fields (and, with ``with_ref``,
    ``ref_move_logprob`` where its move is legal).
    """
    queries = table.column("query").to_pylist()
    targets = table.column("target").to_pylist()
    types = table.column("type").to_pylist()
    rewards = table.column("reward").to_pylist()
    weights = table.column("weight").to_pylist()
    refs = table.column("ref_logprob").to_pylist() if with_ref else None
    # Which game each sample came from, as a small integer an objective can group by
    # (e.g. an advantage normalised within a game); -1 for an instruction row.
    episode_ids = table.column("episode_id").to_pylist()
    episodes: dict[str, int] = {}
    encoded, report = encode_pairs(tokenizer, queries, targets, max_length, prompt_format)
    report.log(str(path))
    branches = move_branches(table, tokenizer, path, prompt_format) if moves else None
    ref_moves = None
    if moves and with_ref:
        if "ref_move_logprob" not in table.column_names:
            raise SpagInputError(
                f"{path}: no column 'ref_move_logprob': score the samples again with "
                "`spag score-ref` on packed rows (padding_free)"
            )
        ref_moves = table.column("ref_move_logprob").to_pylist()
    features = []
    for row, enc in enumerate(encoded):
        if enc is None:
            continue
        is_sft = types[row] == "sft"
        feat = {
            "input_ids": enc[0],
            "target_start": enc[1],
            "reward": 1.0 if rewards[row] is None else float(rewards[row]),
            "weight": 1.0 if weights[row] is None else float(weights[row]),
            "is_sft": is_sft,
            "episode": -1
            if episode_ids[row] is None
            else episodes.setdefault(episode_ids[row], len(episodes)),
            "row": row,
        }
        if refs is not None:
            ref = refs[row]
            if ref is None or not math.isfinite(ref):
                raise SpagInputError(
                    f"{path}: column 'ref_logprob' is missing or not finite in row {row}, "
                    "a sample that fits in max_length (score it again with the same max_length)"
                )
            feat["ref_logprob"] = float(ref)
        if branches is not None and branches[row] is not None:
            feat.update(branches[row])
            if ref_moves is not None and feat["move"] >= 0:
                ref_move = ref_moves[row]
                if ref_move is None or not math.isfinite(ref_move):
                    raise SpagInputError(
                        f"{path}: column 'ref_move_logprob' is missing or not finite in row "
                        f"{row}, whose move is legal (score the samples again)"
                    )
                feat["ref_move_logprob"] = float(ref_move)
        features.append(feat)
    if not features:
        raise SpagInputError(
            f"{path}: every sample was skipped ({report.total} rows); nothing to learn"
        )
    return features, report


class SampleDataset(torch.utils.data.Dataset):
    """Pre-tokenised samples (a list of feature dicts)."""

    def __init__(self, features: list[dict]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict:
        return self.features[i]

    @property
    def lengths(self) -> list[int]:
        return [len(f["input_ids"]) for f in self.features]

    @property
    def is_sft(self) -> list[bool]:
        return [bool(f["is_sft"]) for f in self.features]


@dataclass
class SampleCollator:
    """Right-pad a list of features into tensors; labels mask query, BOS and padding."""

    pad_id: int

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        n = len(features)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((n, width), dtype=torch.long)
        labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long)
        for i, f in enumerate(features):
            ids = torch.tensor(f["input_ids"], dtype=torch.long)
            input_ids[i, : len(ids)] = ids
            attention_mask[i, : len(ids)] = 1
            labels[i, f["target_start"] : len(ids)] = ids[f["target_start"] :]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            **sample_columns(features),
        }


def sample_columns(features: list[dict]) -> dict[str, torch.Tensor]:
    """The per-sample tensors of a batch (reward, weight, is_sft, episode, and ref_logprob
    where every feature has one, with ``ref_move_logprob`` beside it where the batch has
    moves' branches), whatever the token layout: what an objective's loss
    may read (``spag.training.objectives``)."""
    columns = {
        "reward": torch.tensor([f["reward"] for f in features], dtype=torch.float32),
        "weight": torch.tensor([f["weight"] for f in features], dtype=torch.float32),
        "is_sft": torch.tensor([f["is_sft"] for f in features], dtype=torch.bool),
        "episode": torch.tensor([f.get("episode", -1) for f in features], dtype=torch.long),
    }
    if all("ref_logprob" in f for f in features):
        columns["ref_logprob"] = torch.tensor(
            [f["ref_logprob"] for f in features], dtype=torch.float32
        )
    if "ref_logprob" in columns and any("move" in f for f in features):
        # Whenever the batch has moves' branches, even if none of its rows names a legal
        # move (all rule breaks): 0 there, the loss reads it only where one is named.
        columns["ref_move_logprob"] = torch.tensor(
            [f.get("ref_move_logprob", 0.0) for f in features], dtype=torch.float32
        )
    return columns


class LengthGroupedSampler(torch.utils.data.Sampler):
    """Shuffled order in which every run of ``batch_size`` indices has similar lengths.

    Indices are shuffled and cut into groups of ``group_size``; inside a group the samples
    are sorted by length and cut into batches; the batches are then shuffled as wholes.
    The order depends only on ``seed`` and the epoch, so a resumed run sees the same data
    order. Consecutive batches go to different ranks under data parallelism.

    With ``is_sft`` the grouping is stratified by type: a group keeps the SFT/game pattern
    of its shuffled slots, and each type's samples, sorted by length, fill that type's
    slots. Every batch thus holds the mix of SFT and game samples that a random batch would
    (the batch compositions are exactly those of cutting the shuffled indices), which the
    SPAG loss needs since it divides each term by its count in the batch; sorting by length
    alone would make most batches all-SFT or all-game when the two types differ in length.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int,
        group_size: int | None = None,
        is_sft: Sequence[bool] | None = None,
    ):
        self.lengths = list(lengths)
        if is_sft is not None and len(is_sft) != len(self.lengths):
            raise ValueError(f"is_sft has {len(is_sft)} flags for {len(self.lengths)} samples")
        self.is_sft = None if is_sft is None else [bool(s) for s in is_sft]
        self.batch_size = max(1, batch_size)
        size = group_size or max(64 * self.batch_size, 256)
        # A whole number of batches per group: batch boundaries stay where the loader cuts.
        self.group_size = -(-size // self.batch_size) * self.batch_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(self.order())

    def order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(len(self.lengths), generator=g).tolist()
        batches: list[list[int]] = []
        for start in range(0, len(perm), self.group_size):
            group = self._fill_by_length(perm[start : start + self.group_size])
            batches.extend(
                group[j : j + self.batch_size] for j in range(0, len(group), self.batch_size)
            )
        # Only whole batches move, so each keeps its lengths and its mix; a short last
        # batch stays last so that the loader's batch boundaries match ours.
        tail = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        shuffled = torch.randperm(len(batches), generator=g).tolist()
        return [i for b in [*(batches[k] for k in shuffled), *tail] for i in b]

    def _fill_by_length(self, slots: list[int]) -> list[int]:
        """The samples of ``slots``, longest first within each type, in that type's slots."""
        kinds = [False] * len(slots) if self.is_sft is None else [self.is_sft[i] for i in slots]
        longest_first = {
            kind: iter(
                sorted(
                    (i for i, k in zip(slots, kinds, strict=True) if k == kind),
                    key=lambda i: -self.lengths[i],
                )
            )
            for kind in set(kinds)
        }
        # Each type walks its sorted list through its own slots, so the rows of one type in
        # a batch are neighbours in length, and long rows of both types share batches.
        return [next(longest_first[k]) for k in kinds]
