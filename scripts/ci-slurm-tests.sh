#!/usr/bin/env bash
# Run the project's SLURM tests on a local one-node cluster: start it (as root, unless
# one already answers), run `pytest -m slurm` under `timeout -k`, stop what was started.
#
# Usage:  scripts/ci-slurm-tests.sh [pytest args...]
#   SPAG_SLURM_TESTS_TIMEOUT   overall limit for pytest (default 20m)
#   SPAG_SLURM_START_ARGS      arguments for start-slurm.sh (default --no-install when the
#                              packages are present)
# Exits with pytest's status (124 if the limit was hit).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .venv/bin/activate ] && . .venv/bin/activate
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

started=0
stop() { if [ "$started" = 1 ]; then scripts/stop-slurm.sh || true; fi; }
trap stop EXIT

if sinfo -h >/dev/null 2>&1; then
  echo "[ci-slurm] a SLURM cluster already answers: using it"
elif [ "$(id -u)" = 0 ]; then
  default_args=""
  dpkg -s slurmctld slurmd slurm-client munge >/dev/null 2>&1 && default_args="--no-install"
  # shellcheck disable=SC2086  # word splitting of the argument list is intended
  scripts/start-slurm.sh ${SPAG_SLURM_START_ARGS:-$default_args}
  started=1
else
  echo "[ci-slurm] no cluster and not root: the slurm tests will skip" >&2
fi

# A hung status check must not hang CI: timeout ends pytest (and its snakemake runs).
timeout -k 60 "${SPAG_SLURM_TESTS_TIMEOUT:-20m}" python -m pytest -m slurm -v "$@"
