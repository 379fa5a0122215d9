#!/usr/bin/env bash
# The inference engine's work on the GPU machine, in one go (after bench/run_gpu.sh built
# build-gpu): parity with transformers in f32 on cpu and cuda (prefill and 64 decode steps,
# greedy continuations), then speed: models of the Stories110M and Qwen3-0.6B shapes that
# transformers makes with random weights and saves in bf16, decoded at batch 1 and
# prefilled at 1024 tokens by bench_decode, beside the PyTorch decoders of torch_peer.py
# decode. Logs go to $OUT.
#
#   bench/run_gpu_engine.sh PEER_DIR
#
# STEPS picks parts: parity,speed,peer (default all); peerfast: the graphed PyTorch decoders and
# transformers eager only (about half of peer's time); profile: where a decode step's time
# goes on stories110m (the plan with its segments and fallbacks, GRADUS_TRACE=1; Chrome
# traces with CUDA graphs on and off, GRADUS_PROFILE) at batch 1 and 64; cpu: stories15m decoded
# on the CPU backend with every host core and with 2; timeline: each kernel of a replayed decode
# step, as CUPTI timed it (bench/inject/cupti_trace.c, bench/kernel_timeline.py), stories110m and Qwen3 at
# batch 1 (and TIMELINE_BATCH).
set -uo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-.peers}
STEPS=${STEPS:-parity,speed,peer}
B=${B:-build-gpu}
WORK=${WORK:-/tmp/gradus-engine}
mkdir -p "$OUT" "$WORK"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $* ($(date +%T))"; }
export PYTHONUNBUFFERED=1
export GRADUS_PLUGIN_PATH="$PWD/$B/plugins"

if has parity; then
  log parity
  timeout 400 python3 bench/engine_parity.py $B cpu cuda 2>&1 | grep -v Warning | tee "$OUT/engine-parity.jsonl" | cut -c1-300
fi
# Models of the Stories110M and Qwen3-0.6B shapes, random weights, saved in bf16 (once).
make_models() {
  python3 - "$PEER" "$WORK" <<'EOF' 2>&1 | grep -v Warning
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from torch_peer import STORIES110M, QWEN3_06B
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
for name, c in (("stories110m", STORIES110M), ("qwen3-0.6b-shape", QWEN3_06B)):
    d = os.path.join(sys.argv[2], name)
    if os.path.exists(os.path.join(d, "config.json")): continue
    kw = dict(vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["hidden"], num_hidden_layers=c["layers"],
              num_attention_heads=c["heads"], num_key_value_heads=c["kv"], max_position_embeddings=c["seq"],
              rms_norm_eps=c["eps"], rope_theta=c["theta"], tie_word_embeddings=True)
    torch.manual_seed(0)
    m = Qwen3ForCausalLM(Qwen3Config(head_dim=c["head_dim"], **kw)) if c.get("qknorm") else LlamaForCausalLM(LlamaConfig(**kw))
    m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    print("saved", name, sum(p.numel() for p in m.parameters()), "parameters (bf16)")
EOF
}

if has speed; then
  log speed
  make_models
  R=${REPS:-3}
  for m in stories110m qwen3-0.6b-shape; do
    timeout 200 $B/bench_decode "$WORK/$m" --backend cuda --prompt 16 --new 256 --reps $R | tee -a "$OUT/engine-speed.jsonl"
    timeout 200 $B/bench_decode "$WORK/$m" --backend cuda --prompt 1024 --new 0 --reps $R | tee -a "$OUT/engine-speed.jsonl"
    for q in int8 w8a8; do
      timeout 200 $B/bench_decode "$WORK/$m" --backend cuda --quantize $q --prompt 16 --new 256 --reps $R |
        tee -a "$OUT/engine-speed.jsonl"
    done
  done
  timeout 120 $B/bench_decode "$WORK/stories110m" --backend cuda --dtype f32 --prompt 16 --new 256 --reps $R |
    tee -a "$OUT/engine-speed.jsonl"
  for m in stories110m qwen3-0.6b-shape; do # throughput at batch 64
    timeout 200 $B/bench_decode "$WORK/$m" --backend cuda --batch 64 --prompt 16 --new 128 --reps $R |
      tee -a "$OUT/engine-speed.jsonl"
  done
fi
if has peer; then
  log peer
  timeout 500 python3 "$PEER/torch_peer.py" decode 2>&1 | grep --line-buffered -v Warning | tee "$OUT/peer-decode.jsonl" |
    cut -c1-300
