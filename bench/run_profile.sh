#!/usr/bin/env bash
# What profiling costs and what its traces show, on this machine: the CNN training step
# with profiling off and on (bench_profile, median of rounds, method printed) on the CPU
# backend and, when the CUDA plugin loads, on the GPU with CUDA graphs on (a span per
# replayed segment) and off (an event pair per node); a trace of a short training run on
# each, with `gradus profile`'s summary of it. Logs, traces and summaries go to $OUT.
#
#   bench/run_profile.sh [BUILD_DIR]        (BUILD_DIR default: build-gpu if it exists, else build)
#
# ROUNDS, STEPS (per block) and BATCH change bench_profile's defaults; on the GPU, STEPS is
# long enough that device spans are collected inside the timed steps.
set -uo pipefail
B=${1:-$([ -d build-gpu ] && echo build-gpu || echo build)}
OUT=${OUT:-profile-out}
ROUNDS=${ROUNDS:-9}
BATCH=${BATCH:-64}
mkdir -p "$OUT"
log() { echo "== $* ($(date +%T))"; }
unset GRADUS_PROFILE
"$B/gradus" devices | tee "$OUT/devices.txt"
{ lscpu | grep -E 'Model name|^CPU\(s\)' ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; } \
  >"$OUT/machine.txt"

# $1 label, $2 backend, then env assignments for the run
cost() {
  local label=$1 be=$2 steps=$3
  shift 3
  log "cost: $label"
  env "$@" "$B/bench_profile" --backend "$be" --rounds "$ROUNDS" --steps "$steps" --batch "$BATCH" \
    --trace "$OUT/bench_$label.json" | tee "$OUT/cost_$label.txt"
}
trace() {
  local label=$1 be=$2
  shift 2
  log "trace: $label"
  env "$@" "$B/gradus" train cnn --backend "$be" --data shapes --limit 3200 --batch "$BATCH" \
    --profile "$OUT/trace_$label.json" --metrics "$OUT/metrics_$label.jsonl" >"$OUT/train_$label.txt" 2>&1
  tail -3 "$OUT/train_$label.txt"
  "$B/gradus" profile "$OUT/trace_$label.json" --top 15 >"$OUT/summary_$label.txt" 2>&1
  head -30 "$OUT/summary_$label.txt"
  "$B/gradus" plot "$OUT/metrics_$label.jsonl" -o "$OUT/curves_$label.svg"
}

if [ "${CPU:-1}" = 1 ]; then # CPU=0: the GPU rows only
  cost cpu cpu "${STEPS:-20}" GRADUS_THREADS="${GRADUS_THREADS:-}"
  trace cpu cpu
fi
if grep -Eq '^ *cuda +' "$OUT/devices.txt"; then
  cost cuda_graphs cuda "${STEPS:-400}" GRADUS_CUDA_GRAPHS=1
  cost cuda_nodes cuda "${STEPS:-400}" GRADUS_CUDA_GRAPHS=0
  trace cuda_graphs cuda GRADUS_CUDA_GRAPHS=1
  trace cuda_nodes cuda GRADUS_CUDA_GRAPHS=0
  # a captured segment is one span whose arguments name its nodes
  python3 - "$OUT/trace_cuda_graphs.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
segs = [e for e in d["traceEvents"] if e.get("cat") == "device_segment"]
print(f"{len(segs)} segment spans; the first names {len(segs[0]['args'].get('nodes', [])) if segs else 0} nodes")
o = d["otherData"]
print("clamped device spans:", o.get("clamped_device_spans"), " unmatched:", o.get("unmatched_device_spans"))
PY
else
  echo "no cuda backend here: CPU figures only"
fi
log "summary"
grep -H -E 'cost of profiling|ns per node' "$OUT"/cost_*.txt | tee "$OUT/costs.txt"
