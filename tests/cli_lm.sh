#!/bin/sh
# The language-model commands as users meet them: `gradus tokenize`, `gradus train lm`
# (from text, from a token file, stopped and resumed, profiled), `gradus generate` from what
# it saved, `gradus plot` of its metrics, and their answers to bad input: each names the
# file, flag or value and exits 2 (bad command line) or 1 (the work cannot be done).
# usage: cli_lm.sh GRADUS BUILD_DIR SOURCE_DIR
set -u
G=$1
T=$(mktemp -d "$2/cli_lm.XXXXXX") || exit 1
S=$3
fails=0
checks=0
run() { "$@" > "$T/out" 2>&1 < /dev/null; rc=$?; }
check() { # check NAME WANT_RC PATTERN... (patterns are grep -E over stdout+stderr)
    name=$1; want=$2; shift 2
    checks=$((checks + 1))
    if [ "$rc" != "$want" ]; then echo "FAIL $name: exit $rc, want $want"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    for p in "$@"; do
        if ! grep -Eq -- "$p" "$T/out"; then echo "FAIL $name: no /$p/ in:"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    done
    echo "ok   $name"
}
must() { # must NAME CONDITION...: a test of the files a command left
    name=$1; shift
    checks=$((checks + 1))
    if "$@"; then echo "ok   $name"; else echo "FAIL $name: $*"; fails=$((fails + 1)); fi
}

# a small corpus: the project's docs (text, several documents)
small="--preset tiny --batch 2 --seq 32 --threads 2"

# ---- text to a token file, then training on it ---------------------------------------------
run "$G" tokenize --data "$S/docs" --out "$T/tok" --vocab 600
check "tokenize" 0 "data.tok"
must "tokenize wrote tokenizer.json and data.tok" test -s "$T/tok/tokenizer.json" -a -s "$T/tok/data.tok"

run "$G" train lm $small --data "$T/tok/data.tok" --tokenizer "$T/tok/tokenizer.json" --steps 6 --stop-at 3 \
    --ckpt-every 3 --out "$T/run" --metrics-free 2>/dev/null
check "train lm: unknown option" 2 'unknown option "--metrics-free"'
run "$G" train lm $small --data "$T/tok/data.tok" --tokenizer "$T/tok/tokenizer.json" --steps 6 --stop-at 3 \
    --ckpt-every 3 --out "$T/run"
check "train lm: stop at step 3 of 6" 0 "model tiny" "step +3" "checkpoint: $T/run/ckpt-0+3"
must "metrics.jsonl has 3 lines" test "$(wc -l < "$T/run/metrics.jsonl")" -eq 3
run "$G" train lm --resume "$T/run" --steps 6 --batch 2 --seq 32 --threads 2 --profile "$T/p.json"
check "train lm: resumed to step 6, profiled" 0 "resumed" "checkpoint: $T/run/ckpt-0+6" "profile written to $T/p.json" \
    "by op" "linear" "attention"
must "metrics.jsonl has 6 lines after the resume" test "$(wc -l < "$T/run/metrics.jsonl")" -eq 6
must "latest names step 6" grep -q "ckpt-00000006" "$T/run/latest"
run "$G" profile "$T/p.json" --top 1000
check "profile of the LM trace: nodes named by module" 0 "by op" "model.layers.0.mlp.up_proj" "model.layers.1.self_attn.atte"
run "$G" plot "$T/run/metrics.jsonl" -o "$T/m.svg"
check "plot of the LM metrics" 0 "wrote $T/m.svg"

# ---- f16 with loss scaling: dynamic by default, stopped and resumed; a scale that overflows
run "$G" train lm $small --data "$T/tok/data.tok" --tokenizer "$T/tok/tokenizer.json" --steps 4 --stop-at 2 \
    --ckpt-every 2 --dtype f16 --out "$T/run16"
# (whether a step of this tiny model overflows at the first scale depends on the corpus, the
# project's docs: the checks hold either way)
check "train lm --dtype f16: dynamic loss scaling" 0 "f16, dynamic loss scale" "scale [0-9]+(, | \\(this step skipped\\), )[0-9]+ skipped" \
    "loss scale [0-9]+ at the end; [0-9]+ steps skipped"
