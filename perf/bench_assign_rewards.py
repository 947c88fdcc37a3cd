"""Benchmark of ``spag assign-rewards`` against a straightforward per-game implementation.

Generates synthetic episodes (about 5 turns per game, a mix of all outcomes),
runs ``spag assign-rewards`` as a subprocess (wall time, peak RSS of the child),
then runs the baseline: a per-game loop written the way the research code is
written (derivatives recomputed for every message, regular expressions given
as strings, samples built as dicts, JSON output). Both outputs are compared
(outcome counts, targets, rewards, weights) before the figures are reported.

    python perf/bench_assign_rewards.py [--episodes 50000] [--repeat 3]
        [--results perf/results/assign_rewards.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = [
    "apple",
    "river",
    "mountain",
    "candle",
    "window",
    "garden",
    "pencil",
    "bridge",
    "cloud",
    "guitar",
    "mouse",
    "child",
    "city",
    "knife",
    "bus",
    "sheep",
    "person",
    "story",
    "engine",
    "ticket",
    "market",
    "planet",
    "forest",
    "bottle",
    "letter",
    "doctor",
    "island",
    "winter",
    "coffee",
    "basket",
    "mirror",
    "ladder",
    "pocket",
    "hammer",
    "jacket",
    "camera",
    "rocket",
]
FILLER = [
    "Let us talk about something you enjoy doing on a quiet weekend.",
    "That sounds lovely; what do you usually bring along with you?",
    "I often think about places where people meet and share stories.",
    "Hmm, I am not sure what you are hinting at, can you say more?",
    "Imagine a busy morning in a small town near the coast.",
    "I would probably walk around and look at the shops first.",
    "What would you use if you needed to reach something very high?",
    "Maybe I would ask a friend for help or find a chair to stand on.",
    "Think of the things that keep you warm when the weather turns cold.",
    "A thick blanket, a hot drink and a good book, I suppose.",
]


def synthetic_history(rng: random.Random, word: str, max_turns: int) -> list[dict]:
    """A game whose end is drawn from a realistic mix of outcomes."""
    r = rng.random()
    if r < 0.26:
        end, how = rng.randint(1, 3), "mention"  # defender says the word
    elif r < 0.31:
        end, how = rng.randint(1, 3), "wrong_guess"
    elif r < 0.43:
        end, how = rng.randint(1, 3), "right_guess"
    elif r < 0.51:
        end, how = rng.randint(0, 2), "attacker_says"
    else:
        end, how = max_turns, "tie"
    history = []
    for t in range(max_turns):
        att = rng.choice(FILLER)
        if how == "attacker_says" and t == end:
            att = f"{att} It is a bit like a {word}."
        history.append({"role": "attacker", "content": att})
        if how == "attacker_says" and t == end:
            break
        dfd = rng.choice(FILLER)
        if t + 1 == end:
            if how == "mention":
                dfd = f"{dfd} Perhaps I would use my {word} for that."
            elif how == "wrong_guess":
                dfd = "I know the word! It is `lantern`!"
            elif how == "right_guess":
                dfd = f'I know the word! It is "{word}"!'
        history.append({"role": "defender", "content": dfd})
        if t + 1 == end and how != "tie":
            break
    return history


def distinct_words(n: int) -> list[str]:
    """The paper's shape: every game its own target word (the most frequent English
    words from wordfreq, alphabetic, 3 letters or more)."""
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", 400_000) if w.isalpha() and w.isascii() and len(w) > 2]
    if len(words) < n:
        raise SystemExit(f"wordfreq gives only {len(words)} distinct words, {n} asked")
    return words[:n]


def write_episodes(path: Path, n: int, seed: int = 0, distinct: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow_scripts"))
    from spag.data.tables import EPISODE_FIELDS

    rng = random.Random(seed)
    words = distinct_words(n) if distinct else [rng.choice(WORDS) for _ in range(n)]
    table = pa.Table.from_pydict(
        {
            "episode_id": [f"ep{i:06d}" for i in range(n)],
            "target_word": words,
            "max_turns": [5] * n,
            "history": [synthetic_history(rng, w, 5) for w in words],
        },
        schema=pa.schema(EPISODE_FIELDS),
    )
    pq.write_table(table, path)


# --- Baseline: the research code's structure, restated ---------------------------------

BASELINE = r"""
import json, random, re, sys
import pyarrow.parquet as pq
from textblob.en.inflect import pluralize

PREDICT = r"i know the word! it.{1,8}"
RULES = ["Rules of the game, {max_turns} turns. " * 20, "Another text, {max_turns} rounds. " * 20]
INSTRUCT = {"attacker": "You are the attacker. The target word is `{target_word}`.",
            "defender": "You are the defender. Find the target word."}

