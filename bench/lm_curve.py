"""The loss curves of gradus and PyTorch over the first steps of training, same model,
same initial weights, same batches, same AdamW schedule.

    python3 bench/lm_curve.py BUILD_DIR DATA.tok [--steps 200] [--batch 8] [--seq 128]
                              [--backend cpu] [--device cpu] [--out curve.jsonl]

A Stories15M-shaped llama (RMSNorm, RoPE, SwiGLU, tied embeddings) is initialized in
PyTorch as Hugging Face initializes it and saved as a model directory; the batches are
windows of T + 1 tokens at fixed pseudo-random places of a gradus token file. gradus
(BUILD_DIR/lm_curve) and PyTorch then train from the same start: AdamW (betas 0.9, 0.95,
weight decay 0.1), clipping at 1, a linear warmup over 10 steps and a cosine decay from
1e-3 to 1e-4, in f32 and in bf16 (gradus: bf16 activations and f32 master weights;
PyTorch: autocast to bf16). One JSON line per step with the four losses, then a summary:
the largest and mean difference of gradus from PyTorch at each precision, beside the
difference of each one's bf16 curve from its own f32 curve — how far bf16 alone moves it.
A second PyTorch bf16 curve (torch_bf16_2) splits each batch into two micro-batches whose
gradients add up: the same mathematics in another rounding order, so its distance from the
first is the spread of bf16 training itself, reported beside the rest.
"Within bf16 noise": the mean gap between the two bf16 curves is no larger than two
independent runs' bf16 noise would make it — the two own gaps added as independent errors
(the square root of the sum of their squares: for zero-mean normal errors X and Y,
E|X - Y| = sqrt(E|X|^2 + E|Y|^2)) — plus the gap between the two f32 curves. Each bf16
curve rounds in its own way, so their gap is expected to exceed either one's own.

Needs only torch and numpy (the safetensors file is written by hand)."""
import argparse, json, math, os, struct, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = dict(vocab_size=32000, hidden_size=288, intermediate_size=768, num_hidden_layers=6, num_attention_heads=6,
           num_key_value_heads=6, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0)


class Llama(nn.Module):
    """Hugging Face's LlamaForCausalLM math with its parameter names (tied embeddings)."""

    def __init__(s, c):
        super().__init__()
        D, F_, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
        s.c, s.h, s.hd = c, c["num_attention_heads"], D // c["num_attention_heads"]
        s.model = nn.Module()
        s.model.embed_tokens = nn.Embedding(V, D)
        s.model.layers = nn.ModuleList()
        for _ in range(L):
            l = nn.Module()
            l.input_layernorm, l.post_attention_layernorm = nn.Module(), nn.Module()
            l.input_layernorm.weight = nn.Parameter(torch.ones(D))
            l.post_attention_layernorm.weight = nn.Parameter(torch.ones(D))
            l.self_attn = nn.Module()
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(l.self_attn, n, nn.Linear(D, D, bias=False))
            l.mlp = nn.Module()
            l.mlp.gate_proj, l.mlp.up_proj = nn.Linear(D, F_, bias=False), nn.Linear(D, F_, bias=False)
            l.mlp.down_proj = nn.Linear(F_, D, bias=False)
            s.model.layers.append(l)
        s.model.norm = nn.Module()
        s.model.norm.weight = nn.Parameter(torch.ones(D))
        for p in s.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def rms(s, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + s.c["rms_norm_eps"])).to(x.dtype) * w

    def forward(s, ids):
        B, T = ids.shape
        dev = ids.device  # the angles where the model runs (cuda as well as cpu)
        inv = 1.0 / (s.c["rope_theta"] ** (torch.arange(0, s.hd, 2, device=dev).float() / s.hd))
        ang = torch.arange(T, device=dev).float()[:, None] * inv[None]
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos()[None, None], ang.sin()[None, None]

        def rot(t):
            t1, t2 = t[..., : s.hd // 2], t[..., s.hd // 2:]
            return t * cos.to(t.dtype) + torch.cat([-t2, t1], -1) * sin.to(t.dtype)

        x = s.model.embed_tokens(ids)
        for l in s.model.layers:
            h = s.rms(x, l.input_layernorm.weight)
            a = l.self_attn
            q, k, v = (p(h).view(B, T, s.h, s.hd).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
            q, k = rot(q), rot(k)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(s.hd)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=dev).triu(1), float("-inf"))
            y = (att.float().softmax(-1).to(v.dtype) @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + a.o_proj(y)
            h = s.rms(x, l.post_attention_layernorm.weight)
            x = x + l.mlp.down_proj(F.silu(l.mlp.gate_proj(h)) * l.mlp.up_proj(h))
        return F.linear(s.rms(x, s.model.norm.weight), s.model.embed_tokens.weight)


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def save_ids(path, ids, lr, meta):
    header = {"__metadata__": {k: str(v) for k, v in meta.items()},
              "ids": {"dtype": "I32", "shape": list(ids.shape), "data_offsets": [0, ids.nbytes]},
              "lr": {"dtype": "F32", "shape": [len(lr)], "data_offsets": [ids.nbytes, ids.nbytes + 4 * len(lr)]}}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + ids.astype("<i4").tobytes() + np.asarray(lr, "<f4").tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:8] != b"GDTOKENS":
            sys.exit(f"{path}: not a gradus token file")
        width, = struct.unpack_from("<I", head, 12)
        n, = struct.unpack_from("<Q", head, 24)
        return np.frombuffer(f.read(n * width), dtype="<u2" if width == 2 else "<u4").astype(np.int64)


