"""Replies cut by each cap, read from games played under a generous cap.

    python perf/cut_rate.py EPISODES.parquet [...]

A reply of n tokens (its EOS included) would be cut under any cap below n. Exact for
a game's first message; later messages would have followed other histories under a
smaller cap, so read their rates as estimates. Rows by speaker (self-play; or the
evaluated model and its opponent) and role.
"""

import sys
from collections import defaultdict

import pyarrow.parquet as pq

CAPS = (24, 32, 48, 64, 96, 128)


def main() -> None:
    for path in sys.argv[1:]:
        report(path)


def report(path: str) -> None:
    rows = pq.read_table(path).to_pylist()
    lengths = defaultdict(list)
    for r in rows:
        policy = r.get("policy_role")
        for m, n in zip(r["history"], r["message_tokens"], strict=True):
            who = (
                "self-play" if policy is None else ("model" if m["role"] == policy else "opponent")
            )
            lengths[(who, m["role"])].append(n)
    longest = max(max(v) for v in lengths.values())
    cut = sum(r["truncated_replies"] for r in rows)
    print(f"\n## {path}: {len(rows)} games, longest reply {longest} tokens, {cut} replies cut\n")
    print(
        "| speaker | role | replies | median tokens | "
        + " | ".join(f"cut at {c}" for c in CAPS)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(CAPS))
    for (who, role), v in sorted(lengths.items()):
        v = sorted(v)
        med = v[len(v) // 2]
        cells = [f"{sum(n > c for n in v) / len(v):.0%}" for c in CAPS]
        print(f"| {who} | {role} | {len(v)} | {med} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
