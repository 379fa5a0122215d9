#!/usr/bin/env bash
# The language-model work the GPU machine is needed for, in one go (after bench/run_gpu.sh
# built build-gpu): parity with transformers on cpu and cuda, the tokenizer against the
# `tokenizers` library, checkpoints read by `safetensors` and `transformers`, short smoke
# runs of every preset, the training runs of docs/benchmarks.md on real text beside the
# PyTorch peer. Logs go to $OUT.
#
#   bench/run_gpu_lm.sh PEER_DIR DATA_DIR
#
# DATA_DIR holds bible.txt (Debian's bible-kjv: `bible -f gen1:1-rev22:21`) and bible/
# with tokenizer.json and data.tok made from it by `gradus tokenize`.
# STEPS picks parts: parity,tokenizer,smoke,train,formats,speed.
# LM_MODELS (preset names, space-separated) limits the speed step to those models;
# LM_PROFILE=0 leaves out its profiled GPT-2 run.
set -uo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-.peers}
DATA=${2:-.data}
STEPS=${STEPS:-parity,tokenizer,smoke,train,formats,speed}
B=${B:-build-gpu}
G=$B/gradus
mkdir -p "$OUT"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $* ($(date +%T))"; }
export PYTHONUNBUFFERED=1
export GRADUS_PLUGIN_PATH="$PWD/$B/plugins" # lm_parity and encode_ids find the plugins through it

if has parity; then
  log parity
  python3 bench/lm_parity.py $B cpu cuda 2>&1 | tee "$OUT/parity.jsonl" | cut -c1-400
fi
if has tokenizer; then
  log tokenizer
  # gradus's own tokenizer.json, and one the tokenizers library trains, each encoded both ways
  python3 bench/tokenizer_parity.py "$DATA/bible/tokenizer.json" "$DATA/bible.txt" --driver $B/encode_ids \
    2>&1 | tail -3 | tee "$OUT/tokparity.txt"
  python3 - "$DATA/bible.txt" "$OUT/hf-tokenizer.json" <<'EOF' 2>&1 | tail -2
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.decoder = decoders.ByteLevel()
t.train([sys.argv[1]], trainers.BpeTrainer(vocab_size=8000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                          special_tokens=["<|endoftext|>"]))
t.save(sys.argv[2])
print("trained with tokenizers:", t.get_vocab_size(), "tokens")
EOF
  python3 bench/tokenizer_parity.py "$OUT/hf-tokenizer.json" "$DATA/bible.txt" --driver $B/encode_ids \
    2>&1 | tail -3 | tee -a "$OUT/tokparity.txt"
fi
run() { # name preset steps batch seq extra...
  local name=$1 preset=$2 steps=$3 b=$4 t=$5
  shift 5
  timeout 560 $G train lm --preset "$preset" --data "$DATA/bible/data.tok" --tokenizer "$DATA/bible/tokenizer.json" \
    --out "$OUT/run-$name" --steps "$steps" --batch "$b" --seq "$t" --backend cuda "$@" >"$OUT/train-$name.log" 2>&1
  echo "$name: exit $?"
  grep -v '^step [0-9]*/' "$OUT/train-$name.log" | tail -6
  grep '^step [0-9]*/' "$OUT/train-$name.log" | tail -2
}
if has smoke; then
  log smoke
  run smoke-110m stories110m 6 16 1024 --val-every 0
  run smoke-gpt2 gpt2-124m 6 16 1024 --val-every 0
  run smoke-qwen3 qwen3-0.6b-shape 6 8 1024 --val-every 0
fi
if has train; then
  log train
  run stories110m stories110m "${STEPS_110M:-300}" 16 1024 --lr 6e-4 --val-every 50 --ckpt-every 0
  run gpt2-124m gpt2-124m "${STEPS_GPT2:-300}" 16 1024 --lr 6e-4 --val-every 100
  run qwen3 qwen3-0.6b-shape "${STEPS_QWEN:-200}" 8 1024 --lr 3e-4 --val-every 100
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
fi
if has formats; then
  log formats
  ck=$(ls -d "$OUT"/run-*/ckpt-* 2>/dev/null | head -1)
  [ -n "$ck" ] && python3 bench/check_formats.py "$ck" 2>&1 | tail -8 | tee "$OUT/formats.txt"
