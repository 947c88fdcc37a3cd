"""Which demonstrations give SmolLM2-135M an M0 that plays the game?

For each choice of imitation data, in a fresh copy of the workflow with
``configs/smollm2-135m.yaml`` and ``evaluation.opponent: base``, builds M0 and plays
the evaluation games of M0 and of the base model against the base model (the
held-out words, both roles, greedy): M0's rule-break, decisive and win rates per
role with 95% Wilson intervals, the opponent's own games (base against base), and
the paired difference between the choices' M0s on the same words.

Choices:
- ``shipped``: the shipped demonstration games (``data/demo_games.json``), imitated
  at 5e-5 for two passes (the config's imitation step until this study);
- ``shipped-gentle``: the shipped games, imitated more gently (``imitation.learning_rate``
  1e-5 and one pass: the config's imitation step since this study);
- ``self-teacher``: the base model is its own teacher (``data.imitation: teacher``,
  ``data.teacher.model: results/base_model``), sampled under its chat template,
  several games per word; M0 imitates the winner of every decisive game.

Each choice's games are kept in ``<results>/<choice>.json``, and the README is written
from every choice measured so far, so one choice can be measured again alone. A choice
whose run fails (e.g. teacher games that no defender won, refused naming
``data.teacher``) is reported with the error that stopped it.

Usage: python perf/bench_m0_demos.py [--choices shipped self-teacher]
           [--results perf/results/smollm2-m0-demos] [--workroot DIR] [--report-only]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "perf"))

import time  # noqa: E402

from bench_real_model import diff_cell, rate_cell  # noqa: E402
from bench_workflow import seconds_table  # noqa: E402
from workflow_utils import make_workdir, snakemake  # noqa: E402

CHOICES: dict[str, dict] = {
    # Both imitation steps spelled out: the study does not move with the config.
    "shipped": {"imitation": {"learning_rate": 5.0e-5, "num_train_epochs": 2}},
    "shipped-gentle": {"imitation": {"learning_rate": 1.0e-5, "num_train_epochs": 1}},
    "self-teacher": {
        "data": {
            "imitation": "teacher",
            "teacher": {
                "model": "results/base_model",
                "games_per_word": 4,
                "temperature": 0.7,
                "top_k": 50,
                "max_new_tokens": 24,
                "num_shards": 2,
            },
        }
    },
}
TARGETS = ("results/eval/games/imitation.parquet", "results/eval/games/base.parquet")


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = _merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def rates_line(label: str, games: list[dict], role: str) -> str:
    from spag.evaluation.paired import METRICS
    from spag.game.taboo import TABOO

    mine = [g for g in games if role in ("all", g["role"])]
    n = len(mine)
    cells = [
        rate_cell(sum(METRICS[metric](TABOO, g["outcome"], g["role"]) for g in mine), n)
        for metric in ("broke_rules", "decisive", "win")
    ]
    ties = sum(g["outcome"] == "tie" for g in mine)
    return f"| {label} | {role} | " + " | ".join(cells) + f" | {ties} |"


def paired_line(label: str, rows: dict, role: str) -> str:
    r = rows[role]
    cells = [
        diff_cell(tuple(r[f"{m}_diff{s}"] for s in ("", "_lo", "_hi", "_p")))
        for m in ("broke_rules", "decisive", "win")
    ]
    return f"| {label} | {role} | " + " | ".join(cells) + f" | {r['pairs']} |"


def _error_lines(stderr: str) -> str:
    """The lines of a failed run that say why (a step's error, Snakemake's own)."""
    keep = [
        line.strip()
        for line in stderr.splitlines()
        if "error" in line.lower() and "Error in rule" not in line
    ]
    return "\n".join(dict.fromkeys(keep)) or stderr.strip()[-2000:]


def _load(run: dict) -> str:
    start = run.get("load_start")
    shown = f"{start:.1f} at the start, " if start is not None else "not recorded at the start, "
    return shown + f"{run['load_end']:.1f} at the end"


def measure(name: str, root: Path, overlay: dict) -> dict:
    """One choice from nothing: its M0's and the base model's games, or why it failed."""
    from spag.evaluation.games import judged_games
    from spag.game.taboo import TABOO

    wd = make_workdir(root / name, _merge(overlay, CHOICES[name]))
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = snakemake(wd, *TARGETS, timeout=3 * 3600)
    secs = time.perf_counter() - t0
    run: dict = dict(
        choice=name,
        overlay=CHOICES[name],
        started=started,
        load_start=load,
        load_end=os.getloadavg()[0],
        secs=secs,
        ok=res.returncode == 0,
    )
    outcomes = wd / "results" / "teacher" / "outcomes.tsv"
    run["teacher_outcomes"] = outcomes.read_text().strip() if outcomes.exists() else None
    if res.returncode != 0:
        run["error"] = _error_lines(res.stderr)
        print(f"{name}: failed after {secs / 60:.1f} min in {wd}:\n{run['error']}", flush=True)
        return run
    print(f"{name}: {secs / 60:.1f} min in {wd}", flush=True)
    keep = ("word", "role", "outcome")
    run["m0"] = [{k: g[k] for k in keep} for g in judged_games(wd / TARGETS[0], game=TABOO)[0]]
    run["base"] = [{k: g[k] for k in keep} for g in judged_games(wd / TARGETS[1], game=TABOO)[0]]
    run["seconds_table"] = seconds_table(wd)
    return run


def main() -> None:
    from spag.evaluation.paired import paired_rows
    from spag.game.taboo import TABOO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "smollm2-135m.yaml"))
    ap.add_argument("--choices", nargs="+", default=list(CHOICES), choices=list(CHOICES))
    ap.add_argument("--results", default=str(REPO / "perf" / "results" / "smollm2-m0-demos"))
    ap.add_argument("--workroot", default=None, help="folder of the runs (default: temporary)")
    ap.add_argument(
        "--report-only", action="store_true", help="write the README from the saved choices"
    )
    args = ap.parse_args()
    overlay = yaml.safe_load(Path(args.config).read_text())
    overlay = _merge(overlay, {"evaluation": {"opponent": "base"}})
    root = Path(args.workroot or tempfile.mkdtemp(prefix="spag-m0-"))
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    for name in [] if args.report_only else args.choices:
        run = measure(name, root, overlay)
        (out / f"{name}.json").write_text(json.dumps(run, indent=1) + "\n")
    runs = {}
    for name in CHOICES:
        saved = out / f"{name}.json"
        if saved.exists():
            runs[name] = json.loads(saved.read_text())
    done = {n: r for n, r in runs.items() if r["ok"]}
    lines = [
        "# Demonstrations for SmolLM2-135M's M0",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores. Command: "
        f"`python perf/bench_m0_demos.py --choices {' '.join(CHOICES)}` "
        f"(configs/{Path(args.config).name}, `evaluation.opponent: base`; targets "
        f"{', '.join(TARGETS)}); each choice's date and load below.",
        "",
        "Evaluation games: greedy, on the held-out words, each word once per role, against "
        "the base model under the chat template. Counts with 95% Wilson intervals. "
        "`decisive`: won by either side by play (not a rule break, not a tie); `win`: from "
        "the evaluated model's side (as defender, the opponent's rule break is a win).",
        "",
        "| M0 from | role | broke rules | decisive | wins | ties |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in done.items():
        for role in ("attacker", "defender", "all"):
            lines.append(rates_line(name, run["m0"], role))
    if done:
        first = next(iter(done.values()))
        lines += [
            "",
            "The opponent's own games (the base model against itself, same words):",
            "",
            "| model | role | broke rules | decisive | wins | ties |",
            "|---|---|---|---|---|---|",
            *(rates_line("base", first["base"], role) for role in ("attacker", "defender", "all")),
        ]
    for name, run in done.items():
        rows = paired_rows(run["m0"], run["base"], names=("M0", "base"), game=TABOO)
        lines += [
            "",
            f"Paired, M0 from {name} minus the base model on the same words and roles "
            "(95% bootstrap interval over words, exact McNemar p; read an effect only where "
            "the interval excludes 0 and p < 0.05):",
            "",
            "| difference | role | broke rules | decisive | wins | pairs |",
            "|---|---|---|---|---|---|",
            *(
                paired_line(f"M0 ({name}) - base", rows, role)
                for role in ("attacker", "defender", "all")
            ),
        ]
    names = list(done)
    if len(names) > 1:
        a, b = names[1], names[0]
        rows = paired_rows(done[a]["m0"], done[b]["m0"], names=(a, b), game=TABOO)
        lines += [
            "",
            f"Paired, M0 from {a} minus M0 from {b} on the same words and roles "
            "(95% bootstrap interval over words, exact McNemar p):",
            "",
            "| difference | role | broke rules | decisive | wins | pairs |",
            "|---|---|---|---|---|---|",
            *(paired_line(f"{a} - {b}", rows, role) for role in ("attacker", "defender", "all")),
        ]
    for name, run in runs.items():
        state = "" if run["ok"] else ", **failed**"
        lines += [
            "",
            f"## `{name}`: {run['secs'] / 60:.1f} min wall from nothing{state}",
            "",
            f"Started {run['started']}; load average {_load(run)}; "
            f"config overlay: `{json.dumps(run['overlay'])}`.",
            "",
        ]
        if run["teacher_outcomes"]:
            lines += ["Teacher games (judged):", "", "```", run["teacher_outcomes"], "```", ""]
        if not run["ok"]:
            lines += ["Stopped by:", "", "```", run["error"], "```", ""]
        else:
            lines += run["seconds_table"]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/README.md")


if __name__ == "__main__":
    main()
