#!/usr/bin/env bash
# Stories15M training on the CPU: gradus's CPU backend beside PyTorch's CPU path
# (bench/cpu_train_peer.py), f32 with AdamW, the same shape and batch, on every core unless
# THREADS says how many. One JSON line each: the median step after 3 warm-up steps.
#
#   bench/run_cpu_lm.sh BUILD_DIR DATA.tok TOKENIZER.json [BATCH] [SEQ]
#
# PYTHON picks the interpreter that has torch (default python3).
set -uo pipefail
B=$1 DATA=$2 TOK=$3 BATCH=${4:-8} SEQ=${5:-256}
PY=${PYTHON:-python3}
N=${THREADS:-$(nproc)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$B/gradus" train lm --preset stories15m --data "$DATA" --tokenizer "$TOK" --out "$W/run" --steps 15 \
  --batch "$BATCH" --seq "$SEQ" --val-every 0 --backend cpu --dtype f32 --threads "$N" >"$W/log" 2>&1 ||
  { tail -5 "$W/log"; exit 1; }
python3 - "$W/run/metrics.jsonl" "$BATCH" "$SEQ" "$N" <<'PY'
import json, statistics, sys
path, B, T, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if '"step"' in l]
# per-step times from the elapsed clock, after 3 warm-up steps; the last step also saves
dt = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows[3:-2], rows[4:-1])]
med = statistics.median(dt)
print(json.dumps(dict(kind="train_cpu", engine="gradus", threads=n, B=B, T=T, steps_timed=len(dt),
                      step_ms=round(med * 1e3, 1), tok_s=round(B * T / med), loss=rows[-1]["loss"])))
PY
OMP_NUM_THREADS=$N "$PY" "$(dirname "$0")/cpu_train_peer.py" --batch "$BATCH" --seq "$SEQ"
