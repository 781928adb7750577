#!/usr/bin/env python3
"""Writes the Keras reference fixtures of tests/keras_reference_test.cpp (reference/*.json): for
each construct, a small Keras 3 model's to_json(), its weights, a batch (padded sequences where
masks matter), the model's outputs and its weights after one SGD step on that batch. Run once
with Keras 3 (KERAS_BACKEND=jax python3 make_reference.py; scripts/test_python.sh installs
Keras and JAX in build/test-python); the JSON is committed and the unit test needs no Keras.
tests/e2e/keras_interop.sh re-runs it with the installed Keras and compares."""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
LR = 0.5  # large, so that one step moves every weight visibly


def padded_ids(rng, n, t, vocab, lengths):
    x = np.zeros((n, t), np.int32)
    for i, length in enumerate(lengths):
        x[i, :length] = rng.integers(1, vocab, length)
    return x


def padded_rows(rng, n, t, f, lengths):
    x = np.zeros((n, t, f), np.float32)
    for i, length in enumerate(lengths):
        x[i, :length] = rng.normal(0, 1, (length, f))
    return x


# ---- one model per construct: (name, model, x, y, loss)


def sigmoid_head(rng):
    inp = keras.Input((6,))
    x = layers.Dense(5, activation="relu")(inp)
    out = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inp, out, name="sigmoid_head"), rng.normal(0, 1, (8, 6)), \
        rng.integers(0, 2, 8), "binary"


def sigmoid_activation(rng):
    model = keras.Sequential([keras.Input((6,)), layers.Dense(1), layers.Activation("sigmoid")],
                             name="sigmoid_activation")
    return model, rng.normal(0, 1, (8, 6)), rng.integers(0, 2, 8), "binary"


def dense_per_step(rng):
    inp = keras.Input((7, 4))
    x = layers.GRU(6, return_sequences=True)(inp)
    x = layers.Dense(5, activation="relu")(x)
    x = layers.Activation("tanh")(x)
    x = layers.GlobalAveragePooling1D()(x)
    out = layers.Dense(3)(x)
    return keras.Model(inp, out, name="dense_per_step"), rng.normal(0, 1, (5, 7, 4)), \
        rng.integers(0, 3, 5), "classes"


