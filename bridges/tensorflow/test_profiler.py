"""gradus's work on TensorFlow's profiler timeline: ops run on GRADUS while
tf.profiler.experimental is recording appear in the trace it writes, on a plane
"/device:GRADUS:0", named "TfOp:gradus_op", inside the profiled interval (on the clock of
TensorFlow's own planes), with durations."""
import glob
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gtf_load import DEVICE, check, finish, tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

a = tf.constant(np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32))
with tf.device(DEVICE):  # warm up outside the profile
    tf.matmul(a, a).numpy()
with tempfile.TemporaryDirectory() as logdir:
    t0 = time.time_ns()
    tf.profiler.experimental.start(logdir)
    with tf.device(DEVICE):
        for _ in range(3):
            y = tf.nn.relu(tf.matmul(a, a))
        y.numpy()
    tf.profiler.experimental.stop()
    t1 = time.time_ns()
    files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    check(len(files) == 1, f"one trace written: {files}")
    space = xplane_pb2.XSpace()
    with open(files[0], "rb") as f:
        space.ParseFromString(f.read())
planes = [p for p in space.planes if p.name == "/device:GRADUS:0"]
check(len(planes) == 1, f"a GRADUS plane among {[p.name for p in space.planes]}")
if planes:
    p = planes[0]
    names = {k: m.name for k, m in p.event_metadata.items()}
    events = [(names.get(e.metadata_id), line.timestamp_ns + e.offset_ps // 1000, e.duration_ps)
              for line in p.lines for e in line.events]
    got = sorted(n for n, _, _ in events)
    print("GRADUS events:", got)
    check(got.count("MatMul:matmul") == 3 and got.count("Relu:relu") == 3, "three MatMul and three Relu spans")
    # TensorFlow writes times relative to the start of the profile, as for its own planes
    check(all(0 <= t <= t1 - t0 for _, t, _ in events), "spans inside the profiled interval")
    check(all(d > 0 for _, _, d in events), "spans have durations")
finish("tf_profiler:")
