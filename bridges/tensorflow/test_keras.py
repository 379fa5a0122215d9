"""Keras training through the GRADUS device: an MLP and a CNN `fit` with Adam on
Fashion-MNIST (a subset, for time), and a one-block transformer on a synthetic sequence
task, reach the accuracy the same model reaches on TensorFlow's CPU, from the same seed,
with no NaN, and the bridge's kernels did the work.

Variables live on TensorFlow's CPU and the model's arithmetic runs on GRADUS: the updates
of resource variables need kernel C API functions (TF_AssignUpdateVariable and friends)
that the tensorflow-cpu wheel does not export, and TensorFlow's own device-independent
AssignAdd/AssignSub kernels write device memory from the host (the test device faults on
them). So each step copies the weights in and the gradients out, in TensorFlow's order.

    GRADUS_TF_LIBRARY=... python test_keras.py [mlp|cnn ...]
"""
import gzip
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gtf_load import DEVICE, counts, tf  # noqa: E402
import keras  # noqa: E402

tf.config.set_soft_device_placement(True)  # Keras's bookkeeping (step counters, metrics) may use the CPU
FASHION = os.environ.get("GRADUS_FASHION_DIR", "/usr/share/datasets/fashion-mnist")
QUICK = os.environ.get("GRADUS_TEST_QUICK") == "1"


def idx(path):
    b = gzip.open(path).read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b[4 + 4 * nd:], np.uint8).reshape(dims)


def data(n_train, n_test):
    if os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        f = lambda n: idx(os.path.join(FASHION, n))  # noqa: E731
        x, y = f("train-images-idx3-ubyte.gz"), f("train-labels-idx1-ubyte.gz")
        xt, yt = f("t10k-images-idx3-ubyte.gz"), f("t10k-labels-idx1-ubyte.gz")
        name = "Fashion-MNIST"
    else:  # a synthetic stand-in: class k is a bright k-th band of rows
        rng = np.random.default_rng(3)
        def make(n):
            y = rng.integers(0, 10, n)
            x = rng.integers(0, 60, (n, 28, 28))
            for i, k in enumerate(y):
                x[i, 2 + 2 * k:5 + 2 * k, :] += 150
            return x.astype(np.uint8), y
        (x, y), (xt, yt) = make(n_train), make(n_test)
        name = "synthetic bands"
    norm = lambda a: a.astype(np.float32)[..., None] / 255.0  # noqa: E731
    return name, norm(x[:n_train]), y[:n_train].astype(np.int32), norm(xt[:n_test]), yt[:n_test].astype(np.int32)


V, T = 40, 16  # the transformer's vocabulary and sequence length


def sequences(n_train, n_test):
    """Label 1 when most tokens are in the lower half of the vocabulary."""
    rng = np.random.default_rng(11)
    def make(n):
        x = rng.integers(0, V, (n, T)).astype(np.int32)
        return x, ((x < V // 2).sum(axis=1) > T // 2).astype(np.int32)
    (x, y), (xt, yt) = make(n_train), make(n_test)
    return "synthetic sequences", x, y, xt, yt


def model(kind):
    if kind == "transformer":
        inp = keras.Input((T,), dtype="int32")
        h = keras.layers.Embedding(V, 32)(inp)
        h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(2, 16)(h, h))
        h = keras.layers.Dense(64, activation="relu")(h)
        out = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
        return keras.Model(inp, out)
    if kind == "mlp":
        layers = [keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)]
    else:
        layers = [keras.layers.Conv2D(8, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
                  keras.layers.Conv2D(16, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
                  keras.layers.Flatten(), keras.layers.Dense(10)]
    return keras.Sequential([keras.Input((28, 28, 1))] + layers)


def train(kind, device, d):
    keras.utils.set_random_seed(7)
    with tf.device("/CPU:0"):  # the variables, and the optimizer's
        m = model(kind)
        m.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  jit_compile=False)
        m.optimizer.build(m.trainable_variables)
    _, x, y, xt, yt = d
    with tf.device("/CPU:0"):  # Keras makes its metrics' variables on first use: here, on the CPU
        m.evaluate(x[:64], y[:64], verbose=0)
    with tf.device(device):
        t0 = time.time()
        h = m.fit(x, y, batch_size=64, epochs=1 if QUICK else 2, verbose=0, shuffle=False)
        _, acc = m.evaluate(xt, yt, batch_size=256, verbose=0)
    return h.history["loss"], acc, time.time() - t0


def main(kinds):
    failures = 0
    sizes = {"mlp": (6000, 2000), "cnn": (3000, 1000), "transformer": (3000, 1000)}
    for kind in kinds:
        d = sequences(*sizes[kind]) if kind == "transformer" else data(*sizes[kind])
        before = counts()
        loss_g, acc_g, t_g = train(kind, DEVICE, d)
        after = counts()
        loss_c, acc_c, t_c = train(kind, "/CPU:0", d)
        print(f"{kind} on {d[0]} ({len(d[1])} train, {len(d[3])} test): GRADUS ({os.environ.get('GRADUS_TF_BACKEND', '')}) "
              f"accuracy {acc_g:.4f} loss {loss_g[-1]:.4f} in {t_g:.1f} s; CPU accuracy {acc_c:.4f} loss {loss_c[-1]:.4f} "
              f"in {t_c:.1f} s")
        ran = {op: after[op][0] - before.get(op, (0, 0))[0] for op in after}
        # each entry: ops of which one at least ran (the graph pass fuses MatMul + BiasAdd + Relu)
        need = [("MatMul", "_FusedMatMul"), ("BiasAddGrad",), ("ReluGrad",), ("SparseSoftmaxCrossEntropyWithLogits",)]
        if kind == "cnn":
            need += [("Conv2D", "_FusedConv2D"), ("Conv2DBackpropFilter",), ("Conv2DBackpropInput",), ("MaxPool",),
                     ("MaxPoolGrad",)]
        if kind == "transformer":
            need += [("BatchMatMulV2",), ("Softmax",), ("GatherV2",), ("AddN",), ("Rsqrt",)]
        missing = [alt for alt in need if not any(ran.get(op, 0) for op in alt)]
        print("  ran on GRADUS:", ", ".join(f"{op} {n}" for op, n in sorted(ran.items()) if n))
        checks = [
            (not missing, f"ops that did not run on GRADUS: {missing}"),
            (all(math.isfinite(v) for v in loss_g), f"NaN in the loss on GRADUS: {loss_g}"),
            (abs(acc_g - acc_c) <= 0.02, f"accuracy {acc_g:.4f} on GRADUS vs {acc_c:.4f} on the CPU"),
            (acc_g >= 0.5, f"accuracy {acc_g:.4f} below 0.5: not trained"),
        ]
        for ok, what in checks:
            if not ok:
                failures += 1
                print("FAIL:", kind, what)
    print("tf_keras:", "ok" if failures == 0 else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["mlp", "cnn", "transformer"]))
