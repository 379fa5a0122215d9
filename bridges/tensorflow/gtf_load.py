"""Loads the bridge into TensorFlow for the tests and the sweep: GRADUS_TF_LIBRARY names
libgradus_tf.so (ctest sets it). Import this before any TensorFlow op runs."""
import ctypes
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import load_library  # noqa: E402

LIBRARY = os.environ.get("GRADUS_TF_LIBRARY")
if not LIBRARY or not os.path.exists(LIBRARY):
    sys.exit("GRADUS_TF_LIBRARY must name libgradus_tf.so")
load_library.load_pluggable_device_library(LIBRARY)
tf.get_logger().setLevel("ERROR")  # the sweep traces small functions many times, on purpose
tf.config.set_soft_device_placement(False)  # a missing kernel raises instead of running on the CPU

DEVICE = "/device:GRADUS:0"


def registered_kernels():
    """(TensorFlow op, dtype name, gradus op, host-memory input or None), as registered."""
    lib = ctypes.CDLL(LIBRARY)
    lib.gradus_tf_kernels.restype = ctypes.c_char_p
    rows = []
    for line in lib.gradus_tf_kernels().decode().splitlines():
        op, dt, gop, host = line.split()
        rows.append((op, dt, gop, None if host == "-" else host))
    return rows


def counts():
    """{TensorFlow op: (runs, runs on the backend's own kernel)} of the bridge so far."""
    lib = ctypes.CDLL(LIBRARY)
    lib.gradus_tf_counts.restype = ctypes.c_char_p
    out = {}
    for line in lib.gradus_tf_counts().decode().splitlines():
        op, n, on = line.split()
        out[op] = (int(n), int(on))
    return out


failures = 0


def check(cond, what):
    """Counts and prints a failed check; the test goes on."""
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def finish(label):
    """Prints the test's verdict and exits 1 when a check failed."""
    print(label, "ok" if failures == 0 else f"{failures} check(s) failed")
    sys.exit(1 if failures else 0)
