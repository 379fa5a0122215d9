"""Parity of gradus's language models with Hugging Face transformers, in f32.

    python3 bench/lm_parity.py BUILD_DIR [BACKEND ...]

For each model — a small Qwen3 config (grouped-query heads 4:2, QK-norm, head_dim 12
given explicitly, tied embeddings), a small GPT-2 (3 heads of 10, an odd vocabulary) and
the Stories15M shape — transformers builds it with random weights and saves it; gradus
(BUILD_DIR/lm_parity, on each backend named, default cpu) loads that directory, and both
compute the logits, the loss and every parameter's gradient for one batch, then take ten
AdamW steps on it. Prints a JSON line per model and backend with the worst normalized
mean squared errors (logits, loss, gradients) and the largest loss difference over the
steps, and "parity: ok" when every figure is within bounds (NMSE <= 1e-6, losses within
1e-4); exits 1 otherwise."""
import json, os, subprocess, sys, tempfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
STEPS, LR, WD = 10, 1e-3, 0.01


def models():
    yield "qwen3-gqa-qknorm", Qwen3ForCausalLM(Qwen3Config(
        vocab_size=101, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=64, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attn_implementation="eager"))
    yield "gpt2-small-odd", GPT2LMHeadModel(GPT2Config(
        vocab_size=97, n_embd=30, n_layer=2, n_head=3, n_positions=64, layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # GPT-2's dropout would make the two differ
        bos_token_id=0, eos_token_id=0, attn_implementation="eager"))
    yield "stories15m-shape", LlamaForCausalLM(LlamaConfig(
        vocab_size=32000, hidden_size=288, intermediate_size=768, num_hidden_layers=6, num_attention_heads=6,
        num_key_value_heads=6, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e4,
        tie_word_embeddings=True, attn_implementation="eager"))


def nmse(ref, got):
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    return float(((ref - got) ** 2).sum() / max((ref ** 2).sum(), 1e-30))


def torch_side(model, ids):
    model.train()
    x = torch.from_numpy(ids).long()
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    logits = out.logits.detach().numpy()
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x).loss
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return logits, float(out.loss.item()), grads, losses


def main():
    build = sys.argv[1]
    backends = sys.argv[2:] or ["cpu"]
    ok = True
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    for name, model in models():
        model = model.float()
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d, safe_serialization=True)
            vocab = model.config.vocab_size
            ids = rng.integers(0, vocab, size=(2, 32)).astype(np.int32)
            save_file({"ids": ids}, os.path.join(d, "batch.safetensors"),
                      metadata={"steps": str(STEPS), "lr": str(LR), "weight_decay": str(WD)})
            t_logits, t_loss, t_grads, t_losses = torch_side(model, ids)
            for be in backends:
                out = os.path.join(d, f"out-{be}.safetensors")
                r = subprocess.run([os.path.join(build, "lm_parity"), d, os.path.join(d, "batch.safetensors"), out, be],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    print(json.dumps({"model": name, "backend": be, "error": r.stderr.strip()[-400:]}))
                    ok = False
                    continue
                g = load_file(out)
                worst_grad, worst_name, missing = 0.0, "", []
                for n, tg in t_grads.items():
                    key = "grad." + n
                    if key not in g:
                        missing.append(n)
                        continue
                    e = nmse(tg, g[key])
                    if e > worst_grad:
                        worst_grad, worst_name = e, n
                row = {"model": name, "backend": be, "logits_nmse": nmse(t_logits, g["logits"]),
                       "loss": float(g["loss"]), "torch_loss": t_loss,
                       "loss_nmse": nmse([t_loss], [float(g["loss"])]), "worst_grad_nmse": worst_grad,
                       "worst_grad": worst_name, "grads": len(t_grads) - len(missing), "missing_grads": missing,
                       "steps_max_loss_diff": float(np.max(np.abs(np.array(t_losses) - g["losses"]))),
                       "losses_gradus": [round(float(v), 6) for v in g["losses"]],
                       "losses_torch": [round(v, 6) for v in t_losses]}
                good = (row["logits_nmse"] <= 1e-6 and row["loss_nmse"] <= 1e-6 and worst_grad <= 1e-6
                        and not missing and row["steps_max_loss_diff"] <= 1e-4)
                row["ok"] = good
                ok &= good
                print(json.dumps(row), flush=True)
    print("parity: ok" if ok else "parity: FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
