#!/usr/bin/env python3
"""Checks a checkpoint directory that gradus wrote against the Python tools that read it.

    python3 bench/check_formats.py DIR [--logits FILE] [--rtol R] [--atol A]

DIR holds config.json and model.safetensors. The weights are read with the `safetensors`
library and the model is built with `transformers` (AutoConfig and
AutoModelForCausalLM.from_pretrained); the script then checks that

  - config.json loads into the class its "architectures" names, with the file's shapes;
  - transformers finds every parameter it needs in the file, none left over, none of a
    different shape (output_loading_info), the tied output projection excepted;
  - every tensor of the file is in the model's state_dict under the same name, with the
    same shape, dtype and values (exactly: loading copies the bytes);
  - a forward pass gives finite logits of shape (1, T, vocab_size).

With --logits FILE (a safetensors file gradus wrote holding "input_ids", integers of
shape (T,) or (B, T), and "logits", floats of shape (..., T, V)), the model's logits for
those ids must match gradus's within the tolerances.

Needs torch, safetensors and transformers. Exits 0 when everything matches, 1 otherwise,
2 on bad arguments; each mismatch is printed.
"""

import argparse
import json
import os
import sys

DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "U8": "uint8",
    "I8": "int8",
    "BOOL": "bool",
}


class Report:
    def __init__(self):
        self.failures = 0

    def fail(self, msg):
        self.failures += 1
        print("MISMATCH: " + msg)

    def ok(self, msg):
        print("ok: " + msg)


