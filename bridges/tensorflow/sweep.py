"""The TensorFlow sweep: every op the bridge registers, at each dtype, runs on GRADUS and on
TensorFlow's CPU with identical inputs (soft placement off, so a missing kernel raises),
twice on GRADUS for bitwise determinism. Broken registrations are reported: two GRADUS
kernels for one op and dtype, and constraints or host-memory arguments naming what the op
does not have. Ops of the bridge's list that need a C API the wheel lacks are named with
the reason (checked against the library, not assumed). Ends with
"N verified, M need a missing C API, U unaccounted" and, with --doc FILE, writes the table.

    GRADUS_TF_LIBRARY=build/tensorflow/libgradus_tf.so python sweep.py [--doc docs/tensorflow.md]
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gtf_load import DEVICE, counts, registered_kernels, tf  # noqa: E402
from tensorflow.python.framework import kernels as tf_kernels  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402

raw = tf.raw_ops
DTYPES = {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}
# normalized mean squared error allowed against TensorFlow's CPU, by dtype
TOL = {"float32": 1e-10, "float16": 1e-5, "bfloat16": 1e-3}


def uniform(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# op -> (inputs from a generator, function of the input tensors, inputs that are float
# operands of the case's dtype; the others keep their numpy dtype)
CASES = {
    "Relu": (lambda r: [uniform(r, (4, 33))], lambda x: raw.Relu(features=x)),
    "Sigmoid": (lambda r: [uniform(r, (4, 33), -4, 4)], lambda x: raw.Sigmoid(x=x)),
    "Tanh": (lambda r: [uniform(r, (4, 33), -3, 3)], lambda x: raw.Tanh(x=x)),
    "Exp": (lambda r: [uniform(r, (3, 17), -3, 3)], lambda x: raw.Exp(x=x)),
    "Log": (lambda r: [uniform(r, (3, 17), 0.1, 4)], lambda x: raw.Log(x=x)),
    "Neg": (lambda r: [uniform(r, (3, 17))], lambda x: raw.Neg(x=x)),
    "Abs": (lambda r: [uniform(r, (3, 17))], lambda x: raw.Abs(x=x)),
    "Sqrt": (lambda r: [uniform(r, (3, 17), 0.1, 4)], lambda x: raw.Sqrt(x=x)),
    "Rsqrt": (lambda r: [uniform(r, (3, 17), 0.1, 4)], lambda x: raw.Rsqrt(x=x)),
    "Square": (lambda r: [uniform(r, (3, 17))], lambda x: raw.Square(x=x)),
    "ReluGrad": (lambda r: [uniform(r, (4, 9)), uniform(r, (4, 9))], lambda g, f: raw.ReluGrad(gradients=g, features=f)),
    "SigmoidGrad": (lambda r: [uniform(r, (4, 9), 0.05, 0.95), uniform(r, (4, 9))], lambda y, dy: raw.SigmoidGrad(y=y, dy=dy)),
    "TanhGrad": (lambda r: [uniform(r, (4, 9), -0.9, 0.9), uniform(r, (4, 9))], lambda y, dy: raw.TanhGrad(y=y, dy=dy)),
    "AddV2": (lambda r: [uniform(r, (5, 1, 7)), uniform(r, (3, 7))], lambda a, b: raw.AddV2(x=a, y=b)),
    "Sub": (lambda r: [uniform(r, (5, 3, 7)), uniform(r, (7,))], lambda a, b: raw.Sub(x=a, y=b)),
    "Mul": (lambda r: [uniform(r, (2, 3, 7)), uniform(r, (2, 1, 7))], lambda a, b: raw.Mul(x=a, y=b)),
    "RealDiv": (lambda r: [uniform(r, (4, 6)), uniform(r, (4, 6), 0.5, 2)], lambda a, b: raw.RealDiv(x=a, y=b)),
    "Maximum": (lambda r: [uniform(r, (4, 6)), uniform(r, (6,))], lambda a, b: raw.Maximum(x=a, y=b)),
    "Minimum": (lambda r: [uniform(r, (4, 6)), uniform(r, (4, 6))], lambda a, b: raw.Minimum(x=a, y=b)),
    "BiasAdd": (lambda r: [uniform(r, (2, 5, 5, 8)), uniform(r, (8,))], lambda x, b: raw.BiasAdd(value=x, bias=b)),
    "BiasAddGrad": (lambda r: [uniform(r, (2, 5, 5, 8))], lambda g: raw.BiasAddGrad(out_backprop=g)),
    "MatMul": (lambda r: [uniform(r, (13, 21)), uniform(r, (9, 21))],
               lambda a, b: raw.MatMul(a=a, b=b, transpose_b=True)),
    "BatchMatMulV2": (lambda r: [uniform(r, (2, 1, 5, 7)), uniform(r, (3, 7, 4))],
                      lambda a, b: raw.BatchMatMulV2(x=a, y=b)),
    "BatchMatMulV3": (lambda r: [uniform(r, (3, 7, 5)), uniform(r, (3, 6, 7))],
                      lambda a, b: raw.BatchMatMulV3(x=a, y=b, Tout=a.dtype, adj_x=True, adj_y=True)),
    "Softmax": (lambda r: [uniform(r, (6, 10), -3, 3)], lambda x: raw.Softmax(logits=x)),
    "LogSoftmax": (lambda r: [uniform(r, (6, 10), -3, 3)], lambda x: raw.LogSoftmax(logits=x)),
    "Sum": (lambda r: [uniform(r, (3, 4, 5)), np.array([0, 2], np.int32)],
            lambda x, a: raw.Sum(input=x, axis=a, keep_dims=False), [0]),
    "Mean": (lambda r: [uniform(r, (3, 4, 5)), np.array([-1], np.int32)],
             lambda x, a: raw.Mean(input=x, axis=a, keep_dims=True), [0]),
    "Max": (lambda r: [uniform(r, (3, 4, 5)), np.array([1], np.int32)],
            lambda x, a: raw.Max(input=x, axis=a, keep_dims=False), [0]),
    "Conv2D": (lambda r: [uniform(r, (2, 7, 7, 3)), uniform(r, (3, 3, 3, 4))],
               lambda x, f: raw.Conv2D(input=x, filter=f, strides=[1, 1, 1, 1], padding="SAME")),
    "Conv2DBackpropInput": (lambda r: [np.array([2, 7, 7, 3], np.int32), uniform(r, (3, 3, 3, 4)), uniform(r, (2, 7, 7, 4))],
                            lambda s, f, dy: raw.Conv2DBackpropInput(input_sizes=s, filter=f, out_backprop=dy,
                                                                     strides=[1, 1, 1, 1], padding="SAME"), [1, 2]),
    "Conv2DBackpropFilter": (lambda r: [uniform(r, (2, 8, 8, 3)), np.array([3, 3, 3, 4], np.int32), uniform(r, (2, 3, 3, 4))],
                             lambda x, s, dy: raw.Conv2DBackpropFilter(input=x, filter_sizes=s, out_backprop=dy,
                                                                       strides=[1, 2, 2, 1], padding="VALID"), [0, 2]),
    "MaxPool": (lambda r: [uniform(r, (2, 6, 6, 3))],
                lambda x: raw.MaxPool(input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")),
    "MaxPoolGrad": (lambda r: maxpool_grad_inputs(r),
                    lambda x, y, g: raw.MaxPoolGrad(orig_input=x, orig_output=y, grad=g, ksize=[1, 2, 2, 1],
                                                    strides=[1, 2, 2, 1], padding="VALID")),
    "AvgPool": (lambda r: [uniform(r, (2, 6, 6, 3))],
                lambda x: raw.AvgPool(value=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")),
    "AvgPoolGrad": (lambda r: [np.array([2, 6, 6, 3], np.int32), uniform(r, (2, 3, 3, 3))],
                    lambda s, g: raw.AvgPoolGrad(orig_input_shape=s, grad=g, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                                 padding="VALID"), [1]),
    "SparseSoftmaxCrossEntropyWithLogits": (
        lambda r: [uniform(r, (8, 10), -3, 3), r.integers(0, 10, size=8).astype(np.int32)],
        lambda x, y: raw.SparseSoftmaxCrossEntropyWithLogits(features=x, labels=y), [0]),
    "SoftmaxCrossEntropyWithLogits": (
        lambda r: [uniform(r, (8, 10), -3, 3), softmax_rows(uniform(r, (8, 10), -2, 2))],
        lambda x, y: raw.SoftmaxCrossEntropyWithLogits(features=x, labels=y)),
    "Cast": (lambda r: [uniform(r, (5, 9), -4, 4)], lambda x, dst=None: raw.Cast(x=x, DstT=dst)),
    "Transpose": (lambda r: [uniform(r, (2, 3, 4)), np.array([2, 0, 1], np.int32)],
                  lambda x, p: raw.Transpose(x=x, perm=p), [0]),
    "ConcatV2": (lambda r: [uniform(r, (2, 3)), uniform(r, (2, 5)), np.array(1, np.int32)],
                 lambda a, b, ax: raw.ConcatV2(values=[a, b], axis=ax), [0, 1]),
    "GatherV2": (lambda r: [uniform(r, (5, 4)), r.integers(0, 5, size=(2, 3)).astype(np.int32), np.array(0, np.int32)],
                 lambda p, i, ax: raw.GatherV2(params=p, indices=i, axis=ax), [0]),
    "AddN": (lambda r: [uniform(r, (3, 5)), uniform(r, (3, 5)), uniform(r, (3, 5)), uniform(r, (3, 5))],
             lambda a, b, c, d: raw.AddN(inputs=[a, b, c, d])),
    # the fused ops come from the graph pass: each case is a tf.function whose chain it fuses
    "_FusedMatMul": (lambda r: [uniform(r, (16, 24)), uniform(r, (24, 12)), uniform(r, (12,))],
                     lambda x, w, b: graph_fn("dense")(x, w, b)),
    "_FusedConv2D": (lambda r: [uniform(r, (2, 7, 7, 3)), uniform(r, (3, 3, 3, 4)), uniform(r, (4,))],
                     lambda x, f, b: graph_fn("conv")(x, f, b)),
}


@tf.autograph.experimental.do_not_convert
def dense_relu(x, w, b):
    return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))


@tf.autograph.experimental.do_not_convert
def conv_relu(x, f, b):
    return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, f, 1, "SAME"), b))


def graph_fn(name):
    """A new tf.function of the chain each time: traced under the caller's device scope."""
    return tf.function({"dense": dense_relu, "conv": conv_relu}[name])