def rescaling_normalization(rng):
    model = keras.Sequential([
        keras.Input((8, 8, 2)),
        layers.Rescaling(1 / 255.0, offset=-0.25),
        layers.Normalization(mean=[0.2, -0.1], variance=[0.04, 0.5]),
        layers.Conv2D(3, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Normalization(axis=None, mean=0.1, variance=2.0, invert=True),
        layers.Dense(4),
    ], name="rescaling_normalization")
    return model, rng.integers(0, 256, (4, 8, 8, 2)).astype(np.float32), rng.integers(0, 4, 4), \
        "classes"


def resizing(rng, interpolation, crop_to_aspect_ratio, size, name):
    model = keras.Sequential([
        keras.Input((10, 12, 2)),
        layers.Resizing(size[0], size[1], interpolation=interpolation,
                        crop_to_aspect_ratio=crop_to_aspect_ratio),
        layers.Conv2D(3, 3, activation="tanh"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(3),
    ], name=name)
    return model, rng.normal(0, 1, (3, 10, 12, 2)), rng.integers(0, 3, 3), "classes"


def center_crop(rng, size, name):
    model = keras.Sequential([
        keras.Input((10, 12, 2)),
        layers.CenterCrop(size[0], size[1]),
        layers.Conv2D(3, 3, activation="tanh"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(3),
    ], name=name)
    return model, rng.normal(0, 1, (3, 10, 12, 2)), rng.integers(0, 3, 3), "classes"


LENGTHS = [9, 3, 6, 1, 9, 5]


def masked_bigru_lstm(rng):
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(30, 6, mask_zero=True)(inp)
    x = layers.Bidirectional(layers.GRU(5, return_sequences=True))(x)
    x = layers.LSTM(4)(x)
    out = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inp, out, name="masked_bigru_lstm"), padded_ids(rng, 6, 9, 30, LENGTHS), \
        rng.integers(0, 2, 6), "binary"


def masking_rows(rng):
    inp = keras.Input((9, 3))
    x = layers.Masking()(inp)
    x = layers.LSTM(5, return_sequences=True)(x)
    x = layers.Dense(4)(x)
    x = layers.GlobalAveragePooling1D()(x)
    out = layers.Dense(3)(x)
    return keras.Model(inp, out, name="masking_rows"), padded_rows(rng, 6, 9, 3, LENGTHS), \
        rng.integers(0, 3, 6), "classes"


def conv1d_unmasked(rng):
    model = keras.Sequential([
        keras.Input((9,), dtype="int32"),
        layers.Embedding(30, 6),
        layers.Conv1D(5, 3, padding="same", activation="relu"),
        layers.GlobalMaxPooling1D(),
        layers.Dense(3),
    ], name="conv1d_unmasked")
    return model, padded_ids(rng, 6, 9, 30, LENGTHS), rng.integers(0, 3, 6), "classes"


def conv1d_after_mask(rng):
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(30, 6, mask_zero=True)(inp)
    x = layers.Conv1D(5, 3, padding="same", activation="relu")(x)  # ends the mask
    x = layers.GlobalAveragePooling1D()(x)
    out = layers.Dense(3)(x)
    return keras.Model(inp, out, name="conv1d_after_mask"), padded_ids(rng, 6, 9, 30, LENGTHS), \
        rng.integers(0, 3, 6), "classes"


def merged_masks(rng):
    inp = keras.Input((None,), dtype="int32")
    a = layers.Embedding(30, 6, mask_zero=True)(inp)
    b = layers.Embedding(30, 6, mask_zero=True)(inp)
    x = layers.Add()([a, b])
    x = layers.GRU(4, return_sequences=True)(x)
    y = layers.Dense(4)(a)
    x = layers.Concatenate()([x, y])
    x = layers.GRU(5)(x)
    out = layers.Dense(3)(x)
    return keras.Model(inp, out, name="merged_masks"), padded_ids(rng, 6, 9, 30, LENGTHS), \
        rng.integers(0, 3, 6), "classes"


def carried_outputs(rng):
    """A standalone GRU returning sequences over a mask (zero_output_for_mask false: its last
    output repeats past each length) into layers that end the mask."""
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(30, 6, mask_zero=True)(inp)
    x = layers.GRU(5, return_sequences=True)(x)
    x = layers.Conv1D(4, 2, activation="tanh")(x)
    x = layers.GlobalMaxPooling1D()(x)
    out = layers.Dense(3)(x)
    return keras.Model(inp, out, name="carried_outputs"), padded_ids(rng, 6, 9, 30, LENGTHS), \
        rng.integers(0, 3, 6), "classes"


CASES = [
    sigmoid_head, sigmoid_activation, dense_per_step, rescaling_normalization,
    lambda r: resizing(r, "bilinear", False, (16, 15), "resizing_bilinear_up"),
    lambda r: resizing(r, "bilinear", False, (7, 5), "resizing_bilinear_down"),
    lambda r: resizing(r, "nearest", False, (13, 7), "resizing_nearest"),
    lambda r: resizing(r, "bilinear", True, (9, 9), "resizing_crop_to_aspect"),
    lambda r: center_crop(r, (6, 8), "center_crop"),
    lambda r: center_crop(r, (11, 14), "center_crop_upsize"),
    masked_bigru_lstm, masking_rows, conv1d_unmasked, conv1d_after_mask, merged_masks,
    carried_outputs,
]


def listed(a):
    return np.asarray(a, np.float64).tolist()


def reference(make, seed):
    rng = np.random.default_rng(seed)
    keras.utils.set_random_seed(seed)
    model, x, y, kind = make(rng)
    x = np.asarray(x, np.int32 if "int" in str(model.inputs[0].dtype) else np.float32)
    weights = [[listed(w) for w in layer.get_weights()] for layer in model.layers
               if layer.get_weights()]
    classes = [layer.name for layer in model.layers if layer.get_weights()]
    outputs = model(x, training=False)
    loss = keras.losses.BinaryCrossentropy() if kind == "binary" else \
        keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    target = y.reshape(-1, 1).astype(np.float32) if kind == "binary" else y
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=LR), loss=loss)
    loss_value = model.train_on_batch(x, target)
    after = [[listed(w) for w in layer.get_weights()] for layer in model.layers
             if layer.get_weights()]
    return {
        "name": model.name, "keras_version": keras.__version__,
        "backend": keras.backend.backend(), "model": json.loads(model.to_json()),
        "weight_layers": classes, "weights": weights, "x": np.asarray(x).tolist(),
        "x_dtype": "int32" if x.dtype == np.int32 else "float32", "y": np.asarray(y).tolist(),
        "loss": kind, "lr": LR, "outputs": listed(outputs), "loss_value": float(loss_value),
        "after": after,
    }


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for seed, make in enumerate(CASES):
        ref = reference(make, seed + 1)
        with open(os.path.join(out_dir, ref["name"] + ".json"), "w") as f:
            json.dump(ref, f, separators=(",", ":"))
            f.write("\n")
        print(ref["name"], "loss", ref["loss_value"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "reference"))
