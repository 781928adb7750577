#!/usr/bin/env python3
"""Keras's side of tests/e2e/keras_weights.sh (Keras 3, any backend; the script sets jax).

The model is a Keras JSON (--keras FILE, read with model_from_json: the file Mirror trained), or
the Keras twin of a Mirror checkpoint's canonical spec (--checkpoint FILE: the same layers,
channels_last, wired the same way; softmax_folded ends in logits like Mirror's outputs).

usage: keras_twin.py MODEL predict WEIGHTS X.npy OUT.npy   Keras's outputs (x NCHW as Mirror's)
       keras_twin.py MODEL init OUT.weights.h5 SEED        fresh Keras weights (a Keras init)
       keras_twin.py MODEL step WEIGHTS X.npy Y.npy LR OUT.weights.h5
                                                           one SGD step on the whole batch
       keras_twin.py MODEL paths OUT.weights.h5            what save_weights writes
       keras_twin.py compare TOL NAME GOT.npy WANT.npy     max |got - want| / max |want|
       keras_twin.py compare-weights TOL NAME GOT.h5 WANT.h5   the same for every layer variable
       keras_twin.py data KIND PREFIX N SEED               training arrays (KIND: images28, rows28,
                                                           words, words-full, images, rows, images345,
                                                           unet, seq2seq, images12, mobilenet, seq86,
                                                           images32)
       keras_twin.py --jobs FILE                           one of the above per line, one process
MODEL is --keras FILE or --checkpoint FILE. Exit 1 when a job fails (each failure is printed)."""
import json
import os
import struct
import sys

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")
keras = L = None  # imported on first use: the data command runs without Keras


def import_keras():
    global keras, L
    if keras is None:
        import keras as k
        keras, L = k, k.layers


def tokens(rng, n, t, vocab, full):
    x = np.zeros((n, t), np.int32)
    for i in range(n):
        length = t if full or i == 0 else int(rng.integers(1, t + 1))
        x[i, :length] = rng.integers(1, vocab, length)
    return x


def data(kind, prefix, n, seed):
    """Training arrays PREFIX_x.npy (Mirror's layout: NCHW images) and PREFIX_y.npy (4 classes, or
    10 for the 28x28 images and rows the built-in models read)."""
    rng = np.random.default_rng(seed)
    shapes = {"images28": (1, 28, 28), "rows28": (28, 28), "images": (2, 12, 12), "rows": (12, 6),
              "images345": (3, 4, 5), "unet": (1, 16, 16), "seq2seq": (10, 4),
              "images12": (3, 12, 12), "mobilenet": (3, 16, 16), "seq86": (8, 6),
              "images8": (3, 8, 8), "images32": (3, 32, 32), "images75": (3, 75, 75)}
    targets = {"unet": 256, "seq2seq": 18}  # float targets: regression (mse)
    if kind in shapes:
        x = rng.normal(0, 1, (n,) + shapes[kind]).astype(np.float32)
    else:
        x = tokens(rng, n, 16, 40, kind == "words-full")
    np.save(prefix + "_x.npy", x)
    if kind in targets:
        np.save(prefix + "_y.npy", rng.normal(0, 1, (n, targets[kind])).astype(np.float32))
        return
    classes = {"images28": 10, "rows28": 10, "mobilenet": 5, "words": 5, "images32": 10,
               "images75": 10}.get(kind, 4)
    y = np.arange(n) % classes  # every class present: the data's class count is the model's
    np.save(prefix + "_y.npy", rng.permutation(y).astype(np.int64))


