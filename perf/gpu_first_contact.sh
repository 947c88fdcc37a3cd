#!/usr/bin/env bash
# The GPU check (perf/gpu_first_contact.py) as one command, each step in its own
# process under its own time limit; everything lands in OUT as it is measured.
#
#   bash perf/gpu_first_contact.sh OUT          # on a node with one GPU
#   bash perf/gpu_first_contact.sh OUT --cpu    # toy sizes on the CPU (the test's mode)
#
#   GFC_STEPS="shape7b" bash perf/gpu_first_contact.sh OUT   # LLaMA-2-7B's shape alone
#
# Wheels in .whl/ (perf/gpu_wheels.sh fetches them) are installed first into a folder
# of their own, ahead of the node's packages. PYTHON picks the interpreter (python3).
#
# shape7b (only where GFC_STEPS names it; a sub-step shape7b_NAME also alone, given a
# GFC_WORK that holds what the earlier ones made) measures LLaMA-2-7B's shape (random
# weights, 6.74B parameters) at the paper's sizes: shape7b_build builds it on the GPU in
# bf16 and saves it with the big model's tokenizer; shape7b_generate plays Taboo
# self-play with as many slots as the hf backend's sizing fits (768 games); shape7b_score
# scores 128 samples of up to 2,048 tokens, packed, in bf16; shape7b_lora, shape7b_full
# and shape7b_offload train at 2 samples of up to 2,048 tokens a micro-batch with
# activation checkpointing: LoRA r=32 on the bf16 base, full fine-tuning under ZeRO-3
# (skipped where `spag training-memory` puts it above the card) and the paper's ZeRO-3
# with CPU offload, whose CPU Adam shape7b_cpu_adam builds from the start, beside the
# other steps. Each records its times, tokens/s, share of the card's bf16 rate and peak
# memory against its estimate. With models its limits add up to 455 s: one device call
# of 8 minutes (perf/results/gpu/README.md, "The 7B shape").
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
# GFC_STEPS names the steps to run (all by default; models always, the others need it);
# a step GROUP_PART runs where it names GROUP or GROUP_PART.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  [[ -n ${GFC_STEPS:-} && $name != models && " $GFC_STEPS " != *" $name "* &&
    " $GFC_STEPS " != *" ${name%%_*} "* ]] && return
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
# perf/.before`), its code runs beside this one. shape7b too runs only where named
# (see the top).
adam=
if [[ " ${GFC_STEPS:-} " == *" shape7b"* ]]; then
  step shape7b_cpu_adam 240 & # compiles on the CPU beside the steps on the GPU
  adam=$!
fi
step env 30
step models 50
step generation 60
[[ " ${GFC_STEPS:-} " == *" selfplay "* ]] && step selfplay 300
step invariance 85
step scoring 75
step training 280 --step-limit 120
if [[ -n $adam ]]; then
  step shape7b_build 50
  step shape7b_generate 75
  step shape7b_score 40
  step shape7b_lora 50
  step shape7b_full 80
  wait "$adam"
  step shape7b_offload 110
fi

[[ -n $smi ]] && kill "$smi" 2>/dev/null
echo "== total $(($(date +%s) - start))s" >>"$OUT/log.txt"
[[ -z ${GFC_WORK:-} ]] && rm -rf "$WORK"
# Failed steps show in results.jsonl ("ok": false); the check itself ends well.
exit 0
