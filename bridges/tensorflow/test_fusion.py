"""The GRADUS graph pass: in a tf.function placed on GRADUS, MatMul or Conv2D + BiasAdd +
Relu become one _FusedMatMul / _FusedConv2D node run with gradus's fused ops, with the
results of the unfused ops on TensorFlow's CPU; a chain whose middle value is also
returned is left alone."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gtf_load import DEVICE, check, counts, finish, tf  # noqa: E402

rng = np.random.default_rng(5)
x = rng.uniform(-1, 1, (16, 24)).astype(np.float32)
w = rng.uniform(-1, 1, (24, 12)).astype(np.float32)
b = rng.uniform(-1, 1, (12,)).astype(np.float32)
img = rng.uniform(-1, 1, (2, 9, 9, 3)).astype(np.float32)
f = rng.uniform(-1, 1, (3, 3, 3, 5)).astype(np.float32)
fb = rng.uniform(-1, 1, (5,)).astype(np.float32)


def dense(x, w, b):
    return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))


def dense_t(x, w, b):  # transposed weight, no activation
    return tf.nn.bias_add(tf.matmul(x, w, transpose_b=True), b)


def conv(x, f, b):
    return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, f, 1, "SAME"), b))


def dense_both(x, w, b):  # the BiasAdd's value is returned too: only MatMul + BiasAdd fuse
    z = tf.nn.bias_add(tf.matmul(x, w), b)
    return tf.nn.relu(z), z


cases = [("dense", dense, (x, w, b), "_FusedMatMul"), ("dense_t", dense_t, (x, w.T.copy(), b), "_FusedMatMul"),
         ("conv", conv, (img, f, fb), "_FusedConv2D"), ("dense_both", dense_both, (x, w, b), None)]
for name, fn, args, fused in cases:
    with tf.device("/CPU:0"):
        want = fn(*[tf.constant(a) for a in args])
    before = counts()
    with tf.device(DEVICE):
        got = tf.function(fn)(*[tf.constant(a) for a in args])
    after = counts()
    ran = {op: after[op][0] - before.get(op, (0, 0))[0] for op in after}
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for wv, gv in zip(want, got):
        check(np.allclose(wv.numpy(), gv.numpy(), rtol=1e-5, atol=1e-5), f"{name}: matches the CPU")
    if fused:
        check(ran.get(fused, 0) == 1, f"{name}: {fused} ran once ({ran})")
        check(ran.get("BiasAdd", 0) == 0 and ran.get("Relu", 0) == 0, f"{name}: nothing left unfused ({ran})")
    else:
        check(ran.get("_FusedMatMul", 0) == 1 and ran.get("Relu", 0) == 1 and ran.get("BiasAdd", 0) == 0,
              f"{name}: the Relu left alone ({ran})")
    print(name, {k: v for k, v in ran.items() if v})

finish("tf_fusion:")
