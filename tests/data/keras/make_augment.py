"""Keras's augmentation layers with their draws fixed, as fixtures for nn_random_augment_test.

Each case is a layer config whose random draw is pinned (equal factor bounds, or RandomFlip's
transformation given) and Keras's training output on the one input image [1, H, W, C] (NHWC,
flattened); Mirror's layer
must give the same pixels (its draws, by sample id, are pinned the same way). Usage:
  KERAS_BACKEND=jax python3 make_augment.py OUT.json
  KERAS_BACKEND=jax python3 make_augment.py --model OUT.keras.json
The second writes keras.io's "image classification from scratch" model (its data_augmentation
Sequential of RandomFlip("horizontal") and RandomRotation(0.1) inside, the Xception-like
make_model with its widths cut to 8/16/32 for a 32x32 RGB input and 3 classes) as to_json()
gives it: tests/data/keras/augment_cnn.keras.json, which tests/e2e/keras_augment.sh trains.
(tests/data/keras/reference/augment.json is committed; tests/e2e/keras_augment.sh writes it anew
with the Keras it finds and runs the test on it).
"""
import json
import sys

import keras
import numpy as np
from keras import layers


def make_model(input_shape=(32, 32, 3), num_classes=3):
    """keras.io/examples/vision/image_classification_from_scratch's make_model, narrower."""
    data_augmentation = keras.Sequential(
        [layers.RandomFlip("horizontal"), layers.RandomRotation(0.1)], name="data_augmentation")
    inputs = keras.Input(shape=input_shape)
    x = data_augmentation(inputs)
    x = layers.Rescaling(1.0 / 255)(x)
    x = layers.Conv2D(8, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    previous_block_activation = x
    for size in [16, 32]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = layers.Conv2D(size, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])
        previous_block_activation = x
    x = layers.SeparableConv2D(32, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.25)(x)
    outputs = layers.Dense(num_classes, activation=None)(x)
    return keras.Model(inputs, outputs)


if sys.argv[1] == "--model":
    with open(sys.argv[2], "w") as f:
        f.write(make_model().to_json(indent=1))
    sys.exit(0)

rng = np.random.default_rng(5)
x = rng.uniform(0.0, 1.0, size=(1, 5, 7, 2)).astype("float32")
cases = []


def case(cls, config, out):
    cases.append({"class_name": cls, "config": config,
                  "output": [float(f"{v:.8g}") for v in np.asarray(out).ravel()]})


def run(cls, config):
    layer = getattr(keras.layers, cls)(**config)
    case(cls, layer.get_config(), layer(x, training=True))


for mode in ("horizontal", "vertical", "horizontal_and_vertical"):
    layer = keras.layers.RandomFlip(mode)
    forced = {"flips": np.ones((1, 1, 1, 1), dtype=bool), "input_shape": x.shape}
    case("RandomFlip", layer.get_config(), layer.transform_images(x, forced, training=True))
for fill in ("reflect", "wrap", "constant", "nearest"):
    for interpolation in ("bilinear", "nearest"):
        common = {"fill_mode": fill, "interpolation": interpolation, "fill_value": 0.25}
        run("RandomTranslation", {"height_factor": (0.1, 0.1), "width_factor": (-0.2, -0.2),
                                  **common})
        run("RandomZoom", {"height_factor": (-0.3, -0.3), "width_factor": (0.2, 0.2), **common})
        run("RandomRotation", {"factor": (0.07, 0.07), **common})
# RandomCrop: a window at a given offset (Keras draws one per batch; the test finds a sample id
# for which Mirror draws this one), and, for an image not larger than the window in both
# dimensions, Keras's training path: the centred box of the window's aspect ratio, resized.
crop = keras.layers.RandomCrop(3, 4)
cases.append({"class_name": "RandomCrop", "config": crop.get_config(), "search": True,
              "output": [float(f"{v:.8g}") for v in
                         np.asarray(crop.transform_images(x, (1, 2), training=True)).ravel()]})
run("RandomCrop", {"height": 5, "width": 3})
run("RandomZoom", {"height_factor": (0.4, 0.4), "fill_mode": "constant"})
run("RandomRotation", {"factor": (-0.3, -0.3), "fill_mode": "constant"})
run("RandomContrast", {"factor": (-0.6, 0.6), "value_range": (0.1, 0.9)})
run("RandomBrightness", {"factor": (0.2, 0.2), "value_range": (0, 1)})
run("RandomBrightness", {"factor": (-0.35, -0.35), "value_range": (0, 2)})
json.dump({"keras": keras.__version__, "backend": keras.backend.backend(),
           "input": [float(v) for v in x.ravel()], "shape": list(x.shape), "cases": cases},
          open(sys.argv[1], "w"))
print(len(cases), "cases")
