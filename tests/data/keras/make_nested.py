#!/usr/bin/env python3
"""Writes convnext_mini.keras.json, Keras's ConvNeXt in miniature (issue 44, "Keras's own models,
unchanged"), as to_json() gives it, for tests/nn_keras_nested_test.cpp and
tests/e2e/keras_nested.sh: run once with Keras 3 (KERAS_BACKEND=jax python3 make_nested.py); the
JSON is committed, and CI needs no Keras to parse it.

  a nested Sequential stem (Conv2D 2x2/2 -> LayerNormalization), a ConvNeXt block (a depthwise
  Conv2D(groups=C), LayerNormalization, Dense over the image's channels, GELU, Dense, LayerScale,
  Activation("linear"), ops.add residual), a nested Functional with a grouped Conv2D(groups=2) and
  a residual Add, a nested Sequential downsampling (LayerNormalization -> Conv2D 2x2/2), then
  GlobalAveragePooling2D, LayerNormalization and Dense(5, softmax) as ConvNeXt's head (5 classes:
  keras_twin.py's "mobilenet" data, 3x16x16).
LayerScale's init_values is 0.5 (ConvNeXt's 1e-6 would hide the block from the comparisons).
"""
import json
import os

import keras
from keras import layers as L
from keras.src.applications.convnext import LayerScale

here = os.path.dirname(os.path.abspath(__file__))


def convnext_mini():
    inp = keras.Input((16, 16, 3))
    stem = keras.Sequential([keras.Input((16, 16, 3)), L.Conv2D(8, 2, strides=2),
                             L.LayerNormalization(epsilon=1e-6)], name="stem")
    x = stem(inp)
    y = L.Conv2D(8, 3, padding="same", groups=8)(x)
    y = L.LayerNormalization(epsilon=1e-6)(y)
    y = L.Dense(16)(y)
    y = L.Activation("gelu")(y)
    y = L.Dense(8)(y)
    y = LayerScale(0.5, 8)(y)
    y = L.Activation("linear")(y)
    x = keras.ops.add(x, y)
    b_in = keras.Input((8, 8, 8))
    b = L.Conv2D(8, 3, padding="same", groups=2)(b_in)
    grouped = keras.Model(b_in, L.Add()([b_in, b]), name="grouped")
    x = grouped(x)
    down = keras.Sequential([keras.Input((8, 8, 8)), L.LayerNormalization(epsilon=1e-6),
                             L.Conv2D(16, 2, strides=2)], name="down")
    x = down(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.LayerNormalization(epsilon=1e-6)(x)
    out = L.Dense(5, activation="softmax")(x)
    return keras.Model(inp, out, name="convnext_mini")


model = convnext_mini()
with open(os.path.join(here, model.name + ".keras.json"), "w") as f:
    json.dump(json.loads(model.to_json()), f, indent=1)
    f.write("\n")
print(model.name, model.count_params())