def checkpoint_spec(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        return json.loads(json.loads(f.read(size))["__metadata__"]["mirror.model"])


def channels_last(shape):
    return [shape[1], shape[2], shape[0]] if len(shape) == 3 else list(shape)


def rnn(l, backwards=False):
    cls = L.GRU if l["type"] == "gru" else L.LSTM
    kw = {"unit_forget_bias": l.get("unit_forget_bias", True)} if l["type"] == "lstm" else {}
    return cls(l["units"], return_sequences=l["return_sequences"], go_backwards=backwards, **kw)


def make_layer(l, mask_ids):
    t = l["type"]
    act = l.get("activation", "linear")
    if t == "conv2d":
        return L.Conv2D(l["filters"], l["kernel"], strides=l["strides"], padding=l["padding"],
                        activation=act, use_bias=l.get("use_bias", True))
    if t == "maxpool2d":
        return L.MaxPooling2D(l["pool"], strides=l["strides"], padding=l["padding"])
    if t == "average_pooling2d":
        return L.AveragePooling2D(l["pool"], strides=l["strides"], padding=l["padding"])
    if t == "global_average_pooling2d":
        return L.GlobalAveragePooling2D()
    if t == "zero_padding2d":
        return L.ZeroPadding2D([tuple(p) for p in l["padding"]])
    if t == "flatten":
        return L.Flatten()
    if t == "dense":
        return L.Dense(l["units"], activation=act)
    if t == "dropout":
        return L.Dropout(l["rate"])
    if t == "embedding":
        return L.Embedding(l["input_dim"], l["output_dim"], mask_zero=mask_ids)
    if t == "masking":
        return L.Masking(0.0)
    if t in ("gru", "lstm"):
        return rnn(l)
    if t == "bidirectional":
        return L.Bidirectional(rnn(l["layer"]), merge_mode=l["merge_mode"])
    if t == "conv1d":
        return L.Conv1D(l["filters"], l["kernel"], strides=l["strides"], padding=l["padding"],
                        dilation_rate=l["dilation_rate"], activation=act)
    if t in ("maxpool1d", "avgpool1d"):
        cls = L.MaxPooling1D if t == "maxpool1d" else L.AveragePooling1D
        return cls(l["pool"], strides=l["strides"], padding=l["padding"])
    if t == "global_maxpool1d":
        return L.GlobalMaxPooling1D()
    if t == "global_avgpool1d":
        return L.GlobalAveragePooling1D()
    if t == "activation":
        return L.Activation(act)
    if t == "batch_normalization":
        return L.BatchNormalization(momentum=l["momentum"], epsilon=l["epsilon"],
                                    center=l["center"], scale=l["scale"])
    if t == "layer_normalization":
        return L.LayerNormalization(epsilon=l["epsilon"], center=l["center"], scale=l["scale"])
    if t == "add":
        return L.Add()
    if t == "concatenate":
        return L.Concatenate()
    merges = {"multiply": L.Multiply, "subtract": L.Subtract, "average": L.Average,
              "maximum": L.Maximum, "minimum": L.Minimum}
    if t in merges:
        return merges[t]()
    if t == "relu":
        return L.ReLU(max_value=l["max_value"], negative_slope=l["negative_slope"],
                      threshold=l["threshold"])
    if t == "leaky_relu":
        return L.LeakyReLU(negative_slope=l["negative_slope"])
    if t == "elu":
        return L.ELU(alpha=l["alpha"])
    if t == "conv2d_transpose":
        return L.Conv2DTranspose(l["filters"], l["kernel"], strides=l["strides"],
                                 padding=l["padding"], activation=act, use_bias=l["use_bias"])
    if t in ("depthwise_conv2d", "separable_conv2d"):
        kw = dict(strides=l["strides"], padding=l["padding"], activation=act,
                  depth_multiplier=l["depth_multiplier"], use_bias=l["use_bias"])
        if t == "separable_conv2d":
            return L.SeparableConv2D(l["filters"], l["kernel"], **kw)
        return L.DepthwiseConv2D(l["kernel"], **kw)
    if t == "up_sampling2d":
        return L.UpSampling2D(tuple(l["size"]))
    if t == "cropping2d":
        return L.Cropping2D([tuple(c) for c in l["cropping"]])
    if t == "global_max_pooling2d":
        return L.GlobalMaxPooling2D()
    if t == "repeat_vector":
        return L.RepeatVector(l["n"])
    if t == "time_distributed":
        return L.TimeDistributed(make_layer(l["layer"], mask_ids))
    if t in ("spatial_dropout1d", "spatial_dropout2d"):
        return (L.SpatialDropout1D if t == "spatial_dropout1d" else L.SpatialDropout2D)(l["rate"])
    raise SystemExit("keras_twin.py: no Keras twin for layer type " + t)


def call_attention(l, srcs):
    """The attention layers' Keras call: [query, value(, key)] with use_causal_mask."""
    t = l["type"]
    if t == "multi_head_attention":
        layer = L.MultiHeadAttention(l["num_heads"], l["key_dim"], value_dim=l["value_dim"],
                                     dropout=l["dropout"], use_bias=l["use_bias"],
                                     output_shape=l.get("output_dim"))
        key = srcs[2] if len(srcs) > 2 else None
        return layer(srcs[0], srcs[1], key=key, use_causal_mask=l["causal"])
    cls = L.Attention if t == "attention" else L.AdditiveAttention
    return cls(use_scale=l["use_scale"], dropout=l["dropout"])(srcs, use_causal_mask=l["causal"])


def twin(spec):
    """The Keras model computing what the canonical Mirror spec computes (logits out)."""
    import_keras()
    layers = spec["layers"]
    ids = any(l["type"] == "embedding" for l in layers)
    shape = channels_last(spec["input_shape"])
    inp = keras.Input((None,) if ids else tuple(shape), dtype="int32" if ids else "float32")
    outputs = {"input": inp}
    prev = inp
    for i, l in enumerate(layers):
        if l["type"] == "masking" and ids:
            # Mirror's masking of token ids is the Embedding's mask_zero in Keras.
            if "name" in l:
                outputs[l["name"]] = prev
            continue
        srcs = [outputs[n] for n in l["inputs"]] if "inputs" in l else [prev]
        if l["type"] in ("multi_head_attention", "attention", "additive_attention"):
            prev = call_attention(l, srcs)
        else:
            prev = make_layer(l, mask_ids=ids)(srcs if len(srcs) > 1 else srcs[0])
        if "name" in l:
            outputs[l["name"]] = prev
    return keras.Model(inp, prev)


def load_model(kind, path):
    import_keras()
    if kind == "--keras":
        with open(path) as f:
            return keras.models.model_from_json(f.read())
    return twin(checkpoint_spec(path))


def keras_input(x):
    return np.transpose(x, (0, 2, 3, 1)) if x.ndim == 4 else x


def relative_error(got, want):
    return float(np.abs(got.astype(np.float64) - want).max()) / max(float(np.abs(want).max()), 1e-30)


def weights_of(path):
    import h5py
    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, o: out.__setitem__(n, np.array(o)) if hasattr(o, "shape") else None)
    return out