run "$G" train lm --resume "$T/run16" --steps 4 --batch 2 --seq 32 --threads 2 --dtype f16
check "train lm --dtype f16: resumed" 0 "resumed" "checkpoint: $T/run16/ckpt-0+4"
must "f16 metrics carry the scale and the skipped steps" test "$(grep -c '"loss_scale":[0-9]*,"skipped_steps":[0-9]*}' \
    "$T/run16/metrics.jsonl")" -eq 4
scale=$(tail -n 1 "$T/run16/metrics.jsonl" | sed -n 's/.*"loss_scale":\([0-9]*\),"skipped_steps":\([0-9]*\)}.*/\1/p')
skipped=$(tail -n 1 "$T/run16/metrics.jsonl" | sed -n 's/.*"loss_scale":\([0-9]*\),"skipped_steps":\([0-9]*\)}.*/\2/p')
must "f16: a skipped step for each null gradient norm, across the resume" \
    test "$(grep -c '"grad_norm":null' "$T/run16/metrics.jsonl")" -eq "${skipped:--1}"
must "f16: each skipped step halved the scale (from 65536; four steps are too few to grow it)" \
    test "$((65536 >> ${skipped:-20}))" -eq "${scale:--1}"
must "f16 checkpoint keeps the scaler of the last step" \
    grep -q "\"loss_scale\":{\"scale\":${scale:-x},\"good_steps\":[0-9]*,\"skipped_steps\":${skipped:-x}}" \
    "$T/run16/ckpt-00000004/trainer.json"
run "$G" train lm $small --data "$T/tok/data.tok" --tokenizer "$T/tok/tokenizer.json" --steps 2 --dtype f16 \
    --loss-scale 1e30 --out "$T/run16b"
check "train lm --loss-scale 1e30: every step skipped" 0 "loss scale 1e\+30" "grad norm - \| scale 1e\+30 \(this step skipped\), 2 skipped" \
    "2 steps skipped"
must "skipped steps have a null gradient norm" test "$(grep -c '"grad_norm":null' "$T/run16b/metrics.jsonl")" -eq 2
run "$G" plot "$T/run16b/metrics.jsonl" -o "$T/m16.svg"
check "plot of metrics with skipped steps" 0 "wrote $T/m16.svg"

# ---- generation from the training directory ------------------------------------------------
run "$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0
check "generate: greedy from text" 0 "^The " "prefill: [0-9]+ tokens .*decode: 8 tokens"
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 > "$T/gen1" 2> /dev/null
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 > "$T/gen2" 2> /dev/null
must "generate: greedy is repeatable" cmp -s "$T/gen1" "$T/gen2"
"$G" generate --model "$T/run/latest" --prompt "The " --max-tokens 8 --temperature 0 > "$T/genl" 2> /dev/null
must "generate: the training directory's latest file stands for the directory" cmp -s "$T/gen1" "$T/genl"
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 --recompute > "$T/gen3" 2> /dev/null
must "generate: the same text without the KV cache" cmp -s "$T/gen1" "$T/gen3"
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0.9 --seed 3 > "$T/gen4" 2> /dev/null
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0.9 --seed 3 --recompute > "$T/gen5" 2> /dev/null
must "generate: the same samples without the KV cache" cmp -s "$T/gen4" "$T/gen5"
# bf16 on the reference backend: the logits of a model trained a few steps lie close together
# and, rounded to bf16, often tie to the last bit; the CPU backend's decode (matrix-vector
# products) and its recompute (packed GEMMs) sum in different orders, so such a tie can go
# either way. The reference sums a row the same way in both, so equal text checks the cache.
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 --dtype bf16 --backend ref \
    > "$T/gen6" 2> /dev/null
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 --dtype bf16 --backend ref --recompute \
    > "$T/gen7" 2> /dev/null
