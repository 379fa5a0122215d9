"""Parity of gradus's inference engine with Hugging Face transformers, in f32.

    python3 bench/engine_parity.py BUILD_DIR [BACKEND ...]

For each model — Qwen3 with grouped-query heads and QK-norm, Qwen2 with q/k/v biases and
one KV head, Llama with Llama 3's rope_scaling, GPT-2 with an odd head count (saved with
and without the "transformer." prefix), the Stories15M shape — transformers builds it with
random weights (a wider spread than its default, so that greedy picks are clear) and saves
it. gradus (BUILD_DIR/engine_logits, on each backend named) prefills every prefix of a
16-token prompt and then decodes 64 tokens greedily, writing the logits after every token.
transformers computes the logits of that whole sequence in one forward pass and continues
the prompt greedily (the argmax at each step, through its KV cache; whether generate() picks
the same tokens is reported beside). Prints a JSON line per model and backend with the
worst per-position NMSE and whether the greedy continuations are identical, and
"engine parity: ok" when every NMSE is <= 1e-6 and every continuation identical."""
import json, os, subprocess, sys, tempfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

torch.backends.cuda.matmul.allow_tf32 = False
PROMPT, NEW = 16, 64


def models():
    yield "qwen3-gqa-qknorm", Qwen3ForCausalLM(Qwen3Config(
        vocab_size=101, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=128, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True, initializer_range=0.2, attn_implementation="eager"))
    yield "qwen2-bias-kv1", Qwen2ForCausalLM(Qwen2Config(
        vocab_size=103, hidden_size=40, intermediate_size=72, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=1, max_position_embeddings=128, rope_theta=1e4, rms_norm_eps=1e-6,
        tie_word_embeddings=False, initializer_range=0.2, attn_implementation="eager"))
    yield "llama3-rope-scaling", LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rope_theta=5e5, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32},
        tie_word_embeddings=True, initializer_range=0.2, attn_implementation="eager"))
    yield "gpt2-odd-heads", GPT2LMHeadModel(GPT2Config(
        vocab_size=97, n_embd=30, n_layer=2, n_head=3, n_positions=128, layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager"))
    yield "stories15m-shape", LlamaForCausalLM(LlamaConfig(
        vocab_size=32000, hidden_size=288, intermediate_size=768, num_hidden_layers=6, num_attention_heads=6,
        num_key_value_heads=6, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e4,
        tie_word_embeddings=True, initializer_range=0.05, attn_implementation="eager"))


def nmse(ref, got):
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    return float(((ref - got) ** 2).sum() / max((ref ** 2).sum(), 1e-30))


def greedy(model, prompt):
    """transformers' greedy continuation of the prompt: the argmax of its logits at each step,
    the keys and values kept in its cache, no logits processor between."""
    ids = torch.from_numpy(prompt).long()[None]
    out, past, step = list(prompt), None, ids
    with torch.no_grad():
        for _ in range(NEW):
            r = model(input_ids=step, past_key_values=past, use_cache=True)
            past = r.past_key_values
            nxt = int(r.logits[0, -1].argmax())
            out.append(nxt)
            step = torch.tensor([[nxt]])
    return np.array(out, np.int64)


def main():
    build = sys.argv[1]
    backends = sys.argv[2:] or ["cpu"]
    ok = True
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models():
            torch.manual_seed(0)
            model = model.float().eval()
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            dirs = [(name, d)]
            if name.startswith("gpt2"):  # GPT2Model's names: no "transformer." prefix
                d2 = d + "-noprefix"
                os.makedirs(d2)
                for f in os.listdir(d):
                    if f != "model.safetensors":
                        with open(os.path.join(d, f), "rb") as a, open(os.path.join(d2, f), "wb") as b:
                            b.write(a.read())
                w = load_file(os.path.join(d, "model.safetensors"))
                save_file({k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in w.items()},
                          os.path.join(d2, "model.safetensors"), metadata={"format": "pt"})
                dirs.append((name + "-noprefix", d2))
            V = model.config.vocab_size
            prompt = rng.integers(0, V, PROMPT)
            ref_gen = greedy(model, prompt)
            with torch.no_grad():  # generate() too: its greedy search may apply processors of its own
                gen = model.generate(torch.from_numpy(prompt).long()[None], max_new_tokens=NEW, min_new_tokens=NEW,
                                     do_sample=False, pad_token_id=0)[0].numpy()
            generate_agrees = bool(np.array_equal(gen, ref_gen))
            for label, mdir in dirs:
                for be in backends:
                    out = os.path.join(tmp, f"{label}-{be}.safetensors")
                    r = subprocess.run([os.path.join(build, "engine_logits"), mdir, ",".join(map(str, prompt)), str(NEW),
                                        out, be, "f32"], capture_output=True, text=True)
                    if r.returncode != 0:
                        print(json.dumps({"model": label, "backend": be, "error": r.stderr.strip()[-400:]}), flush=True)
                        ok = False
                        continue
                    got = load_file(out)
                    ids = got["ids"].astype(np.int64)
                    with torch.no_grad():
                        ref = model(input_ids=torch.from_numpy(ids)[None]).logits[0].numpy()
                    per_pos = [nmse(ref[i], got["logits"][i]) for i in range(len(ids))]
                    worst = max(per_pos)
                    same = bool(np.array_equal(ids, ref_gen[:len(ids)]))
                    first_diff = None if same else int(np.argmax(ids != ref_gen[:len(ids)]))
                    row = {"model": label, "backend": be, "positions": len(ids), "prefill_worst_nmse": max(per_pos[:PROMPT]),
                           "decode_worst_nmse": max(per_pos[PROMPT:]), "greedy_identical": same,
                           "generate_agrees": generate_agrees}
                    if not same:  # how close the two top logits were where they parted
                        row["first_difference_at"] = first_diff
                        top = np.sort(ref[first_diff - 1])[-2:]
                        row["ref_top2_margin"] = float(top[1] - top[0])
                    print(json.dumps(row), flush=True)
                    ok = ok and worst <= 1e-6 and same
    print("engine parity: ok" if ok else "engine parity: FAILED", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
