#!/usr/bin/env bash
# The Kuhn Poker study: each config x reward scheme x seed, from nothing, as whole runs.
#   perf/results/kuhn-poker/run_study.sh tiny smollm2     (from the project root)
#   PEFT=lora perf/results/kuhn-poker/run_study.sh tiny   both stages train LoRA adapters:
#     the config overlay peft-<PEFT>.yaml beside this script (peft-lora.yaml: the default
#     adapter; peft-lora-lr10.yaml: the same at ten times the learning rates;
#     peft-spag-lora.yaml: M0 fully fine-tuned, the SPAG epochs with the adapter)
#   EPOCHS=6 perf/results/kuhn-poker/run_study.sh tiny   to M6 instead of the config's
#     epochs (folders <config>-m6-<scheme>-s<seed>)
#   METHOD=kl1 perf/results/kuhn-poker/run_study.sh tiny  the SPAG stage's overlay
#     method-<METHOD>.yaml beside this script (folders <config>[-m<N>]-<METHOD>-<scheme>-s<seed>)
# Each run is a fresh copy of the workflow under $STUDY_DIR (default /tmp/kuhn-study);
# its tables are copied here, to <config>[-<PEFT>]-<scheme>-s<seed>/, with its wall time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../../.." && pwd)
study=${STUDY_DIR:-/tmp/kuhn-study}
schemes=${SCHEMES:-winners zero_sum}
seeds=${SEEDS:-42 7}
peft=${PEFT:-}
epochs=${EPOCHS:-}
method=${METHOD:-}
for config in "$@"; do
  for scheme in $schemes; do
    for seed in $seeds; do
      name="$config${peft:+-$peft}${epochs:+-m$epochs}${method:+-$method}-$scheme-s$seed"
      wd="$study/$name"
      rm -rf "$wd" && mkdir -p "$wd"
      (cd "$project" && git ls-files -co --exclude-standard -- Snakefile config.yaml configs rules \
        data profiles report envs | tar cf - -T -) | tar xf - -C "$wd"
      files=("configs/kuhn-poker-$config.yaml")
      if [ -n "$peft" ]; then
        cp "$here/peft-$peft.yaml" "$wd/peft.yaml"
        files+=(peft.yaml)
      fi
      if [ -n "$method" ]; then
        cp "$here/method-$method.yaml" "$wd/method.yaml"
        files+=(method.yaml)
      fi
      # The project's commit (with "+dirty" for uncommitted changes): the code that runs.
      commit=$(git -C "$project" rev-parse --short HEAD)
      git -C "$project" diff --quiet HEAD -- workflow_scripts rules Snakefile || commit+=+dirty
      start=$(date +%s)
      (cd "$wd" && snakemake -c2 all --configfile "${files[@]}" \
        --config seed="$seed" "rewards={scheme: $scheme}" ${epochs:+epochs=$epochs} > snakemake.log 2>&1)
      end=$(date +%s)
      out="$here/$name"
      rm -rf "$out" && mkdir -p "$out/strategy"
      cp "$wd"/results/summary/{poker,epochs,eval_games}.tsv "$out/"
      cp "$wd"/results/eval/strategy/*.tsv "$out/strategy/"
      cp "$wd"/results/plots/exploitability.png "$out/"
      # Each training stage: Snakemake's benchmark (wall, peak memory) and the loss log
      # (tokens/s per step).
      mkdir -p "$out/train"
      for stage in imitation $(cd "$wd/results" && ls -d epoch* | sort -V); do
        cp "$wd/results/benchmarks/$stage/train.tsv" "$out/train/$stage.benchmark.tsv"
        cp "$wd/results/$stage/loss.tsv" "$out/train/$stage.loss.tsv"
      done
      printf 'config\tpeft\tmethod\tscheme\tseed\twall_s\tdate\tload\tcommit\n%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$config" "${peft:-none}" "${method:-paper}" "$scheme" "$seed" "$((end - start))" "$(date -u +%FT%TZ)" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" "$commit" > "$out/run.tsv"
      echo "$name: $((end - start)) s"
    done
  done
done