must "generate --dtype bf16 --backend ref: text written" test -s "$T/gen6" -a -s "$T/gen7"
must "generate --dtype bf16: the same text without the KV cache (reference)" cmp -s "$T/gen6" "$T/gen7"
run "$G" eval --model "$T/run" --data "$S/README.md" --seq 16 --batch 2
check "eval: loss and perplexity of held-out text" 0 "tokens predicted \(f32\): loss [0-9.]+ nats/token, perplexity [0-9.]+, [0-9.]+ bits/byte"
run "$G" eval --model "$T/run" --data "$S/README.md" --seq 16 --batch 2 --quantize w8a8
check "eval: with int8 weights and activations" 0 "tokens predicted \(f32, w8a8\): loss [0-9.]+ nats/token"
run "$G" eval --model "$T/run" --data "$S/README.md" --quantize int4
check "eval: an unknown quantization" 2 'bad value "int4" for --quantize \(want int8 or w8a8\)'
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 --quantize int8 > "$T/gen8" 2> /dev/null
"$G" generate --model "$T/run" --prompt "The " --max-tokens 8 --temperature 0 --quantize int8 --recompute > "$T/gen9" 2> /dev/null
must "generate --quantize int8: the same text without the KV cache" cmp -s "$T/gen8" "$T/gen9"
"$G" generate --model "$T/run" --prompt-ids 1,2,3 --max-tokens 6 --seed 4 --print-ids --batch 3 > "$T/genb" 2> "$T/genb.err"
"$G" generate --model "$T/run" --prompt-ids 1,2,3 --max-tokens 6 --seed 4 --print-ids > "$T/gens" 2> /dev/null
must "generate --batch 3: three rows and the batch's throughput" grep -q "over a batch of 3" "$T/genb.err"
must "generate --batch: sequence 0 is the single sequence's" test "$(sed -n 's/^\[0\] //p' "$T/genb")" = "$(tr -d '\n' < "$T/gens")"
run "$G" generate --model "$T/run" --prompt-ids 1 --batch 2 --recompute
check "generate: --batch with --recompute" 2 "does not go with --recompute"
run "$G" eval --model "$T/run" --data "$T/nonexistent.txt"
check "eval: no text" 1 "eval: .*nonexistent.txt: No such file"
if [ -x "$2/generate" ]; then
  run "$2/generate" "$T/run" "The " 6
  check "examples/generate.c: prompt and continuation" 0 "^The "
fi
# The sample may reach the tokenizer's end of text before 4 tokens (the model and its
# tokenizer are trained on the docs, which change): as many ids printed as decoded.
"$G" generate --model "$T/run/ckpt-00000006" --prompt-ids 1,2,3 --max-tokens 4 --print-ids --seed 7 \
    > "$T/genc" 2> "$T/genc.err" < /dev/null
rc=$?
cat "$T/genc" "$T/genc.err" > "$T/out"
check "generate: ids, from a checkpoint" 0 "prefill: 3 tokens .*decode: [1-4] tokens"
must "generate: as many ids printed as decoded" \
    grep -q "decode: $(tr ',' '\n' < "$T/genc" | grep -c '[0-9]') tokens" "$T/genc.err"
must "only the latest checkpoint is kept" test ! -e "$T/run/ckpt-00000003"
run "$G" train lm --resume "$T/run/ckpt-00000006" --steps 7 --batch 2 --seq 32 --threads 2
check "train lm: resumed from a checkpoint's directory" 0 "checkpoint: $T/run/ckpt-0+7"

# ---- text trained from scratch in one command ----------------------------------------------
run "$G" train lm $small --data "$S/docs" --steps 2 --out "$T/scratch"
check "train lm: from text" 0 "training a byte-level BPE tokenizer" "encoded [0-9]+ documents" "trained 2 steps"

# ---- bad input --------------------------------------------------------------------------------
printf 'nope' > "$T/notjson.json"
printf '{"model_type":"llama","hidden_size":10,"num_attention_heads":3,"num_hidden_layers":1,"vocab_size":300,"intermediate_size":20,"max_position_embeddings":64}' > "$T/badheads.json"
printf '{"model_type":"llama","hidden_size":16,"num_attention_heads":2,"num_hidden_layers":1,"vocab_size":300,"intermediate_size":32,"max_position_embeddings":64}' > "$T/small_vocab.json"
: > "$T/empty.txt"
cp -r "$T/run" "$T/trunc"
head -c 1000 "$T/run/ckpt-00000007/model.safetensors" > "$T/trunc/ckpt-00000007/model.safetensors"

