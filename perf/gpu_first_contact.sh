#!/usr/bin/env bash
# The GPU check (perf/gpu_first_contact.py) as one command, each step in its own
# process under its own time limit; everything lands in OUT as it is measured.
#
#   bash perf/gpu_first_contact.sh OUT          # on a node with one GPU
#   bash perf/gpu_first_contact.sh OUT --cpu    # toy sizes on the CPU (the test's mode)
#
# Wheels in .whl/ (perf/gpu_wheels.sh fetches them) are installed first into a folder
# of their own, ahead of the node's packages. PYTHON picks the interpreter (python3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_first_contact.sh OUT [--cpu]}
shift
MODE=("$@")
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=${GFC_WORK:-$(mktemp -d)}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)

if compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl >>"$OUT/log.txt" 2>&1 || echo "wheels: install failed" >>"$OUT/log.txt"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/workflow_scripts${PYTHONPATH:+:$PYTHONPATH}"

smi=
if [[ " ${MODE[*]} " != *" --cpu "* ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,power.draw,clocks.sm \
    --format=csv -lms 1000 >"$OUT/nvidia-smi.csv" 2>/dev/null &
  smi=$!
fi

# One step: its own process and limit; a failure or time-out is recorded, the rest go on.
# GFC_STEPS names the steps to run (all by default; models always, the others need it).
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  [[ -n ${GFC_STEPS:-} && $name != models && " $GFC_STEPS " != *" $name "* ]] && return
  t0=$(date +%s)
  echo "== $name (limit ${limit}s) $(date -u +%FT%TZ)" >>"$OUT/log.txt"
  timeout -k 10 "$limit" "$PY" perf/gpu_first_contact.py "$name" --out "$OUT" --work "$WORK" \
    "${MODE[@]}" "$@" >>"$OUT/log.txt" 2>&1
  rc=$?
  printf '{"step": "%s", "what": "done", "ok": %s, "rc": %d, "seconds": %d}\n' "$name" \
    "$([[ $rc == 0 ]] && echo true || echo false)" "$rc" "$(($(date +%s) - t0))" >>"$OUT/results.jsonl"
}

# The steps' limits add up to 580 s (run 1 on an H200 took 395 s in all, training 230 s
# with its last pairing cut); the device's calls last 600 s at most. selfplay runs
# only when GFC_STEPS names it (with the steps its issue needs, under 480 s); with
# GFC_BEFORE set to a checkout of an earlier commit (untracked files travel to the
# device: `mkdir -p perf/.before && git archive COMMIT workflow_scripts | tar -x -C
# perf/.before`), its code runs beside this one.
step env 30
step models 50
step generation 60
[[ " ${GFC_STEPS:-} " == *" selfplay "* ]] && step selfplay 300
step invariance 85
step scoring 75
step training 280 --step-limit 120

[[ -n $smi ]] && kill "$smi" 2>/dev/null
echo "== total $(($(date +%s) - start))s" >>"$OUT/log.txt"
[[ -z ${GFC_WORK:-} ]] && rm -rf "$WORK"
# Failed steps show in results.jsonl ("ok": false); the check itself ends well.
exit 0