def open_names(path):
    """Each variable's owner name, from the "name" attribute Keras writes on each vars group."""
    import h5py
    out = {}
    with h5py.File(path) as f:
        def visit(n, o):
            if hasattr(o, "shape"):
                out[n] = str(f[n.rsplit("/", 1)[0]].attrs.get("name", ""))
        f.visititems(visit)
    return out


def run(args):
    """One job; returns False when a comparison fails."""
    cmd = args[0]
    if cmd == "data":  # data KIND PREFIX N SEED
        data(args[1], args[2], int(args[3]), int(args[4]))
        return True
    if cmd == "compare":  # compare TOL NAME GOT.npy WANT.npy
        tol, name, got, want = float(args[1]), args[2], np.load(args[3]), np.load(args[4])
        if got.shape != want.shape:
            print("FAIL %s: shapes %s and %s" % (name, got.shape, want.shape))
            return False
        err = relative_error(got, want)
        ok = err <= tol and bool(np.isfinite(got).all())
        print("%s %s: %d samples, max relative difference %.2e (tolerance %.0e)" %
              ("ok  " if ok else "FAIL", name, len(got), err, tol))
        return ok
    if cmd == "compare-weights":  # compare-weights TOL NAME GOT.h5 WANT.h5
        tol, name, got, want = float(args[1]), args[2], weights_of(args[3]), weights_of(args[4])
        want = {k: v for k, v in want.items() if k.startswith("layers/")}
        missing = sorted(set(want) - set(got))
        if missing:
            print("FAIL %s: %s lacks %s" % (name, args[3], missing))
            return False
        if name.endswith(":step"):
            # Keras trains an LSTM's one bias, Mirror the two of cuDNN and PyTorch (their sum is
            # Keras's bias): after a step the sum has moved twice as far. Left out here.
            lstm = [k for k in want if k.endswith("/vars/2") and
                    want[k].ndim == 1 and "lstm" in open_names(args[4]).get(k, "")]
            for k in lstm:
                del want[k]
            if lstm:
                print("     %s: LSTM biases left out of the step check: %s" % (name, lstm))
        # Relative to the variable's scale, or a thousandth of the model's (zero biases).
        scale = max(float(np.abs(v).max()) for v in want.values())
        errs = {k: float(np.abs(got[k].astype(np.float64) - v).max()) /
                max(float(np.abs(v).max()), 1e-3 * scale) for k, v in want.items()}
        worst = max(errs, key=errs.get)
        ok = errs[worst] <= tol
        print("%s %s: %d variables, max relative difference %.2e at %s (tolerance %.0e)" %
              ("ok  " if ok else "FAIL", name, len(errs), errs[worst], worst, tol))
        return ok
    model = load_model(args[0], args[1])
    cmd, rest = args[2], args[3:]
    if cmd == "paths":
        model.save_weights(rest[0])
    elif cmd == "predict":  # predict WEIGHTS X.npy OUT.npy
        model.load_weights(rest[0])
        x = keras_input(np.load(rest[1]))
        np.save(rest[2], np.asarray(model.predict(x, verbose=0), np.float32))
    elif cmd == "init":  # init OUT.weights.h5 SEED
        keras.utils.set_random_seed(int(rest[1]))
        load_model(args[0], args[1]).save_weights(rest[0])  # fresh weights from the seed
    elif cmd == "step":  # step WEIGHTS X.npy Y.npy LR OUT.weights.h5
        model.load_weights(rest[0])
        x, y = keras_input(np.load(rest[1])), np.load(rest[2])
        softmax_out = model.layers[-1].get_config().get("activation") == "softmax"
        loss = ("mse" if y.dtype.kind == "f" else
                keras.losses.SparseCategoricalCrossentropy(from_logits=not softmax_out))
        model.compile(optimizer=keras.optimizers.SGD(float(rest[3])), loss=loss)
        model.train_on_batch(x, y)
        model.save_weights(rest[4])
    else:
        raise SystemExit(__doc__)
    return True


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--jobs":
        with open(sys.argv[2]) as f:
            jobs = [line.split() for line in f if line.strip()]
    else:
        jobs = [sys.argv[1:]]
    failed = 0
    for job in jobs:
        try:
            failed += 0 if run(job) else 1
        except Exception as e:  # name the job and go on with the others
            print("FAIL %s: %s: %s" % (" ".join(job), type(e).__name__, str(e)[:600]))
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
