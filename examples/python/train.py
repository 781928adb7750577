"""Trains a small classifier on NumPy arrays with Mirror, one replica per rank:

    launch/mirrorrun -np 2 python3 examples/python/train.py [OUTDIR]

Every rank runs this whole script with the same arrays; each trains on its shard of every
global batch, and rank 0 prints progress and writes the checkpoints.
"""
import sys

import numpy as np

import mirror

out = sys.argv[1] if len(sys.argv) > 1 else "mirror-python-demo"


def blobs(rng, n):
    """Three classes of 8-feature points, class c shifted along feature c."""
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.7, (n, 8)).astype(np.float32) + 2 * np.eye(3, 8, dtype=np.float32)[y]
    return x, y


rng = np.random.default_rng(0)  # the same seed on every rank: the same arrays
x, y = blobs(rng, 3000)
x_test, y_test = blobs(rng, 600)

# A Mirror model spec (a Keras model object works the same: mirror.fit reads its to_json()).
model = {"name": "mlp",
         "layers": [{"type": "dense", "units": 32, "activation": "relu"}, {"type": "dense"}]}


class GoodEnough:
    """Called on every rank with the same logs; returning True stops every rank."""

    def on_epoch_end(self, epoch, logs):
        if mirror.rank() == 0:
            print(f"callback: epoch {epoch + 1} val_accuracy {logs['val_accuracy']:.4f}")
        return logs["val_accuracy"] >= 0.995


history = mirror.fit(model, x, y, epochs=5, batch_size=64, validation_data=(x_test, y_test),
                     optimizer="adam", lr=0.01, devices="cpu", checkpoint_dir=f"{out}/ckpt",
                     overwrite_checkpoints=True, callbacks=[GoodEnough()])

if mirror.rank() == 0:
    print("history:", {name: [round(v, 4) for v in values]
                       for name, values in history.history.items()})
    trained = mirror.load(f"{out}/ckpt")  # the newest checkpoint: weights as NumPy arrays
    print("weights:", {name: w.shape for name, w in trained.weights.items()})
    probabilities = mirror.predict(trained, x_test[:8], output_kind="probabilities")
    print("predicted:", probabilities.argmax(1), "true:", y_test[:8])
    print("weights fingerprint:", history.summary["weights_fingerprint"])
