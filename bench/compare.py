#!/usr/bin/env python3
"""Merges benchmark JSON lines into one markdown table with ratios.

    compare.py --in cuda=g_cuda.jsonl --in cpu=g_cpu.jsonl --in torch=torch.jsonl \
               --ratio cuda/torch-cuda --ratio cpu/torch-cpu

Inputs: bench_ops output (rows labelled with the given label), torch_peer.py output (its
gpu_ms/cpu_ms become torch-cuda/torch-cpu; the label is ignored), torch_cpu_peer.py output
(labelled by its backend field). A ratio a/b is a's time over b's: below 1, a is faster."""
import argparse, json


def rows_of(label, path, table):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            k = r.get("kind")
            if k == "op":
                if "gpu_ms" in r:  # torch_peer.py
                    table.setdefault(r["name"], {})["torch-cuda"] = r["gpu_ms"]
                    table.setdefault(r["name"], {})["torch-cpu"] = r["cpu_ms"]
                else:
                    lab = label if r.get("backend", "").startswith(("ref", "cpu", "cuda", "default", "testdev")) else r["backend"]
                    table.setdefault(r["name"], {})[lab] = r["ms"]
            elif k in ("cnn", "mlp"):
                if "device" in r:  # torch_peer.py
                    lab = "torch-cpu" if r["device"] == "cpu" else "torch-cuda"
                else:
                    lab = label if not r.get("backend", "").startswith("torch") else r["backend"]
                name = k.upper()
                table.setdefault(f"{name} train step b128", {})[lab] = r["train_step_ms"]
                table.setdefault(f"{name} forward b128", {})[lab] = r["forward_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inputs", action="append", default=[], help="label=file")
    ap.add_argument("--ratio", action="append", default=[], help="a/b")
    a = ap.parse_args()
    table, labels = {}, []
    for spec in a.inputs:
        label, path = spec.split("=", 1)
        rows_of(label, path, table)
    for per in table.values():
        for l in per:
            if l not in labels:
                labels.append(l)
    head = ["row"] + [f"{l} ms" for l in labels] + a.ratio
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, per in table.items():
        cells = [name] + [f"{per[l]:.4g}" if l in per else "—" for l in labels]
        for q in a.ratio:
            x, y = q.split("/")
            cells.append(f"{per[x] / per[y]:.2f}" if x in per and y in per and per[y] > 0 else "—")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