def derivatives(word):
    word = word.lower()
    forms = [word, word + "ing", word + "ed", pluralize(word)]
    return forms + [q + f + q for f in forms for q in ('"', "'", "`")]

def has_target_word(content, word):
    return any(d in content.lower() for d in derivatives(word))

def is_prediction(content):
    return re.search(PREDICT, content.lower()) is not None

def is_correct_prediction(content, word):
    return any(re.search(PREDICT + re.escape(d), content.lower()) for d in derivatives(word))

def outcome(history, word, max_turns):
    n = 0
    for m in history:
        n += 1
        if m["role"] == "defender":
            if is_prediction(m["content"]):
                return ("defender_wins" if is_correct_prediction(m["content"], word)
                        else "attacker_wins"), n
            elif has_target_word(m["content"], word):
                return "attacker_wins", n
        else:
            if has_target_word(m["content"], word) or is_prediction(m["content"]):
                return "attacker_broke_rules", n
        if n >= max_turns * 2:
            break
    return "tie", n

def query(history, word, max_turns):
    nxt = "attacker" if not history or history[-1]["role"] == "defender" else "defender"
    prefix = "\n" + random.choice(["\n - ", "\n### ", "\n## ", "\n\n"])
    a, q = random.choice([(nxt, "other"), ("Assistant", "Human"), ("A", "Q")])
    label = {nxt: a}
    s = ""
    for m in history:
        s += "{}{}: {}".format(prefix, label.get(m["role"], q), m["content"])
    rules = random.choice(RULES).format(max_turns=max_turns)
    return (prefix + "Rules: " + rules + "\n\n" + INSTRUCT[nxt].format(target_word=word)
            + s + prefix + a + ": ")

def main(inp, out, decay=0.8):
    random.seed(0)
    episodes = pq.read_table(inp).to_pylist()
    outputs, n_att, n_def = [], 0, 0
    for ep in episodes:
        res, n = outcome(ep["history"], ep["target_word"], ep["max_turns"])
        if res == "attacker_wins":
            n_att += 1; winner = "attacker"
        elif res == "defender_wins":
            n_def += 1; winner = "defender"
        else:
            continue
        coeff, total, rows = 1.0, 0.0, []
        for i, m in enumerate(ep["history"][:n]):
            if m["role"] != winner:
                continue
            coeff *= 1 / decay
            total += coeff
            rows.append({"type": "game", "role": winner, "episode_id": ep["episode_id"],
                         "turn": i, "query": query(ep["history"][:i], ep["target_word"],
                                                   ep["max_turns"]),
                         "target": m["content"].strip(), "coeff": coeff})
        for r in rows:
            r["reward"] = 1.0 * r.pop("coeff") / total
            outputs.append(r)
    n = n_att + n_def
    w = {"attacker": n / (2 * n_att) if n_att else 0.0,
         "defender": n / (2 * n_def) if n_def else 0.0}
    for r in outputs:
        r["weight"] = w[r["role"]]
    with open(out, "w") as f:
        json.dump(outputs, f, ensure_ascii=False, indent=2)

