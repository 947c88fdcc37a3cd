#!/usr/bin/env bash
# Wheels the GPU check (perf/gpu_first_contact.sh) needs beyond a CUDA node's own
# PyTorch image (Python 3.12, torch, transformers 5.17, accelerate, numpy, pandas,
# pyarrow), fetched here into .whl/ (ignored by git) for a node without internet:
# transformers 5.23 (5.17's TrainingArguments lacks activation_checkpointing), DeepSpeed
# 0.19.8 (a pure-Python wheel built from its sdist, no ops compiled) and its pydantic,
# peft 0.21.2 (the node's own is of another release). About 19 MB in all. Versions as
# pyproject.toml pins them (and as .venv resolved). Not wordfreq (57 MB of data): the
# check's self-play words are a fixed list (perf/bench_selfplay.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf .whl
mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform any)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d .whl \
  transformers==5.23.0 peft==0.21.2 hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 \
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl deepspeed==0.19.8
du -ch .whl/*.whl | tail -1
