#!/usr/bin/env bash
# Wheels that `snakemake spag_epoch1` (perf/gpu_workflow.sh) needs on a CUDA node
# without internet beyond its image (Python 3.12, torch, accelerate, numpy, pandas,
# pyarrow, tokenizers, huggingface-hub 1.33, requests, jinja2, pyyaml, psutil, ...) and
# beyond .whl/ (perf/gpu_wheels.sh: transformers 5.23, pydantic, peft, DeepSpeed),
# fetched here into .whl-workflow/ (git-ignored). Versions are
# what .venv has installed (pip freeze). 17.0 MiB; with .whl/ (18.3) and the working
# tree (9.9) 45.2 MiB of the device's 64 (2026-12-02).
#
# Left out, and why (an import trace of `snakemake spag_epoch1` on the embedded default
# showed none of them loaded, except where said):
# - wordfreq (57 MB: frequency data of ~40 languages) and its ftfy, langcodes, locate,
#   wcwidth: replaced by a stand-in wheel, wordfreq 3.1.1+toplist, that holds wordfreq
#   3.1.1's own top-20000 English list, which is all `spag target-words` and the plan-time
#   word check read (spag.data.words: WORDFREQ_LANG, WORDFREQ_TOP_N). Same words.
# - PuLP (16 MB: bundles the CBC solver): Snakemake's ILP scheduler only (imported if
#   there, falls back without); gpu_workflow.sh runs with --scheduler greedy.
# - snakemake-executor-plugin-slurm, -slurm-jobstep: SLURM only (loaded where installed).
# - conda-inject (--sdm conda), nbformat and its fastjsonschema, jupyter-core,
#   traitlets (notebook rules), gitpython, gitdb, smmap (git-hosted workflow sources),
#   connection_pool (never imported; no wheel on PyPI): Snakemake requirements that a
#   local run of this workflow does not import.
# - nltk: textblob's package imports it, but the judge loads textblob's inflect.py alone
#   (spag.game.taboo._textblob_pluralize).
# - evaluate, pytablewriter, rouge-score, sqlitedict, word2number, more-itertools:
#   lm-eval requirements that spag_tiny_reasoning and `spag eval-reasoning` never
#   import (rouge-score, sqlitedict and word2number have no wheels either).
# - huggingface-hub 2.4 (with httpx2, httpcore2), pandas 3.1.1 (12 MB; --with-pandas
#   adds it), pyarrow 26, numpy 2.4, tokenizers 0.23.3, torch 2.13: the node's own
#   serve (the GPU check ran on them); gpu_workflow.sh records the node's versions.
#
#   bash perf/gpu_workflow_wheels.sh                # fetch into .whl-workflow/, print sizes
#   bash perf/gpu_workflow_wheels.sh --with-pandas  # and .venv's pandas (57 MiB in all)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=.whl-workflow
# Snakemake and what it imports in a local run, then the package's own needs.
NAMES=(
  snakemake snakemake-interface-common snakemake-interface-executor-plugins
  snakemake-interface-logger-plugins snakemake-interface-report-plugins
  snakemake-interface-scheduler-plugins snakemake-interface-storage-plugins
  argparse-dataclass configargparse docutils dpath humanfriendly immutables platformdirs
  smart-open sqlmodel sqlalchemy greenlet tenacity throttler yte
  jsonschema jsonschema-specifications referencing rpds-py
  textblob lm-eval datasets dill multiprocess
)
case ${1:-} in
  --with-pandas) NAMES+=(pandas) ;;
  "") ;;
  *) echo "usage: perf/gpu_workflow_wheels.sh [--with-pandas]" >&2; exit 2 ;;
esac
# Pinned to .venv: NAME==VERSION as installed there (fails where one is missing).
mapfile -t PINS < <("$PY" - "${NAMES[@]}" <<'EOF'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    print(f"{name}=={metadata.version(name)}")
EOF
)
rm -rf "$DEST"
mkdir -p "$DEST"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d "$DEST" "${PINS[@]}" 2>&1 \
  | grep -v "^WARNING: Location" || true
got=$(compgen -G "$DEST/*.whl" | wc -l)
if ((${#PINS[@]} != ${#NAMES[@]} || got != ${#NAMES[@]})); then
  echo "gpu_workflow_wheels.sh: ${#PINS[@]} pins and $got wheels for ${#NAMES[@]} names" >&2
  exit 1
fi
# The wordfreq stand-in: wordfreq's own list, read here from .venv's wordfreq.
"$PY" - "$DEST" <<'EOF'
import base64, hashlib, sys, zipfile
from importlib import metadata
from pathlib import Path

import wordfreq

real = metadata.version("wordfreq")
version = f"{real}+toplist"
lang, top_n = "en", 20000  # spag.data.words.WORDFREQ_LANG, WORDFREQ_TOP_N
words = wordfreq.top_n_list(lang, top_n)
init = f'''"""Stand-in for wordfreq {real} on a node without its 57 MB of data (built by
perf/gpu_workflow_wheels.sh): its top {top_n} words of {lang!r}, nothing else."""
from pathlib import Path

__version__ = "{version}"
_LANG, _N = {lang!r}, {top_n}


def top_n_list(lang, n, wordlist="best", ascii_only=False):
    if lang != _LANG or n > _N or wordlist != "best" or ascii_only:
        raise LookupError(
            f"this stand-in holds wordfreq's top {{_N}} words of {{_LANG!r}} only, "
            f"asked for {{n}} of {{lang!r}} ({{wordlist}}, ascii_only={{ascii_only}})"
        )
    text = (Path(__file__).parent / "top_{lang}_{top_n}.txt").read_text(encoding="utf-8")
    return text.split("\\n")[:n]
'''
info = f"wordfreq-{version}.dist-info"
files = {
    "wordfreq/__init__.py": init,
    f"wordfreq/top_{lang}_{top_n}.txt": "\n".join(words),
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: wordfreq\nVersion: {version}\n"
    f"Summary: wordfreq {real}'s top {top_n} {lang} words only (spag's GPU workflow run)\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: spag-gpu-workflow\n"
    "Root-Is-Purelib: true\nTag: py3-none-any\n",
}


def digest(text):
    raw = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


record = "".join(f"{p},{digest(t)},{len(t.encode())}\n" for p, t in files.items())
files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
out = Path(sys.argv[1]) / f"wordfreq-{version}-py3-none-any.whl"
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for path, text in files.items():
        z.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), text)
EOF
ls -1 "$DEST"
# Sizes as the device counts them (bytes of what travels), in MiB.
mib() { awk '{s += $1} END {printf "%.1f", s / 1048576}'; }
w=$(stat -c %s "$DEST"/*.whl | mib)
o=$( (compgen -G ".whl/*.whl" >/dev/null && stat -c %s .whl/*.whl) | mib)
t=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | mib)
echo "$DEST: $w MiB; .whl: $o MiB; working tree: $t MiB; together $(echo "$w $o $t" | awk '{printf "%.1f", $1 + $2 + $3}') MiB of 64"
compgen -G ".whl/*.whl" >/dev/null || echo "note: .whl/ is empty; the workflow needs it too (perf/gpu_wheels.sh)"
