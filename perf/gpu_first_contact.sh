#!/usr/bin/env bash
# The GPU check (perf/gpu_first_contact.py), each step in its own process under its own
# time limit; everything lands in OUT as it is measured.
#
#   GFC_CALL=1 bash perf/gpu_first_contact.sh OUT         # one call on a node with one GPU
#   GFC_CALL=1 bash perf/gpu_first_contact.sh OUT --cpu   # toy sizes on the CPU (the test's)
#   GFC_CALL=all bash perf/gpu_first_contact.sh OUT       # every call's steps, one run
#   GFC_STEPS="env graphs" bash perf/gpu_first_contact.sh OUT   # named steps (models always)
#   GFC_PLAN=1 GFC_CALL=1 bash perf/gpu_first_contact.sh OUT    # print the plan, run nothing
#
# Calls (GFC_CALL=N): a lent machine runs a command 10 minutes at most and brings back 8
# files of OUT, so each call's limits with their kill grace (and the wheels') stay within
# 480 s and it writes at most 8 files (tests/test_gpu_first_contact.py checks both from
# GFC_PLAN). Each call starts from nothing (a fresh node): it builds the models again.
#   1  env, models, generation, graphs, invariance, scoring     470 s, 3 files
#   2  env, models, training (scoring its own samples)          460 s, 3 files
#   3  env, models, selfplay                                    460 s, 3 files
#   4  env, models, shape7b: build, generate, score, lora       450 s, 5 files
#   5  env, models, shape7b: cpu_adam (beside), build, score,   470 s, 3 files
#      full, offload
# Files: results.jsonl, log.txt, nvidia-smi.csv (GPU only); call 4 adds
# profile_lora.txt and trace_lora.json.gz. `all` runs every step once (a cluster node
# without a time limit: no lent machine's call holds it).
#
# Wheels in .whl/ (perf/gpu_wheels.sh fetches them) are installed first into a folder
# of their own, ahead of the node's packages. PYTHON picks the interpreter (python3).
# GFC_WORK keeps the models and samples (default: a temporary folder, removed).
# selfplay with GFC_BEFORE set to a checkout of an earlier commit (untracked files travel
# to the device: `mkdir -p perf/.before && git archive COMMIT workflow_scripts | tar -x
# -C perf/.before`) runs its code beside this one.
#
# shape7b measures LLaMA-2-7B's shape (random weights, 6.74B parameters) at the paper's
# sizes: shape7b_build builds it on the GPU in bf16 and saves it with the big model's
# tokenizer; shape7b_generate plays Taboo self-play with as many slots as the hf
# backend's sizing fits (768 games); shape7b_score scores 128 samples of up to 2,048
# tokens, packed, in bf16; shape7b_lora, shape7b_full and shape7b_offload train at 2
# samples of up to 2,048 tokens a micro-batch with activation checkpointing: LoRA r=32 on
# the bf16 base, full fine-tuning under ZeRO-3 (skipped where `spag training-memory` puts
# it above the card) and the paper's ZeRO-3 with CPU offload, whose CPU Adam
# shape7b_cpu_adam builds from the start, beside the other steps. Each records its times,
# tokens/s, share of the card's bf16 rate and peak memory against its estimate.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: GFC_CALL=N|all gpu_first_contact.sh OUT [--cpu]}
shift
MODE=("$@")
PY=${PYTHON:-python3}
PLAN=${GFC_PLAN:-}
GRACE=10 # seconds a step has after its limit's SIGTERM before SIGKILL

declare -A CALLS=(
  [1]="env generation graphs invariance scoring"
  [2]="env training"
  [3]="env selfplay"
  [4]="env shape7b_build shape7b_generate shape7b_score shape7b_lora"
  [5]="env shape7b_cpu_adam shape7b_build shape7b_score shape7b_full shape7b_offload"
  [all]="env generation graphs invariance scoring training selfplay shape7b"
)
CALL_NAMES="1 2 3 4 5 all"
# What a step writes into OUT beside every call's own files.
FILES="results.jsonl log.txt nvidia-smi.csv"
declare -A WRITES=([shape7b_lora]="profile_lora.txt trace_lora.json.gz")

