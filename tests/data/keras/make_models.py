#!/usr/bin/env python3
"""Writes the Keras 3 functional models GRU/CNN users combine (issue "Keras, both ways"), as
to_json() gives them, for the Keras-layer tests (tests/e2e/keras_models.sh and the C++ suites):
run once with Keras 3 from PyPI (any backend: KERAS_BACKEND=jax python3 make_models.py); the
JSON is committed, and CI needs no Keras to parse them. Small sizes keep the tests quick.

  masked_bigru_lstm  Embedding(mask_zero) -> Bidirectional(GRU, sequences) -> LSTM -> Dense
  gru_mha            Embedding(mask_zero) -> GRU(sequences) -> MultiHeadAttention (self, with
                     dropout) + residual -> LayerNormalization -> GlobalAveragePooling1D -> Dense
  masked_lstm        Masking (float rows) -> LSTM -> Dense
  unet               a small U-Net: Conv2DTranspose, Cropping2D, UpSampling2D, skip Concatenates,
                     a per-pixel linear head flattened (regression)
  mobilenet_block    MobileNet-style: ReLU(6), DepthwiseConv2D, an inverted residual block,
                     SeparableConv2D, GlobalAveragePooling2D
  seq2seq_repeat     LSTM encoder -> RepeatVector -> LSTM decoder -> TimeDistributed(Dense),
                     flattened (regression)
  image_layers       the other image layers: GlobalMaxPooling2D, SpatialDropout2D, LeakyReLU, ELU,
                     ReLU(negative_slope, threshold), Reshape, Permute, Multiply, Subtract,
                     Average, Maximum, Minimum
  sequence_layers    the other sequence layers: SpatialDropout1D, Attention, AdditiveAttention,
                     MultiHeadAttention with use_causal_mask, Reshape
"""
import json
import os

import keras
from keras import layers as L

here = os.path.dirname(os.path.abspath(__file__))


def masked_bigru_lstm():
    x = inp = keras.Input((None,), dtype="int32")
    x = L.Embedding(60, 16, mask_zero=True)(x)
    x = L.Bidirectional(L.GRU(12, return_sequences=True))(x)
    x = L.LSTM(12)(x)
    out = L.Dense(5, activation="softmax")(x)
    return keras.Model(inp, out, name="masked_bigru_lstm")


def gru_mha():
    x = inp = keras.Input((None,), dtype="int32")
    x = L.Embedding(60, 16, mask_zero=True)(x)
    x = L.GRU(16, return_sequences=True)(x)
    a = L.MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1)(x, x)
    x = L.LayerNormalization()(L.Add()([x, a]))
    x = L.GlobalAveragePooling1D()(x)
    out = L.Dense(5, activation="softmax")(x)
    return keras.Model(inp, out, name="gru_mha")


def masked_lstm():
    x = inp = keras.Input((None, 6))
    x = L.Masking(0.0)(x)
    x = L.LSTM(12)(x)
    out = L.Dense(3, activation="softmax")(x)
    return keras.Model(inp, out, name="masked_lstm")


def unet():
    x = inp = keras.Input((16, 16, 1))
    c1 = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    c2 = L.Conv2D(16, 3, padding="same", activation="relu")(L.MaxPooling2D()(c1))
    b = L.Conv2D(16, 3, activation="relu")(L.MaxPooling2D()(c2))  # 4x4 -> 2x2 (valid)
    u2 = L.Conv2DTranspose(16, 3, strides=2)(b)  # 2x2 -> 5x5 (valid)
    u2 = L.UpSampling2D()(L.Cropping2D(((0, 1), (0, 1)))(u2))  # 4x4 -> 8x8
    d2 = L.Conv2D(16, 3, padding="same", activation="relu")(L.Concatenate()([u2, c2]))
    u1 = L.Conv2DTranspose(8, 2, strides=2, padding="same", activation="relu")(d2)  # 16x16
    d1 = L.Conv2D(8, 3, padding="same", activation="relu")(L.Concatenate()([u1, c1]))
    out = L.Flatten()(L.Conv2D(1, 1)(d1))
    return keras.Model(inp, out, name="unet")