main(sys.argv[1], sys.argv[2])
"""


def run_once(cmd: list[str]) -> tuple[float, float, float]:
    """Wall time, peak RSS (MiB) and CPU time of one run of ``cmd``.

    Each run is started from a fresh interpreter, so that the children's
    resource usage is that one run's.
    """
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t0 = time.perf_counter(); p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "w = time.perf_counter() - t0\n"
        "sys.stderr.write(p.stderr.decode()[-2000:]) if p.returncode else None\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps([p.returncode, w, r.ru_maxrss / 1024, r.ru_utime + r.ru_stime]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True)
    rc, wall, peak, cpu = json.loads(out.stdout)
    if rc != 0:
        raise SystemExit(f"{cmd} failed ({rc}):\n{out.stderr}")
    return wall, peak, cpu


def measure_alternating(cmds: dict[str, list[str]], repeat: int) -> dict[str, dict]:
    """``repeat`` rounds, each running every command once in turn (so that a change in
    the machine's speed weighs on all sides); per side: every wall time, the best and
    median wall and CPU time, the largest peak RSS."""
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            runs[name].append(run_once(cmd))
    out = {}
    for name, rs in runs.items():
        walls = [r[0] for r in rs]
        cpus = [r[2] for r in rs]
        out[name] = {
            "walls": walls,
            "best": min(walls),
            "median": statistics.median(walls),
            "cpu": min(cpus),
            "cpu_median": statistics.median(cpus),
            "rss": max(r[1] for r in rs),
        }
    return out


def compare(samples_path: Path, baseline_path: Path) -> str:
    import pyarrow.parquet as pq

    ours = pq.read_table(samples_path).to_pylist()
    with open(baseline_path) as f:
        ref = json.load(f)
    if len(ours) != len(ref):
        return f"MISMATCH: {len(ours)} samples vs {len(ref)} in the baseline"
    for a, b in zip(ours, ref, strict=True):
        for key in ("role", "episode_id", "turn", "target"):
            if a[key] != b[key]:
                return f"MISMATCH in {key}: {a[key]!r} vs {b[key]!r}"
        for key in ("reward", "weight"):
            if abs(a[key] - b[key]) > 1e-9:
                return f"MISMATCH in {key}: {a[key]!r} vs {b[key]!r}"
    return f"identical ({len(ours)} samples: role, episode_id, turn, target, reward, weight)"


def run_shape(args, tmp: Path, distinct: bool) -> dict:
    import pyarrow.parquet as pq

    spag = [sys.executable, "-m", "spag"]
    episodes = tmp / "episodes.parquet"
    write_episodes(episodes, args.episodes, distinct=distinct)
    samples = tmp / "samples.parquet"
    cmd = [*spag, "assign-rewards", "--episodes", str(episodes), "--output", str(samples)]
    script = tmp / "baseline.py"
    script.write_text(BASELINE)
    base_out = tmp / "baseline.json"
    base_cmd = [sys.executable, str(script), str(episodes), str(base_out)]
    measured = measure_alternating({"ours": cmd, "base": base_cmd}, args.repeat)
    ours, base = measured["ours"], measured["base"]
    n_samples = pq.read_metadata(samples).num_rows
    words = len(set(pq.read_table(episodes, columns=["target_word"]).column(0).to_pylist()))
    return {
        "ours": ours,
        "base": base,
        "samples": n_samples,
        "words": words,
        "agreement": compare(samples, base_out),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--results", default="perf/results/assign_rewards.md")
    args = ap.parse_args()

    try:
        load = Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        load = "unknown"
    shapes = {}
    for name, distinct in (("distinct target words (the paper's shape)", True),
                           (f"{len(WORDS)} target words", False)):  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp_name:
            shapes[name] = run_shape(args, Path(tmp_name), distinct)

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rows, notes = [], []
    for name, r in shapes.items():
        o, b = r["ours"], r["base"]
        rows.append(
            f"| {name}: {r['words']} words | `spag assign-rewards` | {o['best']:.2f} | "
            f"{o['median']:.2f} | {o['cpu']:.2f} | {o['rss']:.0f} |\n"
            f"| | per-game baseline | {b['best']:.2f} | {b['median']:.2f} | {b['cpu']:.2f} | "
            f"{b['rss']:.0f} |"
        )
        notes.append(
            f"- {name}: {r['samples']} samples; speed-up {b['best'] / o['best']:.1f}x by best "
            f"wall time, {b['median'] / o['median']:.1f}x by median wall time, "
            f"{b['cpu'] / o['cpu']:.1f}x by CPU time; "
            f"outputs compared: {r['agreement']}.\n"
            f"  Wall times (s), ours: {', '.join(f'{w:.2f}' for w in o['walls'])}; "
            f"baseline: {', '.join(f'{w:.2f}' for w in b['walls'])}."
        )
    table = "\n".join(rows)
    summary = "\n".join(notes)
    report = f"""# `spag assign-rewards` benchmark

Measured {datetime.date.today().isoformat()} on a {os.cpu_count()}-core machine ({cpu}),
Python {platform.python_version()}; load average before the runs: {load}.

Command: `python perf/bench_assign_rewards.py --episodes {args.episodes} --repeat {args.repeat}`

Input: {args.episodes} synthetic episodes (5 turns at most, all four outcomes), in two
shapes: every game with its own target word (the paper plays each word once per
epoch), and games drawn from a few words. Both sides are whole processes: wall time
is the whole subprocess, interpreter start-up and Parquet I/O included; {args.repeat}
rounds, each running both sides in turn; best and median wall time over the rounds; CPU
time is user + system time of the child (best round); peak memory is the child's
maximum RSS (largest round).

| shape | implementation | best wall time (s) | median wall time (s) | CPU time (s) | peak RSS (MiB) |
|---|---|---:|---:|---:|---:|
{table}

{summary}

The baseline is a per-game loop written the way the research code is (derivatives
recomputed for every message, regular expressions given as strings, samples built as
dicts, JSON output). Budget: `spag assign-rewards` (one plain loop per game over the
table, the judge stating each rule once) at least as fast as that loop on the
distinct-words shape, as whole processes, under 1 GiB of peak memory.
"""
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
