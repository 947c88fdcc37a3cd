"""Compare two runs' results folders file by file: are the outputs byte-identical?

    python perf/compare_runs.py BEFORE_CHECKOUT AFTER_CHECKOUT

Each checkout has run the same target from nothing (``snakemake spag_epoch3``). Every
file under ``results/`` present in both is hashed (SHA-256) and sorted into:

- identical: the same bytes;
- timing only: a TSV whose columns other than timings (``*_per_s``, ``*seconds``) are
  equal (loss curves, epoch summaries; a column only one side has is named);
- expected to differ: job records, logs, benchmarks, trackers' event files, and the
  files that record a run's folder, time or trackers' run name (reasoning scores'
  ``model_path``/``elapsed_s``, a model's ``spag_training.json`` and the manifest listing
  its size);
- different: anything else (what the comparison is for).

Files only one side has are listed (new evaluation steps, trackers' folders). Exit
status 1 when a file is different.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pandas as pd

EXPECTED = (".job.json", ".log", "spag_training.json", "spag_manifest.json")
EXPECTED_DIRS = ("benchmarks", "logs", "tracking")
TIMING = ("_per_s", "seconds")


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tsv_timing_only(a: Path, b: Path) -> str | None:
    """A note when two TSVs differ only in timing columns (and in added columns)."""
    try:
        x, y = pd.read_csv(a, sep="\t"), pd.read_csv(b, sep="\t")
    except (pd.errors.ParserError, UnicodeDecodeError):
        return None
    shared = [c for c in x.columns if c in y.columns and not c.endswith(TIMING)]
    if len(x) != len(y) or not x[shared].equals(y[shared]):
        return None
    added = [c for c in y.columns if c not in x.columns]
    gone = [c for c in x.columns if c not in y.columns]
    return f"added {added}, gone {gone}" if added or gone else ""


def _reasoning_same(a: Path, b: Path) -> bool:
    import json

    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    for d in (x, y):
        d.pop("model_path", None)
        d.pop("elapsed_s", None)
    return x == y


def main() -> int:
    before, after = (Path(a) / "results" for a in sys.argv[1:3])
    fa, fb = _files(before), _files(after)
    counts = {"identical": 0, "timing only": 0, "expected to differ": 0}
    by_suffix: dict[str, int] = {}
    different = []
    for name in sorted(set(fa) & set(fb)):
        a, b = fa[name], fb[name]
        if _sha(a) == _sha(b):
            counts["identical"] += 1
            suffix = Path(name).suffix or "(none)"
            by_suffix[suffix] = by_suffix.get(suffix, 0) + 1
        elif name.split("/")[0] in EXPECTED_DIRS or name.endswith(EXPECTED):
            counts["expected to differ"] += 1
        elif name.startswith("eval/reasoning/") and _reasoning_same(a, b):
            counts["expected to differ"] += 1
        elif name.endswith(".tsv") and (note := _tsv_timing_only(a, b)) is not None:
            counts["timing only"] += 1
            print(f"timing only: {name} {note}".rstrip())
        else:
            different.append(name)
    print("identical by kind:", ", ".join(f"{k} {v}" for k, v in sorted(by_suffix.items())))
    for key, value in counts.items():
        print(f"{key}: {value}")
    print(f"different: {len(different)}", *different, sep="\n  ")
    for label, only in (("only before", set(fa) - set(fb)), ("only after", set(fb) - set(fa))):
        shown = sorted({n.split("/")[0] + "/" + n.split("/")[1] for n in only if "/" in n})
        print(f"{label}: {len(only)} files, under {shown}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