def maxpool_grad_inputs(r):
    x = uniform(r, (2, 6, 6, 3))
    with tf.device("/CPU:0"):
        y = raw.MaxPool(input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID").numpy()
    return [x, y, uniform(r, (2, 3, 3, 3))]


def softmax_rows(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


# Ops of the bridge's list whose kernels need what the C API of this TensorFlow lacks:
# op -> (the symbols they need, why). The sweep checks the symbols really are missing.
NEEDS_MISSING_C_API = {
    "ResourceApplyAdam": (["TF_GetInputTensorFromVariable", "TF_MaybeLockVariableInputMutexesInOrder"],
                          "reads and updates resource variables in place"),
    "ResourceApplyGradientDescent": (["TF_GetInputTensorFromVariable", "TF_MaybeLockVariableInputMutexesInOrder"],
                                     "reads and updates resource variables in place"),
}

# Ops of the bridge's list that TensorFlow itself runs on any device (its DEFAULT kernels:
# no arithmetic, only buffers), verified on GRADUS like the bridge's own.
TENSORFLOW_DEFAULT = {
    "Reshape": (lambda r: [uniform(r, (4, 6)), np.array([3, 8], np.int32)], lambda x, s: raw.Reshape(tensor=x, shape=s), [0]),
}

# Everything the bridge is to cover (issue 14's list): each must be verified or explained.
REQUIRED = """MatMul BatchMatMulV2 BatchMatMulV3 BiasAdd BiasAddGrad Conv2D Conv2DBackpropInput
Conv2DBackpropFilter MaxPool MaxPoolGrad AvgPool AvgPoolGrad Relu ReluGrad Sigmoid SigmoidGrad Tanh
TanhGrad Softmax LogSoftmax SparseSoftmaxCrossEntropyWithLogits SoftmaxCrossEntropyWithLogits Sum Mean
Max AddV2 Sub Mul RealDiv Maximum Minimum Neg Exp Log Sqrt Rsqrt Square Abs Cast Reshape Transpose
ConcatV2 GatherV2 ResourceApplyAdam ResourceApplyGradientDescent""".split()


def nmse(want, got):
    want = want.astype(np.float64)
    got = got.astype(np.float64)
    den = float(np.mean(want * want)) or 1.0
    return float(np.mean((want - got) ** 2)) / den


def run_on(device, fn, args, kw):
    """The op's outputs as a list of tensors."""
    with tf.device(device):
        ts = [tf.constant(a) for a in args]
        out = fn(*ts, **kw)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def one_case(op, dtype, case):
    gen, fn = case[0], case[1]
    floats = case[2] if len(case) > 2 else None
    kw = {}
    if ">" in dtype:  # Cast: source > destination
        dtype, dst = dtype.split(">")
        kw["dst"] = DTYPES[dst]
    rng = np.random.default_rng(1234)
    args = gen(rng)
    for i, a in enumerate(args):
        if a.dtype == np.float32 and (floats is None or i in floats):
            args[i] = tf.cast(tf.constant(a), DTYPES[dtype]).numpy()
    before_runs, before_on = counts().get(op, (0, 0))
    try:
        g1 = run_on(DEVICE, fn, args, kw)
        g2 = run_on(DEVICE, fn, args, kw)
    except tf.errors.OpError as e:
        return "failing", str(e).splitlines()[0][:160]
    after_runs, after_on = counts().get(op, (0, 0))
    if after_runs - before_runs != 2 and op not in TENSORFLOW_DEFAULT:
        return "failing", f"the bridge's {op} kernel did not run (twice)"
    where = ("-" if op in TENSORFLOW_DEFAULT else "backend" if after_on - before_on == 2 else "reference")
    worst = 0.0
    tol = TOL[dtype] if "dst" not in kw else max(TOL[dtype], TOL[kw["dst"].name])
    note = ""
    try:
        cpu = run_on("/CPU:0", fn, args, kw)
    except tf.errors.OpError:
        # TensorFlow's CPU lacks the op at this dtype: the same rounded inputs in float32
        args32 = [a.astype(np.float32) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a for a in args]
        cpu = [tf.cast(t, g.dtype) for t, g in zip(run_on("/CPU:0", fn, args32, kw), g1)]
        note = " (the CPU at float32)"
    for t1, t2, tc in zip(g1, g2, cpu):
        if not t1.device.endswith("GRADUS:0"):
            return "failing", f"ran on {t1.device}"
        a1, a2, c = t1.numpy(), t2.numpy(), tc.numpy()
        if a1.tobytes() != a2.tobytes():
            return "failing", "second run differs"
        if a1.shape != c.shape:
            return "failing", f"shape {a1.shape} vs the CPU's {c.shape}"
        if not np.all(np.isfinite(a1.astype(np.float64))):
            return "failing", "non-finite output"
        worst = max(worst, nmse(c, a1))
    if worst > tol:
        return "failing", f"nmse {worst:.2e} > {tol:.0e}"
    return "verified", f"nmse {worst:.1e}{note}", where


def registration_problems(regs):
    """Duplicate GRADUS kernels and constraints or host-memory args the op lacks."""
    problems = []
    seen = {}
    for op, dt, _, host in regs:
        seen[(op, dt)] = seen.get((op, dt), 0) + 1
    for (op, dt), n in seen.items():
        if n > 1:
            problems.append(f"{op} {dt}: registered {n} times")
    for op in sorted({r[0] for r in regs}):
        od = op_def_registry.get(op)
        if od is None:
            problems.append(f"{op}: TensorFlow has no such op")
            continue
        attrs = {a.name for a in od.attr}
        inputs = {a.name for a in od.input_arg}
        for k in tf_kernels.get_registered_kernels_for_op(op).kernel:
            if k.device_type != "GRADUS":
                continue
            allowed = {a.name: {tf.dtypes.as_dtype(t).name for t in a.allowed_values.list.type} for a in od.attr}
            for c in k.constraint:
                if c.name not in attrs:
                    problems.append(f"{op}: a constraint on {c.name}, which the op does not have")
                    continue
                for t in c.allowed_values.list.type:
                    name = tf.dtypes.as_dtype(t).name
                    if allowed[c.name] and name not in allowed[c.name]:
                        problems.append(f"{op}: a kernel for {c.name}={name}, which the op does not allow")
            for h in k.host_memory_arg:
                if h not in inputs and h not in {a.name for a in od.output_arg}:
                    problems.append(f"{op}: host memory for {h}, which the op does not have")
        # two GRADUS kernels whose constraints admit the same dtypes are a duplicate
        by_key = {}
        for k in tf_kernels.get_registered_kernels_for_op(op).kernel:
            if k.device_type == "GRADUS":
                key = tuple(sorted((c.name, tuple(sorted(tf.dtypes.as_dtype(t).name for t in c.allowed_values.list.type)))
                                   for c in k.constraint))
                by_key[key] = by_key.get(key, 0) + 1
        for key, n in by_key.items():
            if n > 1:
                problems.append(f"{op} {dict(key)}: {n} GRADUS kernels in TensorFlow's registry")
    return problems


def missing_api(symbols):
    """The symbols no library of this TensorFlow exports (looked up, not assumed)."""
    lib_dir = os.path.dirname(tf.__file__)
    libs = [ctypes.CDLL(os.path.join(lib_dir, "libtensorflow_framework.so.2"))]
    cc = os.path.join(lib_dir, "libtensorflow_cc.so.2")
    if os.path.exists(cc):
        libs.append(ctypes.CDLL(cc))
    return [s for s in symbols if not any(hasattr(lib, s) for lib in libs)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doc", help="write the table here (markdown)")
    ap.add_argument("--check", help="a committed table (docs/tensorflow.md): when it was written by the same "
                    "TensorFlow on the same backend, the table written now must equal it")
    args = ap.parse_args()
    regs = registered_kernels()
    rows = []
    for op, dt, gop, _ in regs:
        case = CASES.get(op)
        if case is None:
            rows.append((op, dt, gop, "failing", "no sweep case", ""))
            continue
        st, note, *where = one_case(op, dt, case)
        rows.append((op, dt, gop, st, note, where[0] if where else ""))
    for op, case in TENSORFLOW_DEFAULT.items():
        for dt in DTYPES:
            st, note, *where = one_case(op, dt, case)
            rows.append((op, dt, "(TensorFlow's own kernel)", st, note, where[0] if where else ""))
    missing_rows = []
    for op, (syms, why) in NEEDS_MISSING_C_API.items():
        lacking = missing_api(syms)
        if lacking:
            missing_rows.append((op, why, ", ".join(lacking)))
        else:
            rows.append((op, "-", "-", "failing", "listed as needing a missing C API, but the symbols exist", ""))
    problems = registration_problems(regs)
    covered = {r[0] for r in rows if r[3] == "verified"} | {m[0] for m in missing_rows}
    failing = [r for r in rows if r[3] != "verified"]
    absent = [op for op in REQUIRED if op not in covered and op not in {r[0] for r in rows}]
    verified = sum(1 for r in rows if r[3] == "verified")
    unaccounted = len(failing) + len(absent) + len(problems)

    for r in rows:
        print(f"{r[0]:<30} {r[1]:<9} {r[3]:<9} {r[5]:<9} {r[4]}")
    for m in missing_rows:
        print(f"{m[0]:<30} {'-':<9} needs a missing C API: {m[2]}")
    for p in problems:
        print("registration:", p)
    for op in absent:
        print(f"{op:<30} unaccounted: no kernel and no reason")
    summary = f"{verified} verified, {len(missing_rows)} need a missing C API, {unaccounted} unaccounted"
    print(summary)

    if args.doc:
        backend = os.environ.get("GRADUS_TF_BACKEND") or "the preferred backend"
        with open(args.doc, "w") as f:
            f.write("# gradus in TensorFlow: the sweep\n\n")
            f.write("Written by `bridges/tensorflow/sweep.py --doc docs/tensorflow.md` (TensorFlow "
                    f"{tf.__version__}, backend {backend}). Each registered op and dtype runs on the GRADUS "
                    "device and on TensorFlow's CPU with the same inputs, soft placement off, twice on GRADUS "
                    "(the two results must be bitwise identical); the error is the normalized mean squared "
                    "error against the CPU, allowed " + ", ".join(f"{k} {v:.0e}" for k, v in TOL.items()) + ". "
                    "*gradus ran it on*: the backend's own kernels for every gradus op the TensorFlow op became, "
                    "or (some of them) gradus's reference across copies — the staircase's fallback.\n\n")
            f.write(f"**{summary}.**\n\n")
            f.write("| TensorFlow op | dtype | gradus op | result | gradus ran it on | |\n|---|---|---|---|---|---|\n")
            for r in rows:
                f.write(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[5]} | {r[4]} |\n")
            if missing_rows:
                f.write("\n## Ops that need a C API this TensorFlow lacks\n\nThey run on TensorFlow's CPU.\n\n")
                f.write("| TensorFlow op | why | missing symbols |\n|---|---|---|\n")
                for m in missing_rows:
                    f.write(f"| {m[0]} | {m[1]} | {m[2]} |\n")
            if problems or absent:
                f.write("\n## Unaccounted\n\n")
                for p in problems:
                    f.write(f"- registration: {p}\n")
                for op in absent:
                    f.write(f"- {op}: no kernel yet\n")
    if args.check and args.doc:
        with open(args.check) as f:
            old = f.read()
        with open(args.doc) as f:
            new = f.read()
        if old.splitlines()[:3] == new.splitlines()[:3] and old != new:
            print(f"{args.check} is not what the sweep writes now: run sweep.py --doc {args.check}")
            return 1
        if old.splitlines()[:3] != new.splitlines()[:3]:
            print(f"{args.check} was written by another TensorFlow or backend: not compared")
    return 0 if unaccounted == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
