#!/usr/bin/env python3
"""Writes tests/data/keras/tutorials/*.json: the architectures of well-known Keras example models
(shrunk to train in seconds), saved with to_json() as a user would, for tests/e2e/keras_tutorials.sh,
which trains each unchanged with mirror-train, predicts and exports it. Run once with Keras 3
(KERAS_BACKEND=jax python3 make_tutorials.py); the JSON is committed and CI needs no Keras."""
import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
from keras import layers  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))

# Fashion-MNIST's pixel statistics on 0..255, as Normalization.adapt() would find them.
MEAN, VARIANCE = 72.94, 8103.7


def image_classification_from_scratch():
    """keras.io "Image classification from scratch": rescaling inside the model."""
    inp = keras.Input((28, 28, 1))
    x = layers.Rescaling(1.0 / 255)(inp)
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.25)(x)
    out = layers.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="image_classification_from_scratch")


def resizing_and_center_crop():
    """keras.io preprocessing guide: resize then crop inside the model."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Resizing(32, 32),
        layers.CenterCrop(26, 26),
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(16, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(10, activation="softmax"),
    ], name="resizing_and_center_crop")


def gru_behind_normalization():
    """keras.io time series: Normalization (adapted values stated) in front of a GRU."""
    return keras.Sequential([
        keras.Input((28, 28)),
        layers.Normalization(axis=None, mean=MEAN, variance=VARIANCE),
        layers.GRU(32),
        layers.Dense(10, activation="softmax"),
    ], name="gru_behind_normalization")


def timeseries_fcn():
    """keras.io "Timeseries classification from scratch" (a fully convolutional network)."""
    inp = keras.Input((28, 28))
    x = layers.Conv1D(16, 3, padding="same")(inp)
    x = layers.ReLU()(x)
    x = layers.Conv1D(16, 3, padding="same")(x)
    x = layers.ReLU()(x)
    x = layers.GlobalAveragePooling1D()(x)
    out = layers.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="timeseries_fcn")


def dense_per_step():
    """A feed-forward block applied to every step before a recurrent layer (no TimeDistributed)."""
    return keras.Sequential([
        keras.Input((28, 28)),
        layers.Dense(32, activation="relu"),
        layers.Dropout(0.1),
        layers.LSTM(32),
        layers.Dense(10),
    ], name="dense_per_step")


def imdb_bidirectional_lstm():
    """keras.io "Bidirectional LSTM on IMDB": a sigmoid head on labels 0/1."""
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(64, 16)(inp)
    x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(x)
    x = layers.Bidirectional(layers.LSTM(8))(x)
    out = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inp, out, name="imdb_bidirectional_lstm")


def text_classification_conv1d():
    """keras.io "Text classification from scratch": Conv1D and a sigmoid head. Its sequences come
    padded to one length (TextVectorization's output_sequence_length), stated here."""
    inp = keras.Input((20,), dtype="int64")
    x = layers.Embedding(64, 16)(inp)
    x = layers.Dropout(0.5)(x)
    x = layers.Conv1D(16, 3, padding="valid", activation="relu", strides=1)(x)
    x = layers.Conv1D(16, 3, padding="valid", activation="relu", strides=1)(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dense(16, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    out = layers.Dense(1, activation="sigmoid", name="predictions")(x)
    return keras.Model(inp, out, name="text_classification_conv1d")


def masked_bigru_lstm():
    """Issue 30's functional text model: mask_zero into a bidirectional GRU and an LSTM."""
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(64, 16, mask_zero=True)(inp)
    x = layers.Bidirectional(layers.GRU(16, return_sequences=True))(x)
    x = layers.LSTM(16)(x)
    out = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inp, out, name="masked_bigru_lstm")


def masked_lstm_max_pool():
    """An LSTM returning sequences over a mask into GlobalMaxPooling1D (which ignores the mask):
    past each length the LSTM repeats its last output (zero_output_for_mask false)."""
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(64, 16, mask_zero=True)(inp)
    x = layers.LSTM(16, return_sequences=True)(x)
    x = layers.GlobalMaxPooling1D()(x)
    out = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inp, out, name="masked_lstm_max_pool")


MODELS = [image_classification_from_scratch, resizing_and_center_crop, gru_behind_normalization,
          timeseries_fcn, dense_per_step, imdb_bidirectional_lstm, text_classification_conv1d,
          masked_bigru_lstm, masked_lstm_max_pool]

def flatten_ln():
    """docs/checkpoint.md's Flatten recipe, checked by tests/e2e/keras_interop.sh."""
    return keras.Sequential([
        keras.Input((6, 6, 2)), layers.Conv2D(3, 3, padding="same", activation="relu"),
        layers.Flatten(), layers.LayerNormalization(), layers.Dense(4),
    ], name="flatten_ln")


if __name__ == "__main__":
    out_dir = os.path.join(here, "tutorials")
    os.makedirs(out_dir, exist_ok=True)
    for make in MODELS:
        model = make()
        with open(os.path.join(out_dir, model.name + ".json"), "w") as f:
            json.dump(json.loads(model.to_json()), f, indent=1)
            f.write("\n")
        print(model.name, model.count_params())
    with open(os.path.join(here, "flatten_ln.json"), "w") as f:
        f.write(json.dumps(json.loads(flatten_ln().to_json()), indent=1) + "\n")
