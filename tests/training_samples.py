"""Sample tables for the training tests: game rows with varied query lengths, and SFT rows."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from spag.data.tables import SAMPLE_SCHEMA, write_parquet

WORDS = (
    "the game starts now tell me about a thing you use in a kitchen every day "
    "it is round and made of metal I know the word it is a pan what do you cook"
).split()


def sample_rows(n: int = 24, seed: int = 0, max_query_words: int = 40) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, max_query_words)))
        target = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10)))
        if i % 4 == 3:
            rows.append(
                dict(
                    type="sft",
                    role=None,
                    episode_id=None,
                    turn=None,
                    query=query,
                    target=target,
                    reward=1.0,
                    weight=1.0,
                )
            )
        else:
            rows.append(
                dict(
                    type="game",
                    role=rng.choice(["attacker", "defender"]),
                    episode_id=f"ep{i}",
                    turn=i % 5,
                    query=query,
                    target=target,
                    reward=rng.uniform(0.1, 0.6),
                    weight=rng.uniform(0.5, 1.5),
                )
            )
    return rows


def write_samples(path: Path, rows: list[dict]) -> Path:
    write_parquet(pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA), path)
    return path