fi
if has peerfast; then # the strongest peers only: the graphed PyTorch decoders, and transformers eager
  log peerfast
  timeout 300 python3 - "$PEER" <<'EOF' 2>&1 | grep --line-buffered -v Warning | tee "$OUT/peer-decode.jsonl" | cut -c1-300
import sys
sys.path.insert(0, sys.argv[1])
import torch_peer as t
for name, c in (("stories110M", t.STORIES110M), ("qwen3-0.6B-shape", t.QWEN3_06B)):
    for comp in (False, True):
        t.decode_graphed(name, c, compiled=comp)
t.decode("stories110M", t.STORIES110M)
EOF
fi
if has profile; then
  log profile
  make_models
  M="$WORK/stories110m"
  GRADUS_TRACE=1 $B/bench_decode "$M" --backend cuda --prompt 4 --new 2 --reps 1 2>"$OUT/plan-b1.log" >/dev/null
  GRADUS_TRACE=1 $B/bench_decode "$M" --backend cuda --batch 64 --prompt 4 --new 2 --reps 1 2>"$OUT/plan-b64.log" >/dev/null
  grep -c fallback "$OUT/plan-b1.log" "$OUT/plan-b64.log"
  GRADUS_PROFILE="$OUT/prof-graphs.json" $B/bench_decode "$M" --backend cuda --prompt 16 --new 32 --reps 1
  GRADUS_CUDA_GRAPHS=0 GRADUS_PROFILE="$OUT/prof-nodes.json" $B/bench_decode "$M" --backend cuda --prompt 16 --new 32 --reps 1
  GRADUS_CUDA_GRAPHS=0 $B/bench_decode "$M" --backend cuda --prompt 16 --new 128 --reps 3
fi
if has timeline; then # each kernel of a replayed decode step, as CUPTI timed it (bench/inject/cupti_trace.c)
  log timeline
  make_models
  # CUPTI's headers and library: the toolkit's extras, else wherever they were installed
  # (PyTorch's wheels bring a copy)
  roots=("$(dirname "$(command -v nvcc)")/.." /usr/local /usr/lib "$(python3 -c 'import site; print(site.getsitepackages()[0])')")
  inc=$(dirname "$(find "${roots[@]}" -name cupti.h -path '*include*' 2>/dev/null | head -1)")
  lib=$(dirname "$(find "$inc/.." "${roots[@]}" -name 'libcupti.so*' 2>/dev/null | head -1)")
  krec=$(grep -oh 'CUpti_ActivityKernel[0-9]*' "$inc"/cupti_activity*.h | sort -uV | tail -1)
  so=$(ls "$lib"/libcupti.so* | head -1)
  cc -shared -fPIC -O2 -DKREC="$krec" -I"$inc" bench/inject/cupti_trace.c "$so" -Wl,-rpath,"$lib" \
    -o "$WORK/cupti_trace.so" || exit 1
  for m in stories110m qwen3-0.6b-shape; do
    for b in 1 ${TIMELINE_BATCH:-}; do
      $B/bench_decode "$WORK/$m" --backend cuda --batch $b --prompt 16 --new 128 --reps 1
      CUPTI_TRACE_OUT="$WORK/k.csv" CUDA_INJECTION64_PATH="$WORK/cupti_trace.so" \
        $B/bench_decode "$WORK/$m" --backend cuda --batch $b --prompt 16 --new 128 --reps 1
      python3 bench/kernel_timeline.py "$WORK/k.csv" --top 24 | tee "$OUT/timeline-$m-b$b.txt"
    done
  done
fi
if has cpu; then # stories15m decoding on the host's cores, all of them and 2
  log cpu
  python3 - "$PEER" "$WORK" <<'EOF' 2>&1 | grep -v Warning
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from torch_peer import STORIES15M as c
from transformers import LlamaConfig, LlamaForCausalLM
d = os.path.join(sys.argv[2], "stories15m")
if not os.path.exists(os.path.join(d, "config.json")):
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["hidden"],
                                 num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv"],
                                 max_position_embeddings=c["seq"], rms_norm_eps=c["eps"], rope_theta=c["theta"],
                                 tie_word_embeddings=True)).save_pretrained(d, safe_serialization=True)
EOF
  for t in $(nproc) 2; do
    for q in none int8 w8a8; do
      GRADUS_THREADS=$t timeout 100 $B/bench_decode "$WORK/stories15m" --backend cpu --quantize $q --prompt 16 --new 128 \
        --reps 3 | sed "s/}\$/,\"threads\":$t}/" | tee -a "$OUT/engine-cpu.jsonl"
    done
  done
fi
