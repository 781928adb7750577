"""Runs an exported ONNX file in onnxruntime and compares its outputs with mirror-predict's.
usage: onnx_compare.py MODEL.onnx INPUT.npy PREDICTED.npy TOLERANCE
The error is max |onnx - mirror| / max |mirror| (relative to the outputs' scale, so outputs
near zero do not divide by zero). Exit 1 when it exceeds TOLERANCE or the shapes differ."""
import sys

import numpy as np
import onnxruntime as ort

model, x_path, y_path, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
x = np.load(x_path)
if x.dtype.kind in "iu" and x.dtype != np.uint8:
    x = x.astype(np.int32)  # token ids
elif x.dtype == np.uint8:
    x = (x.astype(np.float64) / 255).astype(np.float32)
else:
    x = x.astype(np.float32)
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.log_severity_level = 3
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
got = session.run(["output"], {"input": x})[0]
want = np.load(y_path)
if got.shape != want.shape:
    print("FAIL %s: onnxruntime gives %s, mirror-predict %s" % (model, got.shape, want.shape))
    sys.exit(1)
scale = max(float(np.abs(want).max()), 1e-30)
err = float(np.abs(got.astype(np.float64) - want).max()) / scale
same_argmax = bool((got.reshape(len(got), -1).argmax(1) == want.reshape(len(want), -1).argmax(1)).all())
print("%s: %d samples, relative error %.2e (tolerance %.0e), argmax %s" %
      (model, len(x), err, tol, "equal" if same_argmax else "DIFFERS"))
sys.exit(0 if err <= tol and np.isfinite(got).all() else 1)
