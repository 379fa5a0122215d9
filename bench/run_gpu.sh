#!/usr/bin/env bash
# Everything the GPU machine is needed for, in one go: build with the CUDA plugin, the test
# suite, the sweep over every backend (docs/ops.md), the sweep under compute-sanitizer, the
# benchmarks of gradus (CUDA and CPU backends) beside the PyTorch peer, and training on
# Fashion-MNIST. Logs go to $OUT (default ./gpu-out).
#
#   bench/run_gpu.sh [PEER_DIR] [DATA_DIR]
#
# PEER_DIR holds torch_peer.py; DATA_DIR the Fashion-MNIST .gz files.
set -uo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-.peers}
DATA=${2:-.data}
STEPS=${STEPS:-build,test,sweep,memcheck,bench,train}
mkdir -p "$OUT"
# The plugin links cuDNN dynamically; on machines where it comes with PyTorch's wheels
# rather than the system, point the loader at it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then
  d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $* ($(date +%T))"; }

log build
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
build-gpu/gradus devices | tee "$OUT/devices.txt"

if has test; then
  log test
  (cd build-gpu && ctest -j 8 --output-on-failure) >"$OUT/ctest.log" 2>&1
  tail -5 "$OUT/ctest.log"
fi
if has sweep; then
  log sweep
  build-gpu/gradus sweep -q --plugin build-gpu/plugins-test/libgradus_testdev.so --doc "$OUT/ops.md" \
    >"$OUT/sweep.log" 2>&1
  tail -12 "$OUT/sweep.log"
fi
if has memcheck; then
  log memcheck
  timeout 400 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/gradus sweep -q --backend cuda \
    >"$OUT/memcheck.log" 2>&1
  tail -6 "$OUT/memcheck.log"
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
