#!/bin/sh
# The files gradus writes, read by the libraries that read them elsewhere:
#   - tokenizer.json (trained by `gradus tokenize`) loads in `tokenizers`, which encodes the
#     repository's docs to the same ids as gradus (bench/tokenizer_parity.py);
#   - a checkpoint's model.safetensors loads in `safetensors`: every tensor its config.json
#     implies, by the Hugging Face name, shape and dtype, finite, none left over;
#   - the checkpoint's tokenizer.json loads in `tokenizers`, the config and trainer state in
#     `json`;
#   - the Chrome trace of the run is JSON whose events have what the trace-event format asks.
# Skips (77), saying why, without python3 or those packages (.ci/run installs them).
# usage: formats_py.sh GRADUS BUILD_DIR SOURCE_DIR
set -u
G=$1
B=$2
S=$3
PY=${GRADUS_PYTHON:-python3}
if ! "$PY" -c 'import tokenizers, safetensors.numpy, numpy' 2>/dev/null; then
    echo "formats_py: skipped: $PY lacks tokenizers, safetensors or numpy (pip install tokenizers safetensors numpy)"
    exit 77
fi
T=$(mktemp -d "$B/formats_py.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL $*"; exit 1; }

"$G" tokenize --data "$S/docs" --out "$T/tok" --vocab 1000 > "$T/log" 2>&1 || { cat "$T/log"; fail "gradus tokenize"; }
cat "$S"/docs/*.md "$S"/README.md > "$T/text.txt"
"$PY" "$S/bench/tokenizer_parity.py" "$T/tok/tokenizer.json" "$T/text.txt" --driver "$B/encode_ids" ||
    fail "tokenizers encodes the docs differently"
"$PY" "$S/bench/tokenizer_parity.py" "$T/tok/tokenizer.json" "$T/text.txt" --driver "$B/encode_ids" --lines ||
    fail "tokenizers encodes the docs' lines differently"

"$G" train lm --preset tiny --data "$T/tok/data.tok" --tokenizer "$T/tok/tokenizer.json" --steps 2 --batch 2 \
    --seq 32 --threads 2 --out "$T/run" --profile "$T/trace.json" > "$T/log" 2>&1 || { cat "$T/log"; fail "gradus train lm"; }
"$PY" - "$T/run/ckpt-00000002" "$T/trace.json" "$T/text.txt" <<'EOF' || fail "the checkpoint or trace"
import json, sys
import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

ck, trace, text = sys.argv[1:]
cfg = json.load(open(f"{ck}/config.json"))
w = load_file(f"{ck}/model.safetensors")
D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
H, KV, F = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
hd = cfg.get("head_dim") or D // H
want = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
if not cfg.get("tie_word_embeddings"):
    want["lm_head.weight"] = (V, D)
for l in range(L):
    p = f"model.layers.{l}"
    want.update({f"{p}.input_layernorm.weight": (D,), f"{p}.post_attention_layernorm.weight": (D,),
                 f"{p}.self_attn.q_proj.weight": (H * hd, D), f"{p}.self_attn.k_proj.weight": (KV * hd, D),
                 f"{p}.self_attn.v_proj.weight": (KV * hd, D), f"{p}.self_attn.o_proj.weight": (D, H * hd),
                 f"{p}.mlp.gate_proj.weight": (F, D), f"{p}.mlp.up_proj.weight": (F, D),
                 f"{p}.mlp.down_proj.weight": (D, F)})
bad = [f"missing {k}" for k in want if k not in w] + [f"extra {k}" for k in w if k not in want]
bad += [f"{k}: shape {w[k].shape}, want {s}" for k, s in want.items() if k in w and w[k].shape != s]
bad += [f"{k}: dtype {w[k].dtype}" for k in w if w[k].dtype != np.float32]
bad += [f"{k}: not finite" for k in w if not np.isfinite(w[k]).all()]
# trained two steps from a normal(0, 0.02) draw and norms at one: not all zeros, not all equal
bad += [f"{k}: constant" for k in w if "proj" in k and float(w[k].std()) == 0.0]
tok = Tokenizer.from_file(f"{ck}/tokenizer.json")
ids = tok.encode(open(text, encoding="utf-8").read()[:2000], add_special_tokens=False).ids
if not ids or max(ids) >= V:
    bad.append(f"the checkpoint's tokenizer gives ids up to {max(ids) if ids else None} for a vocabulary of {V}")
state = json.load(open(f"{ck}/trainer.json"))
if state.get("step") != 2:
    bad.append(f"trainer.json: step {state.get('step')}")
t = json.load(open(trace))
ev = t["traceEvents"]
for e in ev:
    if e.get("ph") not in ("X", "B", "E", "i", "I", "C", "M", "b", "e", "n", "s", "t", "f"):
        bad.append(f"trace: event of phase {e.get('ph')!r}: {e}"); break
    if e["ph"] != "M" and not isinstance(e.get("ts"), (int, float)):
        bad.append(f"trace: event without a timestamp: {e}"); break
    if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
        bad.append(f"trace: complete event without a duration: {e}"); break
spans = [e for e in ev if e.get("ph") == "X"]
if not any(e.get("name", "").startswith("model.layers.0.") for e in spans):
    bad.append("trace: no span names a layer (model.layers.0....)")
for b in bad:
    print("  ", b)
print(f"formats_py: {len(w)} tensors, {len(ids)} ids, {len(ev)} trace events: {'ok' if not bad else 'FAILED'}")
sys.exit(1 if bad else 0)
EOF
echo "formats_py: ok"
