"""Trained models: mirror.load (a checkpoint's weights and spec as NumPy arrays), mirror.predict
(mirror-predict's engine on NumPy samples) and mirror.set_keras_weights."""

import json
import os
import tempfile

from . import _mirror
from ._errors import DataError


class Model:
    """A trained model: ``spec``, the bound model spec (a dict, what a checkpoint stores as
    'mirror.model'), and ``weights``, the parameters and BatchNorm moving statistics as NumPy
    arrays by the checkpoint's tensor names (``dense_1/kernel``, ...; docs/checkpoint.md).
    Made by :func:`load` and by :func:`fit` (``history.model``)."""

    def __init__(self, spec, weights, step=None, path=None):
        self.spec = spec
        self.weights = weights
        self.step = step
        self.path = path

    def predict(self, x, **options):
        """The same as ``mirror.predict(self, x, ...)``."""
        return predict(self, x, **options)

    def __repr__(self):
        where = f" from {self.path}" if self.path else ""
        return (f"Model('{self.spec.get('name', 'model')}', {len(self.weights)} tensors, "
                f"step {self.step}{where})")


def load(checkpoint):
    """The newest valid checkpoint of a folder (or one ``.safetensors`` file) as a
    :class:`Model`: weights (no optimizer state) and the bound spec."""
    result = _mirror.load(os.fsdecode(checkpoint))
    return Model(json.loads(result["spec"]), result["weights"], step=result["step"],
                 path=result["path"])


def readable_array(value, name):
    """``value`` as a NumPy array the library can borrow, or DataError naming ``name``: an array
    of Python objects (ragged rows) or one stored in the other byte order cannot be read."""
    import numpy

    a = value if isinstance(value, numpy.ndarray) else numpy.asarray(value)
    if a.dtype.hasobject:
        raise DataError(f"{name}: a NumPy array of Python objects (dtype object, e.g. rows of "
                        "different lengths) is not read by Mirror; give one numeric array, "
                        "padded to one shape")
    if not a.dtype.isnative:
        native = a.dtype.newbyteorder("=")
        raise DataError(f"{name}: NumPy dtype '{a.dtype.str}' is stored in the other byte order, "
                        f"which Mirror does not read; convert it with .astype('{native.str}')")
    return a


def predict(model, x, *, batch_size=256, output_kind="logits", input_shape=None):
    """The model's outputs on ``x`` ([N, ...] as in training: floats, uint8 scaled by 1/255, or
    int token ids), as a float32 array [N, outputs], in inference mode (no dropout, BatchNorm's
    moving statistics), computed as ``mirror-predict`` computes them.

    model: a :class:`Model` (``history.model``, :func:`load`), a :class:`History`, or a
        checkpoint folder or file.
    output_kind: ``"logits"`` or ``"probabilities"`` (softmax over each row; the sigmoid of
        each output for a one-output or sigmoid head).
    input_shape: reshape each sample first, like mirror-train's ``input_shape``.
    """
    x = readable_array(x, "x")
    shape = [int(d) for d in input_shape] if input_shape is not None else []
    model = getattr(model, "model", model)  # a History
    if isinstance(model, Model):
        return _mirror.predict(None, json.dumps(model.spec), model.weights, x, batch_size,
                               output_kind, shape)
    if isinstance(model, (str, bytes, os.PathLike)):
        return _mirror.predict(os.fsdecode(model), None, {}, x, batch_size, output_kind, shape)
    raise TypeError("model must be a mirror.Model, a History or a checkpoint path, got "
                    f"{type(model).__name__}")


def set_keras_weights(keras_model, model):
    """Puts trained weights into a Keras model built like the one trained (the model object
    given to :func:`fit`, or ``keras.models.model_from_json`` of its ``to_json()``), so that
    ``keras_model.predict`` agrees with :func:`predict`.

    model: a :class:`Model` (``history.model``, :func:`load`), a :class:`History`, or a
        checkpoint folder or file.

    The library converts the weights to Keras's layout (its one conversion table, the same as
    ``mirror-export --keras-weights``: HWIO kernels, GRU gate order, the Flatten order, ...)
    and writes them as a Keras 3 ``.weights.h5``, which ``keras_model.load_weights`` reads:
    Keras itself checks that every layer gets its variables."""
    model = getattr(model, "model", model)  # a History
    if isinstance(model, (str, bytes, os.PathLike)):
        model = load(model)
    if not isinstance(model, Model):
        raise TypeError("model must be a mirror.Model, a History or a checkpoint path, got "
                        f"{type(model).__name__}")
    with tempfile.TemporaryDirectory(prefix="mirror-keras-") as folder:
        path = os.path.join(folder, "model.weights.h5")
        _mirror.write_keras_weights(json.dumps(model.spec), model.weights, path)
        keras_model.load_weights(path)
