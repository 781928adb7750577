"""Writes the dense-prediction fixtures (Note [Dense labels]) with Keras's own to_json():
  dense_tagger.keras.json        Embedding(mask_zero) -> Bidirectional(LSTM(return_sequences))
                                 -> TimeDistributed(Dense(4, softmax)), 6 steps of ids < 12
  dense_autoencoder.keras.json   [8, 8, 2] -> conv, pool, conv, upsample -> Conv2D(2, sigmoid)
  dense_segmentation.keras.json  [8, 8, 2] -> conv -> Conv2D(3, 1, softmax): 3 classes a pixel
Run: KERAS_BACKEND=jax python3 make_dense.py (in tests/data/keras)."""
import json

import keras
from keras import layers

T, V, K = 6, 12, 4


def save(model, name):
    with open(name, "w") as f:
        f.write(json.dumps(json.loads(model.to_json()), indent=1) + "\n")


save(keras.Sequential([
    keras.Input((T,), dtype="int32"),
    layers.Embedding(V, 8, mask_zero=True),
    layers.Bidirectional(layers.LSTM(5, return_sequences=True)),
    layers.TimeDistributed(layers.Dense(K, activation="softmax")),
], name="tagger"), "dense_tagger.keras.json")
save(keras.Sequential([
    keras.Input((8, 8, 2)),
    layers.Conv2D(4, 3, padding="same", activation="relu"),
    layers.MaxPooling2D(2),
    layers.Conv2D(4, 3, padding="same", activation="relu"),
    layers.UpSampling2D(2),
    layers.Conv2D(2, 3, padding="same", activation="sigmoid"),
], name="autoencoder"), "dense_autoencoder.keras.json")
save(keras.Sequential([
    keras.Input((8, 8, 2)),
    layers.Conv2D(6, 3, padding="same", activation="relu"),
    layers.Conv2D(3, 1, padding="same", activation="softmax"),
], name="segmentation"), "dense_segmentation.keras.json")
