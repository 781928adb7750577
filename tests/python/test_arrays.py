"""Note [Zero-copy arrays]: fit() reads a C-contiguous NumPy array where NumPy keeps it."""

import numpy as np

import mirror
from conftest import MLP_SPEC


def test_c_contiguous_float32_is_read_in_place():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    y = np.array([0, 1, 2, 0, 1, 2])
    view = mirror._mirror._arrays_view(x, y)
    assert view.x_address == x.ctypes.data  # the dataset reads NumPy's own buffer
    assert view.sample(2) == [8, 9, 10, 11]
    x[2] = [-1, -2, -3, -4]  # written after the dataset was made: a copy would not see it
    assert view.sample(2) == [-1, -2, -3, -4]


def test_other_layouts_and_dtypes_are_read_too():
    base = np.arange(48, dtype=np.float64).reshape(6, 8)
    y = np.array([0, 1, 2, 0, 1, 2])
    strided = base[:, ::2]  # not contiguous: copied once, into a contiguous array
    view = mirror._mirror._arrays_view(strided, y)
    assert view.x_address != strided.ctypes.data
    assert view.sample(1) == [8, 10, 12, 14]
    images = np.full((6, 2, 2), 255, dtype=np.uint8)  # uint8 is scaled to [0, 1] in place
    view = mirror._mirror._arrays_view(images, y)
    assert view.x_address == images.ctypes.data and view.sample(0) == [1, 1, 1, 1]


def test_fit_trains_on_the_array_itself(data):
    """A callback zeroes x in place after the first epoch: the second epoch sees zeros, so its
    loss cannot go below the labels' entropy (about ln 3), which it could not if fit() had copied
    x; the control run on a copy goes on learning."""
    x, y, _, _ = data
    options = dict(epochs=2, batch_size=64, lr=0.01, devices="cpu", no_progress=True)
    control = mirror.fit(MLP_SPEC, x.copy(), y, **options)

    class ZeroInputs:
        def on_epoch_end(self, epoch, logs):
            x[:] = 0

    changed = mirror.fit(MLP_SPEC, x, y, callbacks=[ZeroInputs()], **options)
    assert changed.history["loss"][0] == control.history["loss"][0]
    assert control.history["loss"][1] < 0.8
    assert changed.history["loss"][1] > 1.0
