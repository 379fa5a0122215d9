#!/usr/bin/env python3
"""PyTorch CPU side of the CPU benchmark (bench/run_cpu.sh): the same rows as bench_ops,
timed the same way (median of samples after warm-up, fp32), one JSON object per line.

    torch_cpu_peer.py [--max-n 2048] [--samples 9]"""
import argparse, json, os, time
import torch, torch.nn as nn, torch.nn.functional as F

# Some builds (Debian's) start with one thread; use every core, as gradus's CPU backend does.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(os.cpu_count() or 1)


def bench(fn, warm, samples):
    for _ in range(warm):
        fn()
    t0 = time.perf_counter(); fn(); one = (time.perf_counter() - t0) * 1e3
    reps = max(1, min(1000, int(20.0 / one) + 1)) if one > 0 else 100
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        ts.append((time.perf_counter() - t0) * 1e3 / reps)
    ts.sort()
    return ts[len(ts) // 2]


def emit(**kw):
    print(json.dumps(kw), flush=True)


class CNN(nn.Module):  # the CNN of bench_ops.c and of the GPU peer
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(1, 32, 3, padding=1); s.c2 = nn.Conv2d(32, 64, 3, padding=1)
        s.f1 = nn.Linear(64 * 7 * 7, 128); s.f2 = nn.Linear(128, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.c1(x)), 2); x = F.max_pool2d(F.relu(s.c2(x)), 2)
        return s.f2(F.relu(s.f1(x.flatten(1))))


class MLP(nn.Module):  # gd_nn_mlp(x, 128)
    def __init__(s):
        super().__init__()
        s.l1 = nn.Linear(784, 128); s.l2 = nn.Linear(128, 128); s.l3 = nn.Linear(128, 10)

    def forward(s, x):
        return s.l3(F.relu(s.l2(F.relu(s.l1(x.flatten(1))))))


def model_rows(kind, m, warm, samples):
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(128, 1, 28, 28); y = torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step()

    def fwd():
        with torch.no_grad():
            m(x)
    emit(kind=kind, backend="torch-cpu", train_step_ms=bench(step, warm, samples),
         forward_ms=bench(fwd, warm, samples), threads=torch.get_num_threads())


class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-5):
        super().__init__(); s.w = nn.Parameter(torch.ones(d)); s.eps = eps

    def forward(s, x):
        return s.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps)


class Block(nn.Module):
    """A llama layer as gradus builds it: RMSNorm, q/k/v/o without biases, RoPE on
    rotate_half pairs, causal attention, SwiGLU."""
    def __init__(s, d, h, f):
        super().__init__()
        s.h = h; s.n1 = RMSNorm(d); s.n2 = RMSNorm(d)
        s.q = nn.Linear(d, d, bias=False); s.k = nn.Linear(d, d, bias=False)
        s.v = nn.Linear(d, d, bias=False); s.o = nn.Linear(d, d, bias=False)
        s.g = nn.Linear(d, f, bias=False); s.u = nn.Linear(d, f, bias=False); s.dn = nn.Linear(f, d, bias=False)

    def forward(s, x, cos, sin):
        B, T, D = x.shape
        hd = D // s.h
        y = s.n1(x)
        def heads(t): return t.view(B, T, s.h, hd).transpose(1, 2)
        def rope(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat((-t2, t1), -1) * sin
        q, k, v = rope(heads(s.q(y))), rope(heads(s.k(y))), heads(s.v(y))
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0 (Debian's 1.13)
            sc = (q @ k.transpose(-1, -2)) / hd ** 0.5
            sc = sc.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = torch.softmax(sc, -1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(B, T, D))
        y = s.n2(x)
        return x + s.dn(F.silu(s.g(y)) * s.u(y))


class LM(nn.Module):
    def __init__(s, V, d, L, h, f, T):
        super().__init__()
        s.emb = nn.Embedding(V, d); s.blocks = nn.ModuleList(Block(d, h, f) for _ in range(L)); s.n = RMSNorm(d)
        hd = d // h
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(T).float(), inv)
        ang = torch.cat((ang, ang), -1)
        s.register_buffer("cos", ang.cos()); s.register_buffer("sin", ang.sin())

    def forward(s, idx, tgt):
        x = s.emb(idx)
        for b in s.blocks:
            x = b(x, s.cos, s.sin)
        logits = s.n(x) @ s.emb.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def lm_rows(B, T, steps):
    """stories15m's shapes (tied embeddings, 32000 tokens), f32, AdamW: tokens/s of a
    training step, median of `steps` timed steps after 2 warm-up steps."""
    torch.manual_seed(0)
    m = LM(32000, 288, 6, 6, 768, T)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, foreach=False)
    idx = torch.randint(0, 32000, (B, T)); tgt = torch.randint(0, 32000, (B, T))
    def step():
        opt.zero_grad(set_to_none=True)
        loss = m(idx, tgt); loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    ms = bench(step, 2, steps)
    emit(kind="train", model="stories15m", backend="torch-cpu", B=B, T=T, step_ms=ms, tok_s=B * T / ms * 1e3,
         threads=torch.get_num_threads())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lm", action="store_true", help="only the stories15m training row")
    a = ap.parse_args()
    if a.lm:
        lm_rows(8, 256, 5)
        return
    w, s = a.warmup, a.samples
    n = 512
    while n <= a.max_n:
        A = torch.randn(n, n); B = torch.randn(n, n)
        emit(kind="op", name=f"MatMul {n}x{n}", backend="torch-cpu", ms=bench(lambda: A @ B, w, s),
             threads=torch.get_num_threads())
        n *= 2
    x = torch.randn(64, 32, 64, 64); wt = torch.randn(64, 32, 3, 3)
    emit(kind="op", name="Conv2D b64 64x64x32->64 3x3", backend="torch-cpu",
         ms=bench(lambda: F.conv2d(x, wt, padding=1), w, s), threads=torch.get_num_threads())
    r = torch.randn(4096, 4096)
    for name, fn in (("ReduceSum 4096x4096", lambda: r.sum()),
                     ("Elementwise 4096x4096 (x*2+1).relu()", lambda: (r * 2 + 1).relu()),
                     ("Softmax 4096x4096 rows", lambda: torch.softmax(r, -1))):
        emit(kind="op", name=name, backend="torch-cpu", ms=bench(fn, w, s), threads=torch.get_num_threads())
    model_rows("mlp", MLP(), w, s)
    model_rows("cnn", CNN(), w, s)


if __name__ == "__main__":
    main()
