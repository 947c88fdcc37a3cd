"""The judge on the paper's shape: 50,000 games, each with its own target word.

Compares ``spag.judge.judge_game`` (the contract path, one game a call) with the judge
of an earlier revision (default 0c0b7f0, which compiled one regular expression per
target word for the correct-guess test), in one process, on the same synthetic games;
the outcomes must be identical.

    python perf/bench_judge.py [--games 50000] [--old-rev 0c0b7f0]
        [--results perf/results/judge.md]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import random
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow_scripts"))


def games(n: int, seed: int = 0):
    """``n`` games with distinct words; 60% end with a defender's guess (half right)."""
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 9))))
    out = []
    for w in sorted(words):
        length = rng.randint(2, 10)
        history = []
        for k in range(length):
            role = "attacker" if k % 2 == 0 else "defender"
            if role == "defender" and k == length - 1 and rng.random() < 0.6:
                text = f"I know the word! It is {w if rng.random() < 0.5 else 'house'}!"
            else:
                text = "Think about something you might find in a kitchen, near the window."
            history.append({"role": role, "content": text})
        out.append((history, w, 5))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=50_000)
    ap.add_argument("--old-rev", default="0c0b7f0")
    ap.add_argument("--results", default=str(REPO / "perf" / "results" / "judge.md"))
    args = ap.parse_args()
    # The package has lain under src/ and workflow_scripts/ in the history.
    for where in ("src/spag/judge.py", "workflow_scripts/spag/judge.py"):
        shown = subprocess.run(
            ["git", "show", f"{args.old_rev}:{where}"], cwd=REPO, capture_output=True, text=True
        )
        if shown.returncode == 0:
            source = shown.stdout
            break
    else:
        raise SystemExit(f"no judge.py in revision {args.old_rev}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "judge_old.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("judge_old", path)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    from spag import judge as new

    data = games(args.games)
    load = os.getloadavg()[0]
    results = {}
    for name, module in (("old", old), ("new", new)):
        started = time.perf_counter()
        outcomes = [module.judge_game(history, word, turns) for history, word, turns in data]
        results[name] = (outcomes, time.perf_counter() - started)
    if results["old"][0] != results["new"][0]:
        sys.exit("outcomes differ")
    t_old, t_new = results["old"][1], results["new"][1]
    lines = [
        "# The judge on 50,000 games with distinct target words",
        "",
        f"Date: {datetime.date.today()}; {os.cpu_count()} cores; load average at the start "
        f"{load:.1f}; command: `python perf/bench_judge.py --games {args.games}`.",
        "",
        f"`judge_game` in one process, {args.games} games (60% end with a defender's guess): "
        f"revision {args.old_rev} (one compiled pattern per word) **{t_old:.2f} s**, now "
        f"**{t_new:.2f} s** ({t_old / t_new:.1f}x); outcomes identical. Both compute the "
        "plural textblob gives for every word (now by the exact rule filter of `spag.judge`).",
        "",
    ]
    Path(args.results).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
