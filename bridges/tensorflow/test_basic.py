"""The GRADUS device in TensorFlow: it is listed, ops placed on it with soft placement off
run there and match TensorFlow's CPU, a missing kernel raises, data survives the copies,
and GRADUS_TF_DISABLE=1 hides the device."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gtf_load import DEVICE, check, finish, tf  # noqa: E402

devs = [d.device_type for d in tf.config.list_physical_devices()]
check("GRADUS" in devs, f"GRADUS listed: {devs}")

rng = np.random.default_rng(1)
a = rng.standard_normal((33, 17)).astype(np.float32)
b = rng.standard_normal((17, 9)).astype(np.float32)


def model(x, y):
    z = tf.matmul(x, y)
    return tf.nn.relu(z + 0.5), tf.reduce_sum(z * z, axis=0)


with tf.device("/CPU:0"):
    want = [t.numpy() for t in model(tf.constant(a), tf.constant(b))]
with tf.device(DEVICE):
    got_t = model(tf.constant(a), tf.constant(b))
for t in got_t:
    check(t.device.endswith("GRADUS:0"), f"result on GRADUS: {t.device}")
got = [t.numpy() for t in got_t]
for w, g in zip(want, got):
    check(w.shape == g.shape and np.allclose(w, g, rtol=1e-5, atol=1e-5), f"matches the CPU: {np.abs(w - g).max()}")

# the bytes survive host -> device -> host, at sizes around the copy paths
for n in (1, 7, 4096, 1 << 20):
    v = rng.standard_normal(n).astype(np.float32)
    with tf.device(DEVICE):
        back = tf.identity(tf.constant(v)).numpy()
    check(np.array_equal(v, back), f"round trip of {n} floats")

# a kernel the bridge does not have raises instead of running on the CPU
try:
    with tf.device(DEVICE):
        tf.math.cumsum(tf.constant(a), axis=0).numpy()
    check(False, "Cumsum on GRADUS should raise with soft placement off")
except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
    check("Cumsum" in str(e), f"the error names the op: {str(e)[:200]}")

# a bad operand is an error from the kernel, not a crash
try:
    with tf.device(DEVICE):
        tf.raw_ops.MatMul(a=tf.constant(a), b=tf.constant(a)).numpy()
    check(False, "MatMul of mismatched shapes should raise")
except tf.errors.InvalidArgumentError:
    pass

# variables: on a backend with host memory they live on GRADUS like any tensor; on a device
# the host cannot touch (the test device) creating one there is refused with what to do,
# instead of TensorFlow's AssignAdd writing device memory from the host
backend = os.environ.get("GRADUS_TF_BACKEND")
one = tf.ones((4,))
try:
    with tf.device(DEVICE):
        v = tf.Variable(one)
        v.assign_add(one)
    check(backend != "testdev", "a variable on the test device should be refused")
    check(np.array_equal(v.numpy(), np.full(4, 2.0, np.float32)), f"assign_add on GRADUS: {v.numpy()}")
except tf.errors.OpError as e:
    check(backend == "testdev" and "tf.device('/CPU:0')" in str(e), f"variable refused: {str(e)[:300]}")

if os.environ.get("GTF_CHILD") is None:
    env = dict(os.environ, GRADUS_TF_DISABLE="1", GTF_CHILD="1")
    code = "import sys; sys.path.insert(0, %r); from gtf_load import tf; " \
           "print([d.device_type for d in tf.config.list_physical_devices()])" % os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    check(out.returncode == 0 and "GRADUS" not in out.stdout and "CPU" in out.stdout,
          f"GRADUS_TF_DISABLE=1 hides the device: {out.stdout.strip()} {out.stderr[-300:]}")
    # GRADUS_SYNC=1 (every op and copy waits for the device): the same bits
    env = dict(os.environ, GRADUS_SYNC="1", GTF_CHILD="1")
    code = "import sys, numpy as np; sys.path.insert(0, %r); from gtf_load import tf, DEVICE; " \
           "a = np.random.default_rng(1).standard_normal((33, 17)).astype(np.float32); " \
           "b = np.random.default_rng(2).standard_normal((17, 9)).astype(np.float32)\n" \
           "with tf.device(DEVICE): y = tf.nn.relu(tf.matmul(a, b) + 0.5)\n" \
           "sys.stdout.write(y.numpy().tobytes().hex())" % os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    b2 = np.random.default_rng(2).standard_normal((17, 9)).astype(np.float32)
    a1 = np.random.default_rng(1).standard_normal((33, 17)).astype(np.float32)
    with tf.device(DEVICE):
        here = tf.nn.relu(tf.matmul(a1, b2) + 0.5).numpy().tobytes().hex()
    check(out.returncode == 0 and out.stdout == here, f"GRADUS_SYNC=1 gives the same bits: {out.stderr[-300:]}")

finish(f"tf_basic on {os.environ.get('GRADUS_TF_BACKEND', 'the preferred backend')}:")
