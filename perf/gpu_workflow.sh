#!/usr/bin/env bash
# The workflow on a GPU, once: `snakemake spag_epoch1` on the embedded default (tiny
# model, `hf` backend) with the GPU rule families (self-play, scoring, training,
# evaluation: config resources.<family>.gpus) on the node's GPU, as on a workstation:
# the workflow profile (profiles/default), `--resources gpu=1` (the resource the rules
# declare: spag.ops.cluster.family_resources), and every GPU job leasing its GPU
# (spag.ops.gpu_lease: CUDA_VISIBLE_DEVICES unset, locks under the scratch folder).
#
#   bash perf/gpu_workflow.sh OUT            # on a node with one GPU (Snakemake stopped by 420 s)
#   bash perf/gpu_workflow.sh OUT --cpu      # the same run with every family on the CPU
#   bash perf/gpu_workflow.sh OUT --dry-run  # the GPU run's plan only (snakemake -n; the test)
#
# OUT (new or empty) gets at most 8 files, written under a .partial name and renamed when
# whole; summary.json, renamed last, says the run was collected ("complete": true):
#   summary.json    mode, limits, Snakemake's exit, jobs per rule, failures, versions
#   results.jsonl   one line per job: rule, wildcards, status (done, failed, stopped,
#                   not_started, planned), times from Snakemake's log, benchmark seconds,
#                   max RSS, its --device, the GPU it leased, a failed job's log tail
#   snakemake.log   Snakemake's output     status.txt   `spag status` of the run
#   log.txt         this script's steps    nvidia-smi.csv  1 s GPU samples (GPU mode)
#   jobs.tar.gz     every job's log and benchmark, Snakemake's log file, the overlay,
#                   the run's tables (*.tsv, *.json), per-process GPU samples, env.json
#
# On the node (no internet, no Snakemake in its image) the wheels of .whl/ (perf/gpu_wheels.sh)
# and .whl-workflow/ (perf/gpu_workflow_wheels.sh) are installed first into a folder of
# their own, ahead of the node's packages; `spag` is a wrapper on PATH running
# `python -m spag` with workflow_scripts/ on PYTHONPATH (what the entry point runs).
# Environment: PYTHON (python3), GW_WHEELS (folders of wheels; default ".whl
# .whl-workflow" on the GPU, none with --cpu or --dry-run), GW_LIMIT (seconds from the
# start by which Snakemake is stopped: 420 on the GPU, 1800 with --cpu), GW_GRACE (20:
# seconds before the limit from which no new job starts), GW_TARGET (spag_epoch1; several targets or files, space-separated),
# GW_WORK (scratch folder, kept; default a temporary one, removed).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${1:?usage: gpu_workflow.sh OUT [--cpu] [--dry-run]}
shift
MODE=gpu
DRY=0
for arg in "$@"; do
  case $arg in
    --cpu) MODE=cpu ;;
    --dry-run | -n) DRY=1 ;;
    *) echo "gpu_workflow.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
