#!/usr/bin/env bash
# SPAG against its control arm (rewards.control: game samples weigh 0), per seed:
#   perf/results/control/run_study.sh default            (from the project root)
#   perf/results/control/run_study.sh kuhn-poker-tiny    (configs/<name>.yaml)
#   SCHEME=rae perf/results/control/run_study.sh smollm2-135m   (both arms under a
#                                                  reward scheme: rewards.scheme)
# The SPAG arm runs from nothing in a fresh copy of the workflow under $STUDY_DIR
# (default /tmp/control-study); the control arm runs in a copy of that folder with
# the switch on, so M0 and epoch 1's games are shared and everything after them is
# redone. Tables, the comparison and each arm's wall time are copied here, to
# <config>-s<seed>/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../../.." && pwd)
study=${STUDY_DIR:-/tmp/control-study}
seeds=${SEEDS:-42 7}
scheme=${SCHEME:-}
for config in "$@"; do
  configfile=()
  [ "$config" = default ] || configfile=(--configfile "configs/$config.yaml")
  case "$config" in kuhn-poker*) game=kuhn_poker ;; *) game=taboo ;; esac
  for seed in $seeds; do
    label="$config${scheme:+-$scheme}" && name="$label-s$seed"
    given="${scheme:+scheme: $scheme, }"  # the scheme, in both arms' rewards
    spag="$study/$name/spag" control="$study/$name/control" out="$here/$name"
    rm -rf "$study/$name" && mkdir -p "$spag"
    (cd "$project" && git ls-files -co --exclude-standard -- Snakefile config.yaml configs rules \
      data profiles report envs | tar cf - -T -) | tar xf - -C "$spag"
    start=$(date +%s)
    (cd "$spag" && snakemake -c2 all "${configfile[@]}" --config seed="$seed" \
      "rewards={${given}control: false}" > snakemake.log 2>&1)
    mid=$(date +%s)
    cp -a "$spag" "$control" && rm -rf "$control/checkpoints"  # SPAG's, not to resume
    (cd "$control" && snakemake -c2 all "${configfile[@]}" --config seed="$seed" \
      "rewards={${given}control: true}" > snakemake.log 2>&1)
    end=$(date +%s)
    rm -rf "$out" && mkdir -p "$out"
    spag compare-arms --spag "$spag" --control "$control" --game "$game" \
      --output "$out/arms.tsv"
    for arm in spag control; do
      mkdir -p "$out/$arm"
      cp "$study/$name/$arm"/results/summary/*.tsv "$out/$arm/"
    done
    printf 'config\tseed\tspag_wall_s\tcontrol_wall_s\tdate\tload\n%s\t%s\t%s\t%s\t%s\t%s\n' \
      "$label" "$seed" "$((mid - start))" "$((end - mid))" "$(date -u +%FT%TZ)" \
      "$(cut -d' ' -f1-3 /proc/loadavg)" > "$out/run.tsv"
    echo "$name: spag $((mid - start)) s, control $((end - mid)) s"
  done
done