if [[ -n ${GFC_CALL:-} ]]; then
  STEPS=${CALLS[$GFC_CALL]:-}
  [[ -n $STEPS ]] || { echo "GFC_CALL: one of $CALL_NAMES" >&2; exit 2; }
elif [[ -n ${GFC_STEPS:-} ]]; then
  STEPS=$GFC_STEPS
else
  echo "name a call (GFC_CALL=1..5, all) or steps (GFC_STEPS): see the script's top" >&2
  exit 2
fi

if [[ -n $PLAN ]]; then
  echo "plan calls $CALL_NAMES"
  echo "plan files $FILES"
else
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  WORK=${GFC_WORK:-$(mktemp -d)}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)

WHEELS_LIMIT=40
if [[ -n $PLAN ]]; then
  echo "plan wheels $WHEELS_LIMIT $GRACE" # counted whether or not .whl/ is there
elif compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d)
  timeout -k "$GRACE" "$WHEELS_LIMIT" "$PY" -m pip install -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl >>"$OUT/log.txt" 2>&1 ||
    echo "wheels: install failed" >>"$OUT/log.txt"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/workflow_scripts${PYTHONPATH:+:$PYTHONPATH}"

smi=
if [[ -z $PLAN && " ${MODE[*]} " != *" --cpu "* ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,power.draw,clocks.sm \
    --format=csv -lms 1000 >"$OUT/nvidia-smi.csv" 2>/dev/null &
  smi=$!
fi

# Is a step named? models always (every other step needs it); a step GROUP_PART where
# the steps name GROUP or GROUP_PART.
named() {
  [[ $1 == models || " $STEPS " == *" $1 "* || " $STEPS " == *" ${1%%_*} "* ]]
}

# One step: its own process and limit; a failure or time-out is recorded, the rest go on.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  named "$name" || return 0
  if [[ -n $PLAN ]]; then
    echo "plan step $name $limit $GRACE ${WRITES[$name]:-}"
    return 0
  fi
  t0=$(date +%s)
  echo "== $name (limit ${limit}s) $(date -u +%FT%TZ)" >>"$OUT/log.txt"
  timeout -k "$GRACE" "$limit" "$PY" perf/gpu_first_contact.py "$name" --out "$OUT" \
    --work "$WORK" "${MODE[@]}" "$@" >>"$OUT/log.txt" 2>&1
  rc=$?
  printf '{"step": "%s", "what": "done", "ok": %s, "rc": %d, "seconds": %d}\n' "$name" \
    "$([[ $rc == 0 ]] && echo true || echo false)" "$rc" "$(($(date +%s) - t0))" >>"$OUT/results.jsonl"
}

# CPU Adam compiles on the CPU beside the steps on the GPU; the offload step waits for it.
adam=
if named shape7b_cpu_adam; then
  if [[ -n $PLAN ]]; then
    echo "plan background shape7b_cpu_adam 240 $GRACE"
  else
    step shape7b_cpu_adam 240 &
    adam=$!
  fi
fi
step env 30
step models 50
step generation 60
step graphs 60
step invariance 85
step scoring 75
# Pairings of 120 s at most (run 4 on an H200: 6 pairings in about 200 s).
step training 300 --step-limit 120
step selfplay 300
step shape7b_build 50
step shape7b_generate 120
step shape7b_score 40
step shape7b_lora 50
step shape7b_full 80
if named shape7b_cpu_adam; then
  [[ -n $PLAN ]] && echo "plan wait shape7b_cpu_adam"
  [[ -n $adam ]] && wait "$adam"
fi
step shape7b_offload 110

[[ -n $PLAN ]] && exit 0
[[ -n $smi ]] && kill "$smi" 2>/dev/null
echo "== total $(($(date +%s) - start))s" >>"$OUT/log.txt"
[[ -z ${GFC_WORK:-} ]] && rm -rf "$WORK"
# Failed steps show in results.jsonl ("ok": false); the check itself ends well.
exit 0
