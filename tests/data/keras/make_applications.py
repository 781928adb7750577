#!/usr/bin/env python3
"""Writes Keras's own applications as to_json() gives them, unchanged (issue "Keras's own models,
unchanged"), for tests/nn_keras_apps_test.cpp: run once with Keras 3 from PyPI
(KERAS_BACKEND=jax python3 make_applications.py); the JSON is committed, so the C++ suites need
no Keras. weights=None, 32x32 RGB inputs (the smallest these applications take), 10 classes.

  efficientnet_b0     keras.applications.EfficientNetB0: VarianceScaling initializers, silu,
                      squeeze-and-excitation (GlobalAveragePooling2D, Reshape, Multiply with a
                      [1, 1, C] gate), Dropout(noise_shape=[None, 1, 1, 1]), Rescaling and an
                      (unadapted) Normalization(axis=[3])
  mobilenet_v3_small  keras.applications.MobileNetV3Small: hard_silu, GlobalAveragePooling2D
                      (keepdims=True), x + 3.0 and x * (1 / 6) op nodes, ReLU(6), Multiply with a
                      [1, 1, C] gate

The e2e test tests/e2e/keras_apps.sh writes the same models itself and compares them with Keras.
"""
import json
import os

import keras

here = os.path.dirname(os.path.abspath(__file__))

for name, make in (("efficientnet_b0", keras.applications.EfficientNetB0),
                   ("mobilenet_v3_small", keras.applications.MobileNetV3Small)):
    model = make(weights=None, input_shape=(32, 32, 3), classes=10)
    with open(os.path.join(here, name + ".keras.json"), "w") as f:
        json.dump(json.loads(model.to_json()), f, separators=(",", ":"))
        f.write("\n")
    trainable = sum(int(w.numpy().size) for w in model.trainable_weights)
    print(name, "trainable parameters", trainable, "keras", keras.__version__)
