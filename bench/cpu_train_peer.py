#!/usr/bin/env python3
"""PyTorch's CPU path beside gradus's CPU backend on a training step of the Stories15M shape
(the llama of lm_curve.py: RMSNorm, RoPE, SwiGLU, tied embeddings; f32, AdamW), on all of
this machine's cores unless OMP_NUM_THREADS says otherwise.

    cpu_train_peer.py [--batch 8] [--seq 256] [--steps 12] [--warm 3]

Each step is timed on its own (forward, backward, optimizer step); the figure is the median
step after the warm-up ones, as tokens per second. One JSON line."""
import argparse, json, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lm_curve import CFG, Llama  # noqa: E402  (the same model definition as the loss curves)

if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(os.cpu_count() or 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warm", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    m = Llama(CFG)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, CFG["vocab_size"], (a.batch, a.seq + 1))
    times = []
    for s in range(a.warm + a.steps):
        t0 = time.perf_counter()
        logits = m(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if s >= a.warm:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps(dict(kind="train_cpu", engine="torch", torch=torch.__version__, threads=torch.get_num_threads(),
                          B=a.batch, T=a.seq, step_ms=round(med * 1e3, 1), tok_s=round(a.batch * a.seq / med),
                          loss=float(loss))))


if __name__ == "__main__":
    main()
