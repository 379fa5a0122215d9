#!/bin/sh
# Loss curves of one training run in f32, bf16, f16 with dynamic loss scaling and f16
# without it: a Stories15M-shaped llama, the same initialization (--seed), the same
# batches (the data order follows the seed), the same AdamW schedule; then
# bench/lm_precision.py compares each curve with f32's.
#
#   bench/lm_precision.sh GRADUS DATA.tok TOKENIZER.json OUT_DIR [STEPS [BATCH [SEQ]]]
#
# Two runs at a time, one thread each (GRADUS_THREADS); the printed tokens/s of each
# run are those of a core shared with the other run.
set -u
G=$1 DATA=$2 TOK=$3 OUT=$4 STEPS=${5:-200} BATCH=${6:-4} SEQ=${7:-64}
HERE=$(dirname "$0")
mkdir -p "$OUT" || exit 1
one() { # one NAME DTYPE [--loss-scale S]
    name=$1 dt=$2
    shift 2
    rm -rf "$OUT/$name"
    "$G" train lm --preset stories15m --data "$DATA" --tokenizer "$TOK" --out "$OUT/$name" --steps "$STEPS" \
        --batch "$BATCH" --seq "$SEQ" --dtype "$dt" --threads "${GRADUS_THREADS:-1}" --val-every 50 --val-batches 4 \
        --seed 1 "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? ($(tail -n 1 "$OUT/$name.log"))"
}
one f32 f32 & one f16 f16 & wait
one bf16 bf16 & one f16_noscale f16 --loss-scale off & wait
python3 "$HERE/lm_precision.py" "$OUT"/f32/metrics.jsonl "$OUT"/bf16/metrics.jsonl "$OUT"/f16/metrics.jsonl \
    "$OUT"/f16_noscale/metrics.jsonl