def file_header(path):
    """The raw header of a safetensors file, read here without the library so that a
    problem with the file is told apart from a problem in the library's view of it."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return header


def state_key(name, state, prefixes):
    """The state_dict key a file's tensor name loads into: the same name, or the name
    under the base model's prefix (old GPT-2 files omit "transformer.")."""
    if name in state:
        return name
    for p in prefixes:
        if p + name in state:
            return p + name
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory with config.json and model.safetensors")
    ap.add_argument("--logits", help="safetensors file with input_ids and gradus's logits for them")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()

    config_path = os.path.join(args.dir, "config.json")
    weights_path = os.path.join(args.dir, "model.safetensors")
    for p in (config_path, weights_path):
        if not os.path.isfile(p):
            print("no such file: " + p, file=sys.stderr)
            return 2

    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    r = Report()
    with open(config_path) as f:
        raw_config = json.load(f)
    arch = (raw_config.get("architectures") or [None])[0]

    # ---- the weights, through the safetensors library ----
    header = file_header(weights_path)
    tensors = {}
    with safe_open(weights_path, framework="pt") as f:
        metadata = f.metadata() or {}
        for name in f.keys():
            tensors[name] = f.get_tensor(name)
    # transformers refuses a safetensors file whose metadata has no "format" it knows
    if metadata.get("format") not in ("pt", "tf", "flax", "mlx"):
        r.fail('model.safetensors metadata has format %r; transformers wants {"format": "pt"}'
               % metadata.get("format"))
    if set(header) != set(tensors):
        r.fail("the header names %d tensors, the library read %d" % (len(header), len(tensors)))
    for name, info in header.items():
        t = tensors.get(name)
        if t is None:
            continue
        if list(t.shape) != list(info["shape"]):
            r.fail("%s: header shape %s, library shape %s" % (name, info["shape"], list(t.shape)))
        if str(t.dtype).replace("torch.", "") != DTYPES.get(info["dtype"]):
            r.fail("%s: header dtype %s, library dtype %s" % (name, info["dtype"], t.dtype))
    r.ok("model.safetensors: %d tensors, %d parameters" % (len(tensors), sum(t.numel() for t in tensors.values())))
    float_dtypes = {t.dtype for t in tensors.values() if t.is_floating_point()}
    load_dtype = float_dtypes.pop() if len(float_dtypes) == 1 else torch.float32

    # ---- the config ----
    config = AutoConfig.from_pretrained(args.dir)
    want_config = {"LlamaForCausalLM": "LlamaConfig", "Qwen2ForCausalLM": "Qwen2Config",
                   "Qwen3ForCausalLM": "Qwen3Config", "GPT2LMHeadModel": "GPT2Config"}.get(arch)
    if want_config is None:
        r.fail("config.json: architectures %r is not one gradus writes" % raw_config.get("architectures"))
    elif type(config).__name__ != want_config:
        r.fail("config.json loads as %s, not %s" % (type(config).__name__, want_config))
    for key, value in raw_config.items():
        if key in ("architectures", "model_type", "torch_dtype", "dtype", "rope_scaling", "rope_theta"):
            continue
        if hasattr(config, key) and getattr(config, key) != value:
            r.fail("config.json: %s is %r in the file, %r in %s" % (key, value, getattr(config, key),
                                                                       type(config).__name__))
    r.ok("config.json loads as %s" % type(config).__name__)

    # ---- the model ----
    # transformers 5 names the argument dtype; 4 takes torch_dtype (and would keep an
    # unknown dtype= as a config attribute without using it)
    major = int(transformers.__version__.split(".")[0])
    dtype_arg = {"dtype": load_dtype} if major >= 5 else {"torch_dtype": load_dtype}
    try:
        model, info = AutoModelForCausalLM.from_pretrained(args.dir, output_loading_info=True, **dtype_arg)
    except Exception as e:  # transformers raises OSError, ValueError, RuntimeError...
        r.fail("AutoModelForCausalLM.from_pretrained: %s: %s" % (type(e).__name__, e))
        print("%s: %d mismatches" % (args.dir, r.failures))
        return 1
    model.eval()
    if arch is not None and type(model).__name__ != arch:
        r.fail("the model loads as %s, not %s" % (type(model).__name__, arch))
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out_name = "lm_head.weight"
    missing = [k for k in info.get("missing_keys", []) if not (tied and k == out_name)]
    if missing:
        r.fail("transformers found no tensor for %d parameters: %s" % (len(missing), ", ".join(sorted(missing)[:10])))
    if info.get("unexpected_keys"):
        r.fail("transformers did not use %d tensors of the file: %s"
               % (len(info["unexpected_keys"]), ", ".join(sorted(info["unexpected_keys"])[:10])))
    if info.get("mismatched_keys"):
        r.fail("tensors of the wrong shape: %s" % (info["mismatched_keys"][:10],))
    for e in info.get("error_msgs", []) or []:
        r.fail("loading: %s" % e)

    state = model.state_dict()
    prefixes = [model.base_model_prefix + "."] if getattr(model, "base_model_prefix", "") else []
    used = set()
    for name, t in tensors.items():
        key = state_key(name, state, prefixes)
        if key is None:
            r.fail("%s: no parameter of that name in %s" % (name, type(model).__name__))
            continue
        used.add(key)
        m = state[key]
        if tuple(m.shape) != tuple(t.shape):
            r.fail("%s: shape %s in the file, %s in the model" % (name, tuple(t.shape), tuple(m.shape)))
            continue
        if m.dtype != t.dtype:
            r.fail("%s: dtype %s in the file, %s in the model" % (name, t.dtype, m.dtype))
            continue
        if not torch.equal(m.cpu(), t):
            diff = (m.cpu().double() - t.double()).abs().max().item()
            r.fail("%s: values differ (max |difference| %.3g)" % (name, diff))
    params = dict(model.named_parameters())
    for key in state:
        if key in used or key not in params:
            continue  # buffers (rotary tables, masks) are not saved
        if tied and key == out_name:
            emb = model.get_input_embeddings().weight
            if model.get_output_embeddings().weight.data_ptr() != emb.data_ptr():
                r.fail("tie_word_embeddings is set but lm_head.weight is not the embedding table")
            continue
        r.fail("%s: a parameter of the model that the file lacks" % key)
    r.ok("%d tensors compared with the model's state_dict" % len(used))

    # ---- a forward pass ----
    vocab = config.vocab_size
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", 16)
    T = min(16, positions)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, T), generator=gen)
    with torch.no_grad():
        logits = model(ids).logits
    if tuple(logits.shape) != (1, T, vocab):
        r.fail("logits of shape %s, want %s" % (tuple(logits.shape), (1, T, vocab)))
    elif not torch.isfinite(logits).all():
        r.fail("the forward pass gives non-finite logits")
    else:
        r.ok("forward pass: logits %s, finite" % (tuple(logits.shape),))

    # ---- gradus's logits ----
    if args.logits:
        with safe_open(args.logits, framework="pt") as f:
            ids = f.get_tensor("input_ids").long()
            want = f.get_tensor("logits").float()
        if ids.dim() == 1:
            ids = ids.unsqueeze(0)
        with torch.no_grad():
            got = model(ids).logits.float()
        want = want.reshape(got.shape) if want.numel() == got.numel() else want
        if got.shape != want.shape:
            r.fail("logits: gradus gave %s, transformers %s" % (tuple(want.shape), tuple(got.shape)))
        else:
            diff = (got - want).abs()
            bound = args.atol + args.rtol * want.abs()
            bad = (diff > bound).sum().item()
            if bad:
                r.fail("logits: %d of %d differ beyond atol %g + rtol %g (max |difference| %.3g)"
                       % (bad, want.numel(), args.atol, args.rtol, diff.max().item()))
            else:
                r.ok("logits match gradus's (max |difference| %.3g)" % diff.max().item())

    print("%s: %s" % (args.dir, "all checks passed" if r.failures == 0 else "%d mismatches" % r.failures))
    return 0 if r.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
