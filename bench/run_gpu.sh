#!/usr/bin/env bash
# Everything the GPU machine is needed for, in one go: build with the CUDA plugin, the test
# suite (or only the CUDA tests), the MLP and CNN training steps with and without CUDA
# graphs, the sweep (docs/ops.md), the CUDA sweep under compute-sanitizer, the benchmarks
# of gradus beside the PyTorch peer (the attention kernels beside its
# scaled_dot_product_attention among them, and the row ops of a training step), and training
# on Fashion-MNIST. Logs go to $OUT
# (default ./gpu-out).
#
#   bench/run_gpu.sh [PEER_DIR] [DATA_DIR]
#
# PEER_DIR holds torch_peer.py; DATA_DIR the Fashion-MNIST .gz files. STEPS picks steps
# (comma separated; default all): build, test (ctest), cudatest (the two CUDA tests only),
# graphs, sweep, memcheck, bench, train. TARGETS limits what is built (default: all).
# sweep and memcheck run side by side; memcheck runs one sanitizer per op, JOBS at a time.
set -uo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-.peers}
DATA=${2:-.data}
STEPS=${STEPS:-build,test,graphs,sweep,memcheck,bench,train}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
# The plugin links cuDNN dynamically; on machines where it comes with PyTorch's wheels
# rather than the system, point the loader at it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then
  d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
has() { [[ ",$STEPS," == *",$1,"* ]]; }
# programs other than the gradus command find the build's plugins through the path
export GRADUS_PLUGIN_PATH="$PWD/build-gpu/plugins"
log() { echo "== $* ($(date +%T))"; }

if has build; then
  log build
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
    cmake --build build-gpu -j "$JOBS" ${TARGETS:+--target $TARGETS} >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
  build-gpu/gradus devices | tee "$OUT/devices.txt"
fi

if has test; then
  log test
  (cd build-gpu && ctest -j 8 --output-on-failure) >"$OUT/ctest.log" 2>&1
  tail -5 "$OUT/ctest.log"
fi
if has cudatest; then
  log cudatest
  for t in test_cuda_device test_cuda_mixed test_cuda_kernels; do
    build-gpu/$t >"$OUT/$t.log" 2>&1
    echo "$t: exit $? ($(grep -c '^FAIL' "$OUT/$t.log") FAIL lines)"
    grep '^FAIL' "$OUT/$t.log" | head -8
  done
fi

if has graphs; then
  # One training step of the MLP and the CNN (batch 128), replayed from captured CUDA
  # graphs and launched node by node.
  log graphs
  for m in mlp cnn; do
    build-gpu/bench_ops --backend cuda --only $m --samples 9 >>"$OUT/graphs.jsonl" 2>>"$OUT/graphs.err" &&
      sed -i '$ s/}$/, "graphs": 1}/' "$OUT/graphs.jsonl"
    GRADUS_CUDA_GRAPHS=0 build-gpu/bench_ops --backend cuda --only $m --samples 9 >>"$OUT/graphs.jsonl" \
      2>>"$OUT/graphs.err" && sed -i '$ s/}$/, "graphs": 0}/' "$OUT/graphs.jsonl"
  done
  cat "$OUT/graphs.jsonl"
fi

sweep_pid=
if has sweep; then
  log sweep
  extra=()
  [ -f build-gpu/plugins-test/libgradus_testdev.so ] && [ -z "${SWEEP_BACKEND:-}" ] &&
    extra=(--plugin build-gpu/plugins-test/libgradus_testdev.so --doc "$OUT/ops.md")
  build-gpu/gradus sweep ${SWEEP_BACKEND:+--backend $SWEEP_BACKEND} "${extra[@]}" >"$OUT/sweep.log" 2>"$OUT/sweep.err" &
  sweep_pid=$!