run "$G" train lm --preset nope --data "$S/docs"
check "bad preset" 1 "unknown model preset 'nope' \\(known: tiny"
run "$G" train lm --config "$T/notjson.json" --data "$S/docs"
check "config not JSON" 1 "notjson.json: not valid JSON"
run "$G" train lm --config "$T/badheads.json" --data "$S/docs"
check "config with heads not dividing dim" 1 "badheads.json: model config: dim = 10 is not divisible by n_heads = 3"
run "$G" train lm --config "$T/small_vocab.json" --tokenizer "$T/tok/tokenizer.json" --data "$S/docs" --out "$T/e1"
check "tokenizer larger than the model's vocabulary" 1 "tokenizer.json has 600 tokens, more than the model's vocabulary of 300"
run "$G" train lm --data "$T/empty.txt" --out "$T/e2"
check "empty corpus" 1 "the corpus \\($T/empty.txt\\) is empty"
run "$G" train lm --data "$T/nonexistent" --out "$T/e3"
check "missing corpus" 1 "$T/nonexistent: No such file"
run "$G" train lm --config "$T/small_vocab.json" --seq 65 --data "$S/docs" --out "$T/e4"
check "--seq longer than the model's positions" 1 "--seq 65 is longer than the model's 64 positions"
run "$G" train lm --resume "$T/nonexistent"
check "resume from nothing" 1 "nonexistent: neither a checkpoint"
run "$G" train lm --resume "$T/trunc" --steps 8
check "resume from a truncated checkpoint" 1 "ckpt-00000007/model.safetensors"
run "$G" train lm --dtype i8 --data "$S/docs"
check "bad --dtype" 2 "--dtype i8: want f32, bf16 or f16"
run "$G" train lm --dtype f16 --loss-scale banana --data "$S/docs"
check "bad --loss-scale" 2 "--loss-scale banana: want dynamic, off, or a positive number"
run "$G" train lm --dtype f16 --loss-scale -2 --data "$S/docs"
check "negative --loss-scale" 2 "--loss-scale -2: want dynamic, off, or a positive number"
run "$G" train lm --batch 0 --data "$S/docs"
check "--batch 0" 2 'bad value "0" for --batch'
run "$G" train lm --preset tiny --config "$T/small_vocab.json"
check "--preset and --config" 2 "give --preset or --config, not both"
run "$G" generate --model "$T/nonexistent" --prompt hi
check "generate: no model" 1 "nonexistent: neither a checkpoint"
run "$G" generate --model "$T/trunc" --prompt-ids 1,2
check "generate: truncated weights" 1 "model.safetensors"
run "$G" generate --model "$T/run" --prompt-ids 1,x
check "generate: bad ids" 2 '--prompt-ids "1,x": want ids like 1,2,3'
run "$G" generate --model "$T/run" --prompt-ids 999999
check "generate: id outside the vocabulary" 1 "prompt token 0 is id 999999, outside the model's vocabulary of"
run "$G" generate --model "$T/run"
check "generate: no prompt" 2 "give --prompt or --prompt-ids"
run "$G" generate --model "$T/run" --prompt-ids 1 --dtype i8
check "generate: a dtype it cannot compute in" 2 'bad value "i8" for --dtype \(want f32, bf16 or f16\)'
run "$G" tokenize --data "$S/docs/ops.md" --out "$T/deep/er/tok" --vocab 300
check "tokenize: --out and its parents made" 0 "$T/deep/er/tok/data.tok"
run "$G" train lm --data "$S/docs" --out "$T/notjson.json/run"
check "train lm: --out under a file" 1 "notjson.json: not a directory"
run "$G" tokenize --data "$T/nonexistent" --out "$T/e5"
check "tokenize: missing input" 1 "$T/nonexistent"
run "$G" tokenize --data "$S/docs" --out "$T/e6" --tokenizer "$T/notjson.json"
check "tokenize: bad tokenizer" 1 "notjson.json"

rm -rf "$T"
echo "cli_lm: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
