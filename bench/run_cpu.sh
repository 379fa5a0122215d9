#!/usr/bin/env bash
# The CPU benchmark of issue "fast CPU backend": gradus's CPU backend against the gradus
# reference and PyTorch on the CPU, same machine, same run. Logs and the table go to $OUT.
#
#   bench/run_cpu.sh [BUILD_DIR]
#
# Rows: GEMM (own vs OpenBLAS), MatMul 512..2048, Conv2D b64, ReduceSum / elementwise /
# softmax on 4096x4096, MLP and CNN training steps and forwards at batch 128, and the
# Fashion-MNIST CNN's training throughput on the backend against the reference.
set -uo pipefail
B=${1:-build}
OUT=${OUT:-cpu-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
log() { echo "== $* ($(date +%T))"; }
{ lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200; } >"$OUT/machine.txt"
log gemm
"$B/bench_gemm" | tee "$OUT/gemm.txt"
log "gradus cpu"
"$B/bench_ops" --backend cpu --max-n 2048 >"$OUT/g_cpu.jsonl"
log "gradus ref"
"$B/bench_ops" --backend ref --max-n 2048 --warmup 1 --samples 3 >"$OUT/g_ref.jsonl"
log torch
$PY bench/torch_cpu_peer.py --max-n 2048 >"$OUT/torch_cpu.jsonl" || echo "no PyTorch: peer column empty"
$PY bench/compare.py --in cpu="$OUT/g_cpu.jsonl" --in ref="$OUT/g_ref.jsonl" --in torch="$OUT/torch_cpu.jsonl" \
  --ratio cpu/torch-cpu --ratio ref/cpu | tee "$OUT/ops.md"
log "training throughput"
for be in cpu ref; do
  "$B/gradus" train cnn --backend "$be" --epochs 1 --limit 6400 2>&1 | tr '\r' '\n' | grep -E 'ex/s|accuracy' | tail -2 |
    tee "$OUT/train_$be.txt"
done
