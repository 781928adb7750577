"""A Keras functional model object trains with mirror.fit and its trained weights go back into
Keras (mirror.set_keras_weights), where keras_model.predict agrees with mirror.predict. Skipped
with the reason when Keras (with its jax backend) is not installed."""

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")
keras = pytest.importorskip("keras", reason="Keras 3 is not installed (tests/python/install.sh "
                            "tries keras and jax from PyPI)")

import mirror  # noqa: E402


def functional_model():
    inputs = keras.Input((8,), name="features")
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    wide = keras.layers.Dense(16, activation="tanh")(inputs)
    merged = keras.layers.Concatenate()([hidden, wide])
    return keras.Model(inputs, keras.layers.Dense(3)(merged), name="two_towers")


def test_a_keras_functional_model_trains_and_comes_back(data, tmp_path):
    x, y, xt, yt = data
    keras_model = functional_model()
    history = mirror.fit(keras_model, x, y, epochs=3, batch_size=64, lr=0.01,
                         validation_data=(xt, yt), devices="cpu", no_progress=True,
                         checkpoint_dir=tmp_path / "ck")
    assert history.model.spec["name"] == "two_towers"
    assert history.history["val_accuracy"][-1] > 0.9
    if not mirror._mirror.keras_weights_supported():
        pytest.skip("this build has no HDF5 for .weights.h5 files (install libhdf5-dev)")

    mirror.set_keras_weights(keras_model, history.model)
    ours = mirror.predict(history.model, xt)
    theirs = keras_model.predict(xt, verbose=0)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=1e-5)
    # The same from the checkpoint, into a fresh twin of the model.
    twin = keras.models.model_from_json(keras_model.to_json())
    mirror.set_keras_weights(twin, tmp_path / "ck")
    np.testing.assert_allclose(twin.predict(xt, verbose=0), ours, atol=1e-5, rtol=1e-5)


def test_a_keras_model_that_does_not_fit_the_data_is_refused(data):
    x, y, _, _ = data
    inputs = keras.Input((8,))
    # Two outputs for three classes (more than three train, as in Keras: e2e.input_checks).
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="two_outputs")
    with pytest.raises(mirror.InvalidArgument, match="Keras model 'two_outputs' does not fit"):
        mirror.fit(model, x, y, devices="cpu", no_progress=True)


def test_a_keras_cnn_with_batchnorm_comes_back(tmp_path):
    """Convolution kernels (HWIO), BatchNormalization's moving statistics and the Flatten order
    (Keras flattens H, W, C) all go through the conversion."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 256)
    x = rng.normal(0, 1, (256, 8, 8, 1)).astype(np.float32)
    x[y == 1, 2:6, 2:6, 0] += 1.5
    inputs = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.MaxPooling2D(2)(h)
    outputs = keras.layers.Dense(2)(keras.layers.Flatten()(h))
    keras_model = keras.Model(inputs, outputs, name="small_cnn")
    images = x.reshape(256, 1, 8, 8)  # one channel: NHWC and Mirror's NCHW hold the same values
    history = mirror.fit(keras_model, images, y, epochs=3, batch_size=32, lr=0.01, devices="cpu",
                         no_progress=True)
    assert history.history["accuracy"][-1] > 0.6  # learning (chance: 0.5)
    mirror.set_keras_weights(keras_model, history)
    np.testing.assert_allclose(keras_model.predict(x, verbose=0), mirror.predict(history, images),
                               atol=1e-5, rtol=1e-5)


def test_a_keras_model_trains_from_its_current_weights(tmp_path):
    """Note [Keras model's weights]: fit continues from the model's weights, as Keras's fit does
    (here its own random ones and an adapted Normalization's mean and variance): a step of
    lr 1e-9 leaves the model predicting what Keras predicts; init_weights= still overrides."""
    if not mirror._mirror.keras_weights_supported():
        pytest.skip("this build has no HDF5 for .weights.h5 files (install libhdf5-dev)")
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 2.0, (64, 8)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    inputs = keras.Input((8,))
    norm = keras.layers.Normalization()
    hidden = keras.layers.Dense(16, activation="tanh")(norm(inputs))
    keras_model = keras.Model(inputs, keras.layers.Dense(3)(hidden), name="adapted")
    norm.adapt(x)
    options = dict(batch_size=64, max_steps=1, optimizer="sgd", momentum=0, lr=1e-9,
                   devices="cpu", no_progress=True)
    history = mirror.fit(keras_model, x, y, **options)
    np.testing.assert_allclose(mirror.predict(history, x), keras_model.predict(x, verbose=0),
                               atol=1e-5, rtol=1e-5)
    # init_weights= names another start: the weights of a twin with other random values.
    twin = keras.models.model_from_json(keras_model.to_json())
    twin.layers[1].adapt(x)
    twin.save_weights(tmp_path / "twin.weights.h5")
    other = mirror.fit(keras_model, x, y, init_weights=str(tmp_path / "twin.weights.h5"),
                       **options)
    np.testing.assert_allclose(mirror.predict(other, x), twin.predict(x, verbose=0),
                               atol=1e-5, rtol=1e-5)
    assert not np.allclose(mirror.predict(other, x), mirror.predict(history, x), atol=1e-3)
