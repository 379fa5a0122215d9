"""The sweep rejects broken registrations: with GRADUS_TF_TEST_BAD_REGISTRATIONS=1 the bridge
registers a second Relu float32 kernel and a Neg kernel constrained on an attribute Neg
does not have; the sweep must name both and fail."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, GRADUS_TF_TEST_BAD_REGISTRATIONS="1")
out = subprocess.run([sys.executable, os.path.join(here, "sweep.py")], env=env, capture_output=True, text=True)
text = out.stdout + out.stderr
want = ["Relu {'T': ('float32',)}: 2 GRADUS kernels", "Neg: a constraint on Tidx, which the op does not have"]
missing = [w for w in want if w not in text]
ok = out.returncode != 0 and not missing
if not ok:
    print(text[-3000:])
print("tf_badreg:", "ok" if ok else f"FAIL: rc {out.returncode}, not reported: {missing}")
sys.exit(0 if ok else 1)
