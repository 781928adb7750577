#!/usr/bin/env python3
"""Writes the Keras functional fixtures of tests/nn_keras_functional_test.cpp: run once with
Keras 3 (any backend: KERAS_BACKEND=jax python3 make_functional.py), the JSON is committed, and
CI never needs Keras. Each model has a Mirror-format twin (*.mirror.json, hand-written) that must
build the same graph and the same initial weights."""
import json
import os

import keras
from keras import layers

here = os.path.dirname(os.path.abspath(__file__))


def residual():
    x = inp = keras.Input((28, 28, 1))
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    x = a = layers.Activation("relu")(x)
    y = layers.Conv2D(16, 3, padding="same", use_bias=False)(x)
    y = layers.BatchNormalization()(y)
    x = layers.Add()([y, a])
    x = layers.ReLU()(x)
    s = layers.Conv2D(32, 1, strides=2, use_bias=False)(x)
    s = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(s)
    y = layers.ZeroPadding2D(((0, 1), (0, 1)))(x)
    y = layers.Conv2D(32, 3, strides=2, use_bias=False)(y)
    y = layers.BatchNormalization()(y)
    x = layers.Add()([s, y])
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(10)(x)
    return keras.Model(inp, out, name="residual")


def branches():
    x = inp = keras.Input((28, 28, 1))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    a = layers.Conv2D(8, 1, activation="relu")(x)
    b = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    c = layers.AveragePooling2D(3, strides=1, padding="same")(x)
    x = layers.Concatenate()([a, b, c])
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(32)(x)
    x = layers.LayerNormalization()(x)
    x = layers.Activation("gelu")(x)
    out = layers.Dense(10)(x)
    return keras.Model(inp, out, name="branches")


for make in (residual, branches):
    model = make()
    with open(os.path.join(here, model.name + ".keras.json"), "w") as f:
        json.dump(json.loads(model.to_json()), f, indent=1)
        f.write("\n")
    print(model.name, model.count_params())