fi
# The peak device memory while process $1 runs (MiB): the GPU's memory in use, sampled every
# 0.2 s, less what was in use before it started (nvidia-smi counts the CUDA context, library
# workspaces and allocator caches; run one process at a time). Printed when it ends.
watch_mem() {
  local pid=$1 base peak=0 m
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  while kill -0 "$pid" 2>/dev/null; do
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    [ -n "$m" ] && [ "$((m - base))" -gt "$peak" ] && peak=$((m - base))
    sleep 0.2
  done
  echo "$peak"
}
# gradus and PyTorch (eager and torch.compile) on each model, one process per row, memory
# watched the same way for all; tokens/s for gradus from its metrics log over the steps
# after the first 5 (compilation and warm-up excluded), the peer's from its own timing.
if has speed; then
  log speed
  S=$OUT/speed.jsonl
  : >"$S"
  W=${WORK:-$OUT} # checkpoints and traces (gigabytes for qwen3) go here, logs to $OUT
  mkdir -p "$W"
  for row in "stories110m stories110M 16 40" "gpt2-124m gpt2-124M 16 40" "qwen3-0.6b-shape qwen3-0.6B-shape 8 20"; do
    set -- $row
    [[ -n "${LM_MODELS:-}" && " $LM_MODELS " != *" $1 "* ]] && continue # LM_MODELS="gpt2-124m ...": only those
    preset=$1 peer=$2 b=$3 n=$4
    $G train lm --preset "$preset" --data "$DATA/bible/data.tok" --tokenizer "$DATA/bible/tokenizer.json" \
      --out "$W/speed-$preset" --steps "$n" --batch "$b" --seq 1024 --val-every 0 --backend cuda \
      >"$OUT/speed-$preset.log" 2>&1 &
    pid=$!
    mem=$(watch_mem $pid)
    wait $pid
    rc=$?
    python3 - "$W/speed-$preset/metrics.jsonl" "$preset" "$b" "$mem" "$rc" "$OUT/speed-$preset.log" >>"$S" <<'PY'
import json, re, sys
path, name, B, mem, rc, log = sys.argv[1:]
rows = [json.loads(l) for l in open(path)] if rc == "0" else []
act = re.search(r"activation memory ([0-9.]+) MB", open(log).read())
if len(rows) > 7:
    a, z = rows[4], rows[-2]  # after 5 steps; the last step also validates and saves
    tok = (z["step"] - a["step"]) * int(B) * 1024 / (z["elapsed_s"] - a["elapsed_s"])
    print(json.dumps(dict(kind="train", engine="gradus", model=name, B=int(B), T=1024, tok_s=round(tok),
                          step_ms=round(1e3 * int(B) * 1024 / tok, 2), proc_peak_mib=int(mem),
                          activation_mb=float(act.group(1)) if act else None, final_loss=rows[-1]["loss"])))
else:
    print(json.dumps(dict(kind="train", engine="gradus", model=name, error="exit " + rc)))
PY
    for comp in ${PEER_MODES-0 1}; do # PEER_MODES= : gradus only
      PEER_MODELS=$peer PEER_COMPILE=$comp timeout "${PEER_TIMEOUT:-300}" python3 "$PEER/torch_peer.py" train \
        >"$OUT/peer.tmp" 2>>"$OUT/torch_train.err" &
      pid=$!
      mem=$(watch_mem $pid)
      wait $pid
      python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        d = json.loads(l); d["proc_peak_mib"] = int(sys.argv[2]); print(json.dumps(d))' "$OUT/peer.tmp" "$mem" >>"$S"
    done
    tail -3 "$S"
  done
  # where gradus's time goes: a profiled GPT-2 run, summarized by op
  # (CUDA graphs off: an event pair per node, so the summary goes by op, not by segment)
  if [[ "${LM_PROFILE:-1}" == 1 ]]; then
    GRADUS_CUDA_GRAPHS=0 $G train lm --preset gpt2-124m --data "$DATA/bible/data.tok" \
      --tokenizer "$DATA/bible/tokenizer.json" --out "$W/prof-gpt2" --steps 6 --batch 16 --seq 1024 --val-every 0 \
      --backend cuda --profile "$W/gpt2.trace.json" >"$OUT/prof-gpt2.log" 2>&1
    $G profile "$W/gpt2.trace.json" --top 25 --skip 1 >"$OUT/gpt2.profile.txt" 2>&1 # step 1 loads kernels
    head -60 "$OUT/gpt2.profile.txt"
  fi
fi
log done