START=$(date +%s)
PY=$(command -v "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3}" >&2; exit 2; }
[[ $PY == /* ]] || PY=$REPO/$PY  # a venv's python: its own path, links not resolved
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -n $(ls -A "$OUT") ]]; then
  echo "gpu_workflow.sh: $OUT is not empty" >&2
  exit 2
fi
if [[ $MODE == gpu ]]; then LIMIT=${GW_LIMIT:-420}; else LIMIT=${GW_LIMIT:-1800}; fi
GRACE=${GW_GRACE:-20}
TARGET=${GW_TARGET:-spag_epoch1}
read -ra TARGETS <<<"$TARGET"
if [[ $MODE == gpu && $DRY == 0 ]]; then WHEELS=${GW_WHEELS-.whl .whl-workflow}; else WHEELS=${GW_WHEELS-}; fi
WORK=${GW_WORK:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RUN=$WORK/run
LOG=$OUT/log.txt.partial
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
say() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
say "gpu_workflow.sh: mode $MODE, dry run $DRY, target $TARGET, limit ${LIMIT}s, python $PY, work $WORK"

# -- wheels: one pip call into a folder of their own (one version of each name).
SITE=$WORK/site
WHEEL_STATUS=none
wheels=()
for dir in $WHEELS; do
  [[ -d $dir ]] || { say "wheels: no folder $dir"; WHEEL_STATUS=missing; continue; }
  for w in "$dir"/*.whl; do [[ -e $w ]] && wheels+=("$w"); done
done
if ((${#wheels[@]})); then
  dup=$(for w in "${wheels[@]}"; do basename "$w" | cut -d- -f1 | tr 'A-Z_.' 'a-z--'; done | sort | uniq -d)
  if [[ -n $dup ]]; then
    say "wheels: two versions of: $dup"
    WHEEL_STATUS=failed
  else
    t0=$(date +%s)
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --disable-pip-version-check --target "$SITE" "${wheels[@]}" >>"$LOG" 2>&1; then
      WHEEL_STATUS=installed
      say "wheels: ${#wheels[@]} installed into $SITE in $(($(date +%s) - t0))s"
    else
      WHEEL_STATUS=failed
      say "wheels: install failed (pip's output above)"
    fi
  fi
fi
[[ $WHEEL_STATUS == missing ]] && WHEEL_STATUS=failed
export PYTHONPATH="$SITE:$REPO/workflow_scripts${PYTHONPATH:+:$PYTHONPATH}"

# -- `spag` as the rules call it: the package's entry point is spag.cli:run, which is
# what `python -m spag` runs.
mkdir -p "$WORK/bin"
printf '#!/usr/bin/env bash\nexec "%s" -m spag "$@"\n' "$PY" >"$WORK/bin/spag"
chmod +x "$WORK/bin/spag"
export PATH="$WORK/bin:$PATH"
# As on a workstation: no scheduler chose the GPUs, each job leases its own.
ORIGINAL_CVD=${CUDA_VISIBLE_DEVICES-<unset>}
export SPAG_GPU_LOCKS=$WORK/gpu-locks
[[ $MODE == gpu ]] && unset CUDA_VISIBLE_DEVICES

# -- versions and where each comes from; CUDA on a GPU run.
"$PY" - "$WORK/env.json" "$SITE" "$MODE$DRY" "$ORIGINAL_CVD" <<'EOF' >>"$LOG" 2>&1
import json, os, platform, shutil, subprocess, sys
from importlib import metadata
out, site, mode, cvd = sys.argv[1:5]
names = ["snakemake", "torch", "transformers", "tokenizers", "accelerate", "huggingface-hub",
         "safetensors", "numpy", "pandas", "pyarrow", "lm-eval", "datasets", "deepspeed", "peft",
         "pydantic", "jsonschema", "textblob", "wordfreq", "tensorboard", "matplotlib", "httpx"]
env = {"python": platform.python_version(), "executable": sys.executable,
       "cpus": os.cpu_count(), "cuda_visible_devices_given": cvd, "versions": {}, "from_wheels": []}
for name in names:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        env["versions"][name] = None
        continue
    env["versions"][name] = dist.version
    if site and str(dist.locate_file("")).startswith(site):
        env["from_wheels"].append(name)
spag = shutil.which("spag")
env["spag"] = spag
env["spag_runs"] = subprocess.run([spag, "--help"], capture_output=True).returncode == 0
if mode == "gpu0":
    try:
        import torch
        env["cuda_build"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if env["cuda_available"]:
            env["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # recorded, the run goes on and shows it
        env["cuda_error"] = repr(exc)
    smi = shutil.which("nvidia-smi")
    if smi:
        env["nvidia_smi"] = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True).stdout.strip()
json.dump(env, open(out, "w"), indent=1)
print("env:", json.dumps(env))
EOF

# -- the run folder: the workflow's files, as a user's checkout has them, and the overlay.
mkdir -p "$RUN"
cp -r Snakefile config.yaml rules data profiles report envs "$RUN"/
if [[ $MODE == gpu ]]; then
  cat >"$RUN/overlay.yaml" <<'EOF'
# perf/gpu_workflow.sh: the embedded default (config.yaml) with its GPU rule families on
# the GPU; the light steps (cpu family) and building the tiny model stay on the CPU.
resources:
  selfplay: {gpus: 1}
  train: {gpus: 1}
  score: {gpus: 1}
  evaluate: {gpus: 1}
EOF
else
  printf '# perf/gpu_workflow.sh --cpu: the embedded default as it is (every family on the CPU).\n{}\n' >"$RUN/overlay.yaml"
fi

# -- GPU samples while Snakemake runs.
samplers=()
if [[ $MODE == gpu && $DRY == 0 ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu,utilization.memory,power.draw,clocks.sm,temperature.gpu \
    --format=csv -lms 1000 >"$OUT/nvidia-smi.csv.partial" 2>/dev/null &
  samplers+=($!)
  nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv -l 1 \
    >"$WORK/nvidia-smi-apps.csv" 2>/dev/null &
  samplers+=($!)
fi

# -- Snakemake, in a process group of its own (job control), so that at the limit it and
# its jobs are stopped together: first no new jobs (SIGTERM to Snakemake, GW_GRACE
# seconds before), then SIGINT to the group (Snakemake cancels, jobs end), then SIGKILL.
args=("${TARGETS[@]}" --configfile overlay.yaml --scheduler greedy --keep-going)
[[ $MODE == gpu ]] && args+=(--cores "$(nproc)" --resources gpu=1)
((DRY)) && args+=(-n)
SMK_RC=
TIMED_OUT=false
STOP_AT=
INT_AT=
SMK_START=$(date +%s)
if [[ $WHEEL_STATUS == failed ]]; then
  say "snakemake: not run (the wheels did not install)"
  : >"$OUT/snakemake.log.partial"
else
  say "snakemake: (cd run && python -m snakemake ${args[*]})"
  set -m
  (cd "$RUN" && exec "$PY" -m snakemake "${args[@]}") </dev/null >"$OUT/snakemake.log.partial" 2>&1 &
  smk=$!
  set +m
  stage=0
  while kill -0 "$smk" 2>/dev/null; do
    now=$(date +%s)
    if ((stage == 0 && now >= START + LIMIT - GRACE)); then
      say "limit: no new jobs (SIGTERM to Snakemake)"
      STOP_AT=$now
      TIMED_OUT=true
      kill -TERM "$smk" 2>/dev/null
      stage=1
    elif ((stage == 1 && now >= START + LIMIT)); then
      say "limit: stopping Snakemake and its jobs (SIGINT to the group)"
      INT_AT=$now
      kill -INT -- "-$smk" 2>/dev/null
      stage=2
    elif ((stage == 2 && now >= START + LIMIT + 10)); then
      say "limit: SIGKILL to the group"
      kill -KILL -- "-$smk" 2>/dev/null
      stage=3
    fi
    sleep 1
  done
  wait "$smk"
  SMK_RC=$?
  kill -KILL -- "-$smk" 2>/dev/null  # anything of the group still there
  say "snakemake: exit $SMK_RC after $(($(date +%s) - SMK_START))s"
fi
SMK_END=$(date +%s)
if ((${#samplers[@]})); then
  kill "${samplers[@]}" 2>/dev/null
  sleep 1
  kill -KILL "${samplers[@]}" 2>/dev/null
  wait "${samplers[@]}" 2>/dev/null
fi

# -- collection: spag status, one line per job, the summary, the tarball.
if [[ $WHEEL_STATUS != failed ]]; then
  (cd "$RUN" && timeout 60 spag status --configfile config.yaml overlay.yaml) >"$OUT/status.txt.partial" 2>&1 \
    || echo "(spag status: exit $?)" >>"$OUT/status.txt.partial"
fi
GW_MODE=$MODE GW_DRY=$DRY GW_TARGET=$TARGET GW_LIMIT=$LIMIT GW_GRACE=$GRACE GW_START=$START \
  GW_WHEEL_STATUS=$WHEEL_STATUS GW_WHEELS=$WHEELS GW_RC=$SMK_RC GW_STOP_AT=$STOP_AT GW_INT_AT=$INT_AT \
  GW_SMK_START=$SMK_START GW_SMK_END=$SMK_END GW_TIMED_OUT=$TIMED_OUT \
  "$PY" - "$OUT" "$RUN" "$WORK/env.json" <<'EOF' >>"$LOG" 2>&1
import json, os, re, sys, time
from pathlib import Path
out, run, env_file = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
E = os.environ
START = int(E["GW_START"])
meta = dict(mode=E["GW_MODE"], dry_run=E["GW_DRY"] == "1", target=E["GW_TARGET"],
            limit_s=int(E["GW_LIMIT"]), grace_s=int(E["GW_GRACE"]),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(START)),
            wheels=E["GW_WHEEL_STATUS"], wheel_folders=E["GW_WHEELS"].split())
rc, stop_at, int_at = E["GW_RC"], E["GW_STOP_AT"], E["GW_INT_AT"]
smk_start, smk_end = int(E["GW_SMK_START"]), int(E["GW_SMK_END"])
timed_out = E["GW_TIMED_OUT"] == "true"
unfinished = "planned" if meta["dry_run"] else ("stopped" if timed_out else "unfinished")
text = (out / "snakemake.log.partial").read_text(errors="replace").splitlines()

stamp_re = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
rule_re = re.compile(r"^(?:local)?rule (\S+):$")
field_re = re.compile(r"^    (\w+): (.*)$")
finished_re = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)")
error_re = re.compile(r"^Error in rule (\S+):$")
jobs, planned, now, block, err, in_stats = {}, {}, None, None, None, False
for line in text:
    if m := stamp_re.match(line):
        now = time.mktime(time.strptime(m[1], "%a %b %d %H:%M:%S %Y"))
        block = err = None
        continue
    if line.startswith("Job stats:"):
        in_stats = not planned
        continue
    if in_stats:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            planned[parts[0]] = int(parts[1])
        elif parts and parts[0] == "total":
            in_stats = False
        continue
    if m := rule_re.match(line):
        block, err = {"rule": m[1], "started": now, "fields": {}}, None
        continue
    if m := error_re.match(line):
        err, block = {"rule": m[1], "at": now}, None
        continue
    if m := finished_re.match(line):
        if m[1] in jobs:
            jobs[m[1]]["ended"], jobs[m[1]]["status"] = now, "done"
        continue
    if (m := field_re.match(line)) and (block or err):
        key, value = m[1], m[2]
        if err is not None:
            if key == "jobid" and value in jobs:
                j = jobs[value]
                j["ended"] = err["at"]
                # A job whose error came once its group was interrupted was ended by the stop.
                late = int_at and err["at"] is not None and err["at"] >= int(int_at) - 1
                j["status"] = "stopped" if late else "failed"
            continue
        block["fields"][key] = value
        if key == "jobid":
            jobs[value] = {"rule": block["rule"], "jobid": int(value), "started": block["started"],
                           "fields": block["fields"], "status": unfinished}
        continue
    if line.startswith("Shell command: ") and block and "jobid" in block["fields"]:
        jobs[block["fields"]["jobid"]]["shell"] = line[len("Shell command: "):]

def bench(path):
    try:
        head, row = (run / path).read_text().splitlines()[:2]
    except (OSError, ValueError):
        return {}
    cols = dict(zip(head.split("\t"), row.split("\t")))
    try:
        return {"bench_s": float(cols["s"]), "max_rss_mb": float(cols["max_rss"]),
                "cpu_s": float(cols["cpu_time"])}
    except (KeyError, ValueError):
        return {}

def tail(path, n=20):
    try:
        return (run / path).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return None

rows = []
for j in sorted(jobs.values(), key=lambda j: j["jobid"]):
    f = j.pop("fields")
    shell = j.pop("shell", "")
    row = {"rule": j["rule"], "jobid": j["jobid"], "status": j["status"]}
    if "wildcards" in f:
        row["wildcards"] = dict(kv.split("=", 1) for kv in f["wildcards"].split(", ") if "=" in kv)
    for key in ("started", "ended"):
        if j.get(key) and not meta["dry_run"]:
            row[key] = time.strftime("%H:%M:%S", time.localtime(j[key]))
    if j.get("started") and j.get("ended"):
        row["seconds"] = int(j["ended"] - j["started"])
    res = dict(kv.split("=", 1) for kv in f.get("resources", "").split(", ") if "=" in kv)
    row["gpu"] = int(res.get("gpu", 0))
    if m := re.search(r"--device (\S+)", shell):
        row["device"] = m[1]
    log = f.get("log", "").split(" (check")[0] or None
    row["log"], row["benchmark"] = log, f.get("benchmark")
    if row["benchmark"] and row["status"] == "done":
        row.update(bench(row["benchmark"]))
    if log and (run / log).exists():
        leased = re.findall(r"GPU\(s\) (\S+) leased", (run / log).read_text(errors="replace"))
        if leased:
            row["leased_gpu"] = leased[-1]
    if row["status"] in ("failed", "stopped", "unfinished") and log:
        row["log_tail"] = tail(log)
    rows.append(row)
# Jobs of the plan that never started (after a failure, or at the limit).
started = {}
for r in rows:
    started[r["rule"]] = started.get(r["rule"], 0) + 1
for rule, count in planned.items():
    if count > started.get(rule, 0):
        rows.append({"rule": rule, "status": "not_started", "count": count - started.get(rule, 0)})

per_rule = {}
for rule, count in planned.items():
    mine = [r for r in rows if r["rule"] == rule and "jobid" in r]
    # GPUs a job of the rule asked for (None: no job of it started, so not known).
    s = {"planned": count, "gpu": max(r["gpu"] for r in mine) if mine else None}
    for status in ("done", "failed", "stopped", "unfinished"):
        s[status] = sum(r["status"] == status for r in mine)
    secs = [r["bench_s"] for r in mine if "bench_s" in r]
    if secs:
        s["bench_s_sum"], s["bench_s_max"] = round(sum(secs), 2), round(max(secs), 2)
    per_rule[rule] = s
count = lambda st: sum(r.get("count", 1) for r in rows if r["status"] == st)
summary = {
    "complete": True, **meta,
    "snakemake": {"rc": int(rc) if rc else None, "timed_out": timed_out,
                  "seconds": smk_end - smk_start,
                  "stopped_after_s": int(stop_at) - START if stop_at else None},
    "jobs": {"planned": sum(planned.values()), "done": count("done"), "failed": count("failed"),
             "stopped": count("stopped"), "unfinished": count("unfinished"),
             "not_started": count("not_started"),
             "gpu_jobs_seen": sum(r.get("gpu", 0) > 0 for r in rows),
             "leased": sum("leased_gpu" in r for r in rows)},
    "per_rule": per_rule,
    "failed": [{k: r.get(k) for k in ("rule", "jobid", "wildcards", "log", "log_tail")}
               for r in rows if r["status"] == "failed"],
    "env": json.loads(env_file.read_text()) if env_file.exists() else None,
    "overlay": (run / "overlay.yaml").read_text() if (run / "overlay.yaml").exists() else None,
}
with open(out / "results.jsonl.partial", "w") as fh:
    for r in rows:
        fh.write(json.dumps(r) + "\n")
(out / "summary.json.partial").write_text(json.dumps(summary, indent=1))
j = summary["jobs"]
print(f"jobs: {j['planned']} planned, {j['done']} done, {j['failed']} failed, "
      f"{j['stopped']} stopped, {j['not_started']} not started; {j['leased']} leased a GPU")
EOF
[[ $? == 0 ]] || say "collection: the summary could not be made (its error above)"
# The tarball: logs, benchmarks, Snakemake's log file, the run's small tables.
cp "$WORK/env.json" "$RUN/env.json" 2>/dev/null
[[ -f $WORK/nvidia-smi-apps.csv ]] && cp "$WORK/nvidia-smi-apps.csv" "$RUN/"
(cd "$RUN" && find results .snakemake/log overlay.yaml env.json nvidia-smi-apps.csv \
  \( -path 'results/logs/*' -o -path 'results/benchmarks/*' -o -name '*.tsv' -o -name '*.json' \
  -o -name '*.txt' -o -name '*.log' -o -name '*.yaml' -o -name '*.csv' \) -type f 2>/dev/null \
  | grep -v '/model/\|/checkpoint' | tar -czf "$OUT/jobs.tar.gz.partial" -T - 2>>"$LOG")
say "collected: $(du -sh "$OUT" | cut -f1) in $OUT; total $(($(date +%s) - START))s"
# Whole: renamed, the summary last.
for f in log.txt results.jsonl snakemake.log status.txt nvidia-smi.csv jobs.tar.gz summary.json; do
  [[ -f $OUT/$f.partial ]] && mv "$OUT/$f.partial" "$OUT/$f"
done
# The table the device's reply shows (its last lines).
"$PY" - "$OUT/summary.json" <<'EOF' 2>/dev/null
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{'rule':22} {'gpu':>3} {'done':>5} {'fail':>4} {'stop':>4} {'plan':>4} {'bench s':>8}")
for rule, r in s["per_rule"].items():
    gpu = "-" if r["gpu"] is None else r["gpu"]
    print(f"{rule:22} {gpu:>3} {r['done']:>5} {r['failed']:>4} {r['stopped']:>4} {r['planned']:>4} {r.get('bench_s_sum', ''):>8}")
print("snakemake:", s["snakemake"], "| jobs:", s["jobs"])
for f in s["failed"]:
    print("FAILED", f["rule"], f.get("wildcards") or "", f["log"], "|", " / ".join((f.get("log_tail") or [])[-3:]))
EOF
[[ -z ${GW_WORK:-} ]] && rm -rf "$WORK"
# Failed jobs show in the summary; the script itself ends well once it collected.
[[ -f $OUT/summary.json ]]
