#!/usr/bin/env python3
"""keras_flatten_weights.py CHECKPOINT X.npy MIRROR_Y.npy: the weights of a Mirror checkpoint of
tests/data/keras/flatten_ln.json (Conv2D -> Flatten -> LayerNormalization -> Dense) put into the
same Keras model with docs/checkpoint.md's recipe (HWIO conv kernel; flatten_to_keras for the
LayerNormalization and the Dense) give mirror-predict's outputs within 1e-5; the Dense kernel
permuted alone (the page's former recipe) does not. Needs keras, safetensors, numpy."""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(root, "tests", "data", "keras"))
from flatten_to_keras import flatten_to_keras  # noqa: E402

ckpt, x_path, y_path = sys.argv[1:4]
if os.path.isdir(ckpt):
    ckpt = sorted(p for p in (os.path.join(ckpt, f) for f in os.listdir(ckpt))
                  if p.endswith(".safetensors"))[-1]
w = load_file(ckpt)
spec = json.load(open(os.path.join(root, "tests", "data", "keras", "flatten_ln.json")))
model = keras.models.model_from_json(json.dumps(spec))
x = np.load(x_path)  # NCHW, as mirror-predict read it
want = np.load(y_path)
c, h, wd = 3, 6, 6  # the conv's output, flattened


def keras_outputs(permute_norm):
    gamma, beta, kernel = flatten_to_keras(
        [w["layer_normalization_1/gamma"], w["layer_normalization_1/beta"], w["dense_1/kernel"]],
        c, h, wd)
    if not permute_norm:
        gamma, beta = w["layer_normalization_1/gamma"], w["layer_normalization_1/beta"]
    conv, norm, dense = [l for l in model.layers if l.get_weights()]
    conv.set_weights([w["conv2d_1/kernel"].transpose(2, 3, 1, 0), w["conv2d_1/bias"]])
    norm.set_weights([gamma, beta])
    dense.set_weights([kernel, w["dense_1/bias"]])
    return np.asarray(model(x.transpose(0, 2, 3, 1), training=False))


err = np.abs(keras_outputs(True) - want).max()
old = np.abs(keras_outputs(False) - want).max()
print("recipe: max |keras - mirror| %.2e; the Dense permuted alone: %.2e" % (err, old))
assert err <= 1e-5, err
assert old > 1e-3, old  # the test would catch the former recipe
