"""Compares loss curves of gradus training runs (metrics.jsonl files) with the first one's.

    python3 bench/lm_precision.py REFERENCE/metrics.jsonl OTHER/metrics.jsonl ...

For each run: its steps, first and last training loss, the last validation loss, the
mean and the largest |loss - reference loss| over the steps both ran (and over the last
quarter of them), the steps skipped by loss scaling and the final scale, and whether it
diverged: a loss that is not finite, or a last-quarter mean more than 0.5 nats above the
reference's. One JSON object per run, then a table. Standard library only."""
import json, math, os, sys


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def name_of(path):
    return os.path.basename(os.path.dirname(os.path.abspath(path))) or path


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = [(name_of(p), read(p)) for p in sys.argv[1:]]
    ref_name, ref = runs[0]
    ref_loss = {r["step"]: r["loss"] for r in ref}
    table = []
    for name, rows in runs:
        loss = {r["step"]: r["loss"] for r in rows}
        common = sorted(s for s in loss if s in ref_loss)
        finite = [s for s in common if loss[s] is not None and math.isfinite(loss[s])]
        d = [abs(loss[s] - ref_loss[s]) for s in finite]
        tail = finite[len(finite) * 3 // 4:]
        dt = [abs(loss[s] - ref_loss[s]) for s in tail]
        val = [r["val_loss"] for r in rows if r.get("val_loss") is not None]
        last_q = sum(loss[s] for s in tail) / len(tail) if tail else float("nan")
        ref_q = sum(ref_loss[s] for s in tail) / len(tail) if tail else float("nan")
        diverged = len(finite) < len(common) or not (last_q - ref_q <= 0.5)
        o = dict(run=name, steps=len(rows), first_loss=rows[0]["loss"] if rows else None,
                 last_loss=rows[-1]["loss"] if rows else None, last_val_loss=val[-1] if val else None,
                 mean_abs_diff=sum(d) / len(d) if d else None, max_abs_diff=max(d) if d else None,
                 last_quarter_mean_abs_diff=sum(dt) / len(dt) if dt else None,
                 skipped_steps=rows[-1].get("skipped_steps") if rows else None,
                 final_loss_scale=rows[-1].get("loss_scale") if rows else None, diverged=diverged, vs=ref_name)
        print(json.dumps(o))
        table.append(o)
    fmt = lambda v, p=4: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))
    print(f"\n| run | steps | loss first -> last | last val | mean abs diff vs {ref_name} | max | last quarter | skipped | scale |")
    print("|---|---|---|---|---|---|---|---|---|")
    for o in table:
        print(f"| {o['run']} | {o['steps']} | {fmt(o['first_loss'])} -> {fmt(o['last_loss'])} | {fmt(o['last_val_loss'])} | "
              f"{fmt(o['mean_abs_diff'])} | {fmt(o['max_abs_diff'])} | {fmt(o['last_quarter_mean_abs_diff'])} | "
              f"{fmt(o['skipped_steps'])} | {fmt(o['final_loss_scale'], 0)} |")


if __name__ == "__main__":
    main()
