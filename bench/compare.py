#!/usr/bin/env python3
"""Merges the JSON lines of bench_ops (one file per gradus backend) and of the PyTorch
peer (torch_peer.py ops cnn) into one markdown table with ratios.

    compare.py --gradus cuda=cuda.jsonl --gradus cpu=cpu.jsonl --torch torch.jsonl

A ratio is gradus time / peer time: below 1 gradus is faster. Rows are matched by name."""
import argparse, json, sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gradus", action="append", default=[], help="label=file")
    ap.add_argument("--torch", help="torch_peer.py output")
    a = ap.parse_args()
    g = {}
    for spec in a.gradus:
        label, path = spec.split("=", 1)
        for r in load(path):
            if r["kind"] == "op":
                g.setdefault(r["name"], {})[label] = r["ms"]
            elif r["kind"] == "cnn":
                g.setdefault("CNN train step b128", {})[label] = r["train_step_ms"]
                g.setdefault("CNN forward b128", {})[label] = r["forward_ms"]
    t = {}
    if a.torch:
        for r in load(a.torch):
            if r["kind"] == "op":
                t[r["name"]] = (r["gpu_ms"], r["cpu_ms"])
            elif r["kind"] == "cnn":
                key = "gpu" if r["device"] != "cpu" else "cpu"
                t.setdefault("CNN train step b128", [None, None])[0 if key == "gpu" else 1] = r["train_step_ms"]
                t.setdefault("CNN forward b128", [None, None])[0 if key == "gpu" else 1] = r["forward_ms"]
    labels = [s.split("=", 1)[0] for s in a.gradus]
    head = ["row"] + [f"gradus {l} ms" for l in labels] + ["torch cuda ms", "torch cpu ms"]
    head += [f"{l} / torch {'cuda' if l == 'cuda' else 'cpu'}" for l in labels]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    fmt = lambda v: "—" if v is None else (f"{v:.4g}")
    for name, per in g.items():
        tg, tc = t.get(name, (None, None))
        cells = [name] + [fmt(per.get(l)) for l in labels] + [fmt(tg), fmt(tc)]
        for l in labels:
            peer = tg if l == "cuda" else tc
            v = per.get(l)
            cells.append(f"{v / peer:.2f}x" if v and peer else "—")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