def mobilenet_block():
    x = inp = keras.Input((16, 16, 3))
    x = L.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x)
    x = L.ReLU(6.0)(L.BatchNormalization()(x))
    x = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    x = L.ReLU(max_value=6.0)(L.BatchNormalization()(x))
    x = s = L.BatchNormalization()(L.Conv2D(24, 1, use_bias=False)(x))
    y = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(48, 1, use_bias=False)(x)))
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=1, use_bias=False)(y)
    y = L.ReLU(6.0)(L.BatchNormalization()(y))
    y = L.BatchNormalization()(L.Conv2D(24, 1, use_bias=False)(y))
    x = L.Add()([s, y])
    x = L.SeparableConv2D(32, 3, padding="same", depth_multiplier=2)(x)
    x = L.ReLU(6.0)(L.BatchNormalization()(x))
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dropout(0.2)(x)
    out = L.Dense(5, activation="softmax")(x)
    return keras.Model(inp, out, name="mobilenet_block")


def seq2seq_repeat():
    x = inp = keras.Input((10, 4))
    x = L.LSTM(16)(x)
    x = L.RepeatVector(6)(x)
    x = L.LSTM(16, return_sequences=True)(x)
    x = L.TimeDistributed(L.Dense(3))(x)
    out = L.Flatten()(x)
    return keras.Model(inp, out, name="seq2seq_repeat")


def image_layers():
    x = inp = keras.Input((12, 12, 3))
    a = L.Conv2D(8, 3, padding="same")(x)
    a = L.LeakyReLU(negative_slope=0.2)(a)
    b = L.Conv2D(8, 3, padding="same")(x)
    b = L.ELU(alpha=0.5)(b)
    c = L.Conv2D(8, 1)(x)
    c = L.ReLU(negative_slope=0.1, threshold=0.2, max_value=2.0)(c)
    m = L.Multiply()([a, b])
    s = L.Subtract()([a, c])
    v = L.Average()([a, b, c])
    hi = L.Maximum()([m, s])
    lo = L.Minimum()([s, v])
    x = L.Concatenate()([hi, lo])
    x = L.SpatialDropout2D(0.2)(x)
    x = L.Permute((2, 1, 3))(x)  # swap height and width
    g = L.GlobalMaxPooling2D()(x)
    r = L.Reshape((12, 12 * 16))(x)  # rows of the image as a sequence
    r = L.Conv1D(4, 3, strides=2)(r)
    r = L.Flatten()(r)
    x = L.Concatenate()([g, r])
    out = L.Dense(4, activation="softmax")(x)
    return keras.Model(inp, out, name="image_layers")


def sequence_layers():
    x = inp = keras.Input((8, 6))
    x = L.SpatialDropout1D(0.2)(L.Conv1D(8, 3, padding="same")(x))
    q = L.TimeDistributed(L.Dense(8))(x)
    att = L.Attention(use_scale=True, dropout=0.1)([q, x])
    add = L.AdditiveAttention()([q, x, x])
    # value_dim = key_dim: Keras 3.15's JAX backend refuses others in its fused attention.
    mha = L.MultiHeadAttention(num_heads=2, key_dim=4, output_shape=8)(q, x, use_causal_mask=True)
    x = L.Add()([att, add, mha])
    x = L.Reshape((8 * 8,))(x)
    out = L.Dense(4, activation="softmax")(x)
    return keras.Model(inp, out, name="sequence_layers")


for make in (masked_bigru_lstm, gru_mha, masked_lstm, unet, mobilenet_block, seq2seq_repeat,
             image_layers, sequence_layers):
    model = make()
    with open(os.path.join(here, model.name + ".keras.json"), "w") as f:
        json.dump(json.loads(model.to_json()), f, indent=1)
        f.write("\n")
    print(model.name, model.count_params(), keras.__version__)
