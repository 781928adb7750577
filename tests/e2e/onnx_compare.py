"""Runs exported ONNX files in onnxruntime and compares their outputs with mirror-predict's.
usage: onnx_compare.py TOLERANCE MODEL.onnx INPUT.npy PREDICTED.npy [MODEL INPUT PREDICTED ...]
The error is max |onnx - mirror| / max |mirror| (relative to the outputs' scale, so outputs
near zero do not divide by zero); the argmax of every row must agree too. Exit 1 when any
model exceeds TOLERANCE, gives another shape or a non-finite value."""
import sys

import numpy as np
import onnxruntime as ort

tol, args = float(sys.argv[1]), sys.argv[2:]
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.log_severity_level = 3
failed = 0
for model, x_path, y_path in zip(args[0::3], args[1::3], args[2::3]):
    x = np.load(x_path)
    x = x.astype(np.int32) if x.dtype.kind in "iu" else x.astype(np.float32)  # ids or floats
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        got = session.run(["output"], {"input": x})[0]
    except Exception as e:  # an invalid graph: name the model and go on with the others
        print("FAIL %s: onnxruntime cannot run it: %s" % (model, str(e)[:400]))
        failed += 1
        continue
    want = np.load(y_path)
    if got.shape != want.shape:
        print("FAIL %s: onnxruntime gives %s, mirror-predict %s" % (model, got.shape, want.shape))
        failed += 1
        continue
    err = float(np.abs(got.astype(np.float64) - want).max()) / max(float(np.abs(want).max()), 1e-30)
    argmax = (got.reshape(len(got), -1).argmax(1) == want.reshape(len(want), -1).argmax(1)).all()
    ok = err <= tol and np.isfinite(got).all() and argmax
    print("%s %s: %d samples, relative error %.2e (tolerance %.0e), argmax %s" %
          ("ok  " if ok else "FAIL", model, len(x), err, tol, "equal" if argmax else "DIFFERS"))
    failed += 0 if ok else 1
sys.exit(1 if failed else 0)