fi
if has memcheck; then
  log memcheck
  # one sanitizer per op, side by side: the sweep's cases are small, so a sanitized run is
  # mostly the sanitizer's own work on the host
  build-gpu/gradus sweep -v --backend ref 2>/dev/null | awk 'NF > 3 && $3 == "ref" {print $1}' | sort -u >"$OUT/ops.txt"
  mkdir -p "$OUT/mc"
  xargs -P "$JOBS" -I{} sh -c 'timeout ${MC_TIMEOUT:-300} compute-sanitizer --tool memcheck --print-limit 20 \
      build-gpu/gradus sweep -q --backend cuda --op {} >"$0/mc/{}.log" 2>&1' "$OUT" <"$OUT/ops.txt"
  for f in "$OUT"/mc/*.log; do
    s=$(grep -h 'ERROR SUMMARY' "$f" | tail -1)
    echo "$(basename "$f" .log): ${s:-no summary (timed out or crashed)}"
  done >"$OUT/memcheck.log"
  echo "memcheck: $(wc -l <"$OUT/ops.txt") ops; $(grep -c ' 0 errors' "$OUT/memcheck.log") with 0 errors"
  grep -v ' 0 errors' "$OUT/memcheck.log" | head -10
  cat "$OUT"/mc/*.log | grep -B2 -A12 '^=========.*Invalid\|^=========.*Error' | head -60 >"$OUT/memcheck_errors.log"
  rm -rf "$OUT/mc"
fi
if [ -n "$sweep_pid" ]; then
  wait "$sweep_pid"
  echo "sweep exit $?"
  grep -v ' verified \| n/a \| reference ' "$OUT/sweep.log" | tail -25
fi

if has bench; then
  log bench
  # bench_ops finds the build's plugins through the path (only the gradus command finds
  # them by itself)
  GRADUS_PLUGIN_PATH="$PWD/build-gpu/plugins" build-gpu/bench_ops --backend cuda >"$OUT/g_cuda.jsonl" 2>"$OUT/bench_err.log"
  build-gpu/bench_ops --backend cpu >"$OUT/g_cpu.jsonl" 2>>"$OUT/bench_err.log"
  python3 "$PEER/torch_peer.py" ops cnn >"$OUT/torch.jsonl" 2>>"$OUT/bench_err.log"
  python3 bench/compare.py --in cuda="$OUT/g_cuda.jsonl" --in cpu="$OUT/g_cpu.jsonl" --in torch="$OUT/torch.jsonl" \
    --ratio cuda/torch-cuda --ratio cpu/torch-cpu | tee "$OUT/bench.md"
  # the attention kernels of a training step beside PyTorch's scaled_dot_product_attention
  GRADUS_PLUGIN_PATH="$PWD/build-gpu/plugins" build-gpu/bench_ops --backend cuda --only attn >"$OUT/attn.jsonl" \
    2>>"$OUT/bench_err.log"
  python3 bench/attn_peer.py >>"$OUT/attn.jsonl" 2>>"$OUT/bench_err.log"
  python3 - "$OUT/attn.jsonl" <<'PY' | tee "$OUT/attn.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peer = {r["name"]: r for r in rows if r["backend"] == "torch"}
print("| shape | gradus fwd (lse) ms | bwd (lse) ms | SDPA fwd ms | bwd ms | gradus / SDPA fwd, bwd |")
print("|---|---|---|---|---|---|")
for r in rows:
    p = peer.get(r["name"])
    if r["backend"] == "torch" or p is None:
        continue
    print(f"| {r['name']} | {r['fwd_lse_ms']:.3f} | {r['bwd_lse_ms']:.3f} | {p['fwd_ms']:.3f} | {p['bwd_ms']:.3f} | "
          f"{r['fwd_lse_ms'] / p['fwd_ms']:.2f}, {r['bwd_lse_ms'] / p['bwd_ms']:.2f} |")
PY
  # the memory-bound row ops of a training step (the loss with its gradient, RoPE), with
  # the bandwidth they reach
  GRADUS_PLUGIN_PATH="$PWD/build-gpu/plugins" build-gpu/bench_ops --backend cuda --only rows --samples 9 \
    >"$OUT/rows.jsonl" 2>>"$OUT/bench_err.log"
  cat "$OUT/rows.jsonl"
  tail -3 "$OUT/bench_err.log"
fi
if has train; then
  log train
  for m in mlp cnn; do
    timeout 300 build-gpu/gradus train $m --data "$DATA" --backend cuda 2>&1 | tr '\r' '\n' | grep -v '^$' |
      tail -6 | tee "$OUT/train_$m.log"
  done
fi
log done
