#!/usr/bin/env python3
"""Compares gradus's encoding with the `tokenizers` library's.

    python3 bench/tokenizer_parity.py TOKENIZER.json TEXT_FILE [--driver build/encode_ids] [--lines]

Both encode the file (or each line of it, with --lines) without template tokens
(add_special_tokens=False: gradus's encode adds none); the script prints "identical"
with the counts, or the first id that differs with the text around it. It exits 0 when
identical, 1 on a mismatch, 2 when it cannot run. gradus's side is bench/encode_ids.c
(built with the benchmarks).
"""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokenizer")
    ap.add_argument("text")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--driver", default=os.path.join(here, "..", "build", "encode_ids"),
                    help="the gradus encoder (bench/encode_ids.c)")
    ap.add_argument("--lines", action="store_true", help="encode each line on its own")
    args = ap.parse_args()

    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("tokenizer_parity: the `tokenizers` package is not installed (pip install tokenizers)",
              file=sys.stderr)
        return 2

    raw = open(args.text, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        print(f"tokenizer_parity: {args.text} is not valid UTF-8 ({e}); `tokenizers` encodes str only",
              file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(args.tokenizer)
    if args.lines:
        pieces = text.split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
    else:
        pieces = [text]
    theirs = [e.ids for e in tok.encode_batch(pieces, add_special_tokens=False)]

    cmd = [args.driver, args.tokenizer, args.text] + (["--lines"] if args.lines else [])
    try:
        out = subprocess.run(cmd, check=True, capture_output=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", b"") or b""
        print(f"tokenizer_parity: {' '.join(cmd)} failed: {e} {err.decode(errors='replace')}", file=sys.stderr)
        return 2
    ours = [[int(x) for x in line.split()] for line in out.split("\n")[: len(pieces)]]
    if len(ours) != len(pieces):
        print(f"tokenizer_parity: the driver printed {len(ours)} lines for {len(pieces)} pieces", file=sys.stderr)
        return 2

    total = 0
    for k, (a, b) in enumerate(zip(theirs, ours)):
        if a != b:
            i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            where = f"line {k + 1}, " if args.lines else ""
            ctx_a = a[max(0, i - 3): i + 4]
            ctx_b = b[max(0, i - 3): i + 4]
            print(f"MISMATCH at {where}id {i} (tokenizers {len(a)} ids, gradus {len(b)} ids)")
            print(f"  tokenizers: {ctx_a} = {[tok.id_to_token(x) for x in ctx_a]}")
            print(f"  gradus:     {ctx_b} = {[tok.id_to_token(x) for x in ctx_b]}")
            print(f"  text there: {tok.decode(a[max(0, i - 3): i + 4], skip_special_tokens=False)!r}")
            return 1
        total += len(a)
    print(f"identical: {total} ids from {len(raw)} bytes in {len(pieces)} piece(s) ({args.tokenizer}, {args.text})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
