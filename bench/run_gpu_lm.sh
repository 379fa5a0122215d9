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
# STEPS picks parts: parity,tokenizer,smoke,train,formats,peers.
set -uo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-.peers}
DATA=${2:-.data}
STEPS=${STEPS:-parity,tokenizer,smoke,train,formats,peers}
G=build-gpu/gradus
mkdir -p "$OUT"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $* ($(date +%T))"; }
export PYTHONUNBUFFERED=1
export GRADUS_PLUGIN_PATH="$PWD/build-gpu/plugins" # lm_parity and encode_ids find the plugins through it

if has parity; then
  log parity
  python3 bench/lm_parity.py build-gpu cpu cuda 2>&1 | tee "$OUT/parity.jsonl" | cut -c1-400
fi
if has tokenizer; then
  log tokenizer
  # gradus's own tokenizer.json, and one the tokenizers library trains, each encoded both ways
  python3 bench/tokenizer_parity.py "$DATA/bible/tokenizer.json" "$DATA/bible.txt" --driver build-gpu/encode_ids \
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
  python3 bench/tokenizer_parity.py "$OUT/hf-tokenizer.json" "$DATA/bible.txt" --driver build-gpu/encode_ids \
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
if has peers; then
  log peers
  PEER_MODELS=${PEER_MODELS:-stories110M,gpt2-124M,qwen3-0.6B-shape} timeout 900 python3 "$PEER/torch_peer.py" train \
    >"$OUT/torch_train.jsonl" 2>"$OUT/torch_train.err"
  cat "$OUT/torch_train.jsonl"
  tail -3 "$OUT/torch_train.err"
fi
log done
