#!/usr/bin/env bash
# Makes a Python environment for the interop tests (TensorBoard's event reader reading
# --tensorboard files, the safetensors package reading our checkpoints) in DIR, from PyPI.
# Best effort: when PyPI cannot be reached the environment is left out, those two tests report
# Skipped with their reason, and the rest of the suite is unaffected. onnxruntime (for
# e2e.onnx_export) is tried on its own, so a platform without its wheel loses only that test
# (Skipped), and so are Keras 3 and JAX (its backend; for e2e.keras_interop). Prints DIR/bin on
# success.
# usage: scripts/test_python.sh DIR
set -uo pipefail
dir="${1:?usage: scripts/test_python.sh DIR}"
modules=(tensorboard safetensors numpy)
check='import tensorboard, safetensors, numpy'

# Optional: e2e.onnx_export reports Skipped without it.
add_onnxruntime() {
  "$dir/bin/python3" -c 'import onnxruntime' 2>/dev/null ||
    timeout 300 "$dir/bin/pip" install -q --disable-pip-version-check onnxruntime >&2 ||
    echo "test_python: could not install onnxruntime; e2e.onnx_export will be skipped" >&2
}

# Optional: e2e.keras_weights, e2e.keras_interop and e2e.keras_tutorials report Skipped without
# them (KERAS_BACKEND=jax: the smallest backend).
add_keras() {
  KERAS_BACKEND=jax "$dir/bin/python3" -c 'import keras, jax, h5py' 2>/dev/null ||
    timeout 600 "$dir/bin/pip" install -q --disable-pip-version-check keras jax h5py >&2 ||
    echo "test_python: could not install keras/jax; the Keras e2e tests will be skipped" >&2
}

if [ -x "$dir/bin/python3" ] && "$dir/bin/python3" -c "$check" 2>/dev/null; then
  add_onnxruntime
  add_keras
  echo "$dir/bin"
  exit 0
fi
rm -rf "$dir"
# --system-site-packages: the venv's python3 stays a superset of the machine's for other tests.
if python3 -m venv --system-site-packages "$dir" >&2 &&
  timeout 300 "$dir/bin/pip" install -q --disable-pip-version-check "${modules[@]}" >&2 &&
  "$dir/bin/python3" -c "$check"; then
  add_onnxruntime
  add_keras
  echo "$dir/bin"
  exit 0
fi
echo "test_python: could not install ${modules[*]}; their interop tests will be skipped" >&2
rm -rf "$dir"
exit 1
