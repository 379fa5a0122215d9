#!/usr/bin/env python3
"""PyTorch's side of bench_ops' attention rows: causal scaled_dot_product_attention in bf16
at the same shapes (gpt2: 16 x 12 heads x 1024 x 64; qwen3: 8 x 16 query heads over 8 kv
heads x 1024 x 128), forward alone and forward + backward, one JSON object per line.

Method: CUDA events around R back-to-back calls after a warm-up, median over 9 samples;
the backward is the difference of the two medians. FLOP/s as bench_ops counts them: 4 B H
T^2 D / 2 for the forward, 2.5 times that for the backward.

    python3 bench/attn_peer.py
"""
import json
import statistics

import torch
import torch.nn.functional as F


def median_ms(fn, reps=20, samples=9):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / reps)
    return statistics.median(ts)


def row(name, B, H, Hkv, T, D):
    g = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda h: (torch.rand(B, h, T, D, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    q, k, v, dy = mk(H), mk(Hkv), mk(Hkv), mk(H)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    gqa = H != Hkv

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def both():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        torch.autograd.grad(y, (q, k, v), dy)

    tf, tfb = median_ms(fwd), median_ms(both)
    tb = tfb - tf
    flops = 4.0 * B * H * T * T * D * 0.5
    print(json.dumps(dict(kind="attention", name=name, backend="torch", fwd_ms=round(tf, 6), bwd_ms=round(tb, 6),
                          fwd_tflops=round(flops / tf * 1e-9, 4), bwd_tflops=round(2.5 * flops / tb * 1e-9, 4))),
          flush=True)


if __name__ == "__main__":
    row("gpt2 b16 h12 t1024 d64", 16, 12, 12, 1024, 64)
    row("qwen3 b8 h16/8 t1024 d128", 8, 16, 8, 1024, 128)