def torch_curve(model0, ids, lr, bf16, device, meta, parts=1):
    # parts > 1: each step's batch as that many equal micro-batches whose gradients add up,
    # the same mean loss and gradient in another rounding order

    m = Llama(CFG).to(device)
    m.load_state_dict(model0.state_dict())
    opt = torch.optim.AdamW(m.parameters(), lr=lr[0], betas=(meta["beta1"], meta["beta2"]), eps=meta["eps"],
                            weight_decay=meta["weight_decay"])
    out = []
    for s in range(len(ids)):
        x = torch.from_numpy(ids[s]).to(device)
        for g in opt.param_groups:
            g["lr"] = float(lr[s])
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for xp in x.chunk(parts):
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                logits = m(xp[:, :-1])
            lp = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xp[:, 1:].reshape(-1)) / parts
            lp.backward()
            loss = loss + lp.detach()
        torch.nn.utils.clip_grad_norm_(m.parameters(), meta["clip"])
        opt.step()
        out.append(loss.item())
    return out


def gradus_curve(build, mdir, batches, backend, dtype):
    # lm_curve finds a plugin backend (cuda) through the path, beside the build's library
    env = dict(os.environ)
    env.setdefault("GRADUS_PLUGIN_PATH", os.path.join(os.path.abspath(build), "plugins"))
    r = subprocess.run([os.path.join(build, "lm_curve"), mdir, batches, backend, dtype], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        sys.exit(f"lm_curve ({dtype}): {r.stderr.strip()[-500:]}")
    return [float(l.split()[3]) for l in r.stdout.splitlines() if l.startswith("step ")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("data")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    toks = read_tokens(a.data)
    rng = np.random.default_rng(1)
    starts = rng.integers(0, len(toks) - a.seq - 1, (a.steps, a.batch))
    ids = np.stack([np.stack([toks[s:s + a.seq + 1] for s in row]) for row in starts]).astype(np.int32)
    warm, peak, low = 10, 1e-3, 1e-4
    lr = [peak * (s + 1) / warm if s < warm else
          low + 0.5 * (peak - low) * (1 + math.cos(math.pi * (s - warm) / max(a.steps - warm - 1, 1)))
          for s in range(a.steps)]
    meta = dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip=1.0)
    model0 = Llama(CFG)
    with tempfile.TemporaryDirectory() as tmp:
        mdir = os.path.join(tmp, "init")
        os.makedirs(mdir)
        cfg = dict(CFG, architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=True,
                   hidden_act="silu", attention_bias=False)
        with open(os.path.join(mdir, "config.json"), "w") as f:
            json.dump(cfg, f)
        save_safetensors(os.path.join(mdir, "model.safetensors"), dict(model0.state_dict()))
        batches = os.path.join(tmp, "batches.safetensors")
        save_ids(batches, ids, lr, meta)
        curves = {"gradus_f32": gradus_curve(a.build, mdir, batches, a.backend, "f32"),
                  "gradus_bf16": gradus_curve(a.build, mdir, batches, a.backend, "bf16")}
    curves["torch_f32"] = torch_curve(model0, ids.astype(np.int64), lr, False, a.device, meta)
    curves["torch_bf16"] = torch_curve(model0, ids.astype(np.int64), lr, True, a.device, meta)
    curves["torch_bf16_2"] = torch_curve(model0, ids.astype(np.int64), lr, True, a.device, meta, parts=2)
    out = open(a.out, "w") if a.out else None
    for s in range(a.steps):
        row = dict(step=s, lr=lr[s], **{k: v[s] for k, v in curves.items()})
        if out:
            out.write(json.dumps(row) + "\n")
    diff = lambda x, y: np.abs(np.array(curves[x]) - np.array(curves[y]))
    summ = {}
    for name, (x, y) in {"gradus_vs_torch_f32": ("gradus_f32", "torch_f32"),
                         "gradus_vs_torch_bf16": ("gradus_bf16", "torch_bf16"),
                         "torch_bf16_vs_f32": ("torch_bf16", "torch_f32"),
                         "gradus_bf16_vs_f32": ("gradus_bf16", "gradus_f32"),
                         "torch_bf16_vs_torch_bf16_2": ("torch_bf16", "torch_bf16_2")}.items():
        d = diff(x, y)
        summ[name] = dict(max=float(d.max()), mean=float(d.mean()), last=float(d[-1]))
    noise = math.hypot(summ["torch_bf16_vs_f32"]["mean"], summ["gradus_bf16_vs_f32"]["mean"]) + \
        summ["gradus_vs_torch_f32"]["mean"]
    ok = summ["gradus_vs_torch_bf16"]["mean"] <= max(noise, 1e-3)
    print(json.dumps(dict(kind="curve", steps=a.steps, batch=a.batch, seq=a.seq, torch=torch.__version__,
                          first={k: v[0] for k, v in curves.items()}, final={k: v[-1] for k, v in curves.items()},
                          diffs=summ, bf16_noise=noise, within_bf16_noise=ok)))
    if out:
        out.close()


if __name__ == "__main__":
    main()
