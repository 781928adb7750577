"""fit / predict / load on small data, callbacks, and bad arguments raising Mirror's messages
(the same text mirror-train prints for the same flag)."""

import json

import numpy as np
import pytest

import mirror
from conftest import MIRROR_PREDICT, MIRROR_TRAIN, MLP_SPEC, blobs, run

QUIET = dict(devices="cpu", no_progress=True)


def test_fit_history_predict_load(data, tmp_path):
    x, y, xt, yt = data
    h = mirror.fit(MLP_SPEC, x, y, epochs=3, batch_size=64, validation_data=(xt, yt), lr=0.01,
                   checkpoint_dir=tmp_path / "ck", **QUIET)
    assert h.epoch == [0, 1, 2]
    assert set(h.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 3 for v in h.history.values())
    assert h.history["loss"][2] < h.history["loss"][0]
    assert h.history["val_accuracy"][-1] > 0.9
    assert h.summary["test_accuracy"] == h.history["val_accuracy"][-1]
    assert h.summary["steps"] == 3 * 8 and not h.summary["preempted"]

    logits = mirror.predict(h, xt)
    assert logits.shape == (128, 3) and logits.dtype == np.float32
    assert (logits.argmax(1) == yt).mean() == pytest.approx(h.history["val_accuracy"][-1])
    probabilities = h.model.predict(xt, output_kind="probabilities", batch_size=7)
    np.testing.assert_allclose(probabilities.sum(1), 1, rtol=1e-6)
    np.testing.assert_array_equal(probabilities.argmax(1), logits.argmax(1))

    loaded = mirror.load(tmp_path / "ck")
    assert loaded.step == h.summary["final_step"] == 24
    assert loaded.spec == h.model.spec and loaded.spec["name"] == "mlp"
    assert sorted(loaded.weights) == sorted(h.model.weights)
    assert loaded.weights["dense_1/kernel"].shape == (8, 16)  # names as in checkpoint.md
    for name, value in loaded.weights.items():
        np.testing.assert_array_equal(value, h.model.weights[name])
    np.testing.assert_array_equal(mirror.predict(tmp_path / "ck", xt), logits)


def test_model_given_as_json_text_file_and_builtin(data, tmp_path):
    x, y, _, _ = data
    spec_file = tmp_path / "mlp.json"
    spec_file.write_text(json.dumps(MLP_SPEC))
    runs = [mirror.fit(m, x, y, epochs=1, batch_size=64, **QUIET)
            for m in (MLP_SPEC, json.dumps(MLP_SPEC), spec_file, str(spec_file))]
    prints = {r.summary["weights_fingerprint"] for r in runs}
    assert len(prints) == 1, prints
    # A built-in model on its own (synthetic) data.
    h = mirror.fit("gru-rows", data="synthetic", train_limit=128, test_limit=64, epochs=1,
                   batch_size=32, **QUIET)
    assert set(h.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}


def test_paths_and_arrays_train_alike(data, tmp_path):
    x, y, xt, yt = data
    for name, a in (("x", x), ("y", y), ("xt", xt), ("yt", yt)):
        np.save(tmp_path / f"{name}.npy", a)
    options = dict(epochs=1, batch_size=64, **QUIET)
    arrays = mirror.fit(MLP_SPEC, x, y, validation_data=(xt, yt), **options)
    files = mirror.fit(MLP_SPEC, tmp_path / "x.npy", tmp_path / "y.npy",
                       validation_data=(tmp_path / "xt.npy", tmp_path / "yt.npy"), **options)
    assert arrays.summary["weights_fingerprint"] == files.summary["weights_fingerprint"]
    assert arrays.history == files.history


# Each keyword and the flag mirror-train is given for it, and the message both say.
BAD = [
    ({"epochs": 0}, ["--epochs", "0"], "--epochs must be >= 1, got 0"),
    ({"epoch": 2}, ["--epoch", "2"], "unrecognised option '--epoch'"),
    ({"lr": -1.0}, ["--lr", "-1"], "--lr must be a positive finite number"),
    ({"lr": 50.0}, ["--lr", "50"], "pass --force-lr to use it"),
    ({"seed": -1}, ["--seed", "-1"], "--seed must be a whole number from 0 to 18446744073709551615"),
    ({"momentum": 1.5}, ["--momentum", "1.5"], "--momentum must be in [0, 1)"),
    ({"precision": "fp8"}, ["--precision", "fp8"], "--precision: "),
    ({"memory": "limit=lots"}, ["--memory", "limit=lots"], "--memory: "),
    ({"batch_size": 0}, ["--batch-size", "0"], "--batch-size must be a positive number"),
    ({"epochs": 1.5}, ["--epochs", "1.5"], "the argument ('1.5') for option '--epochs' is invalid"),
    ({"force_lr": "yes"}, ["--force-lr=yes"], "option '--force-lr' does not take any arguments"),
    ({"lr_scale": "square"}, ["--lr-scale", "square"], "--lr-scale must be none or linear"),
]


@pytest.mark.parametrize("keywords, flags, message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments_raise_mirror_train_messages(data, keywords, flags, message):
    x, y, _, _ = data
    with pytest.raises(mirror.InvalidArgument) as raised:
        mirror.fit(MLP_SPEC, x, y, **QUIET, **keywords)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError) and raised.value.exit_code == 3
    cli = run([MIRROR_TRAIN, "--model", "cnn", "--data", "synthetic", *flags])
    assert cli.returncode == 2 and message in cli.stderr, cli.stderr
    assert str(raised.value) in cli.stderr  # word for word


def test_bad_data_and_models_raise(data):
    x, y, _, _ = data
    with pytest.raises(mirror.DataError, match=r"y: label -1 of sample 3 is outside"):
        mirror.fit(MLP_SPEC, x, np.where(np.arange(len(y)) == 3, -1, y), **QUIET)
    bad = x.copy()
    bad[5, 2] = np.nan
    with pytest.raises(mirror.DataError, match=r"x: x value nan at flat index 42 \(sample 5\)"):
        mirror.fit(MLP_SPEC, bad, y, **QUIET)
    with pytest.raises(mirror.DataError, match="NumPy dtype bool is not read by Mirror"):
        mirror.fit(MLP_SPEC, x > 0, y, **QUIET)
    with pytest.raises(mirror.DataError, match=r"512 samples in x \(x\) but 10 in y"):
        mirror.fit(MLP_SPEC, x, y[:10], **QUIET)
    # Two outputs for three classes (more outputs than classes train, as in Keras).
    two = {"name": "two", "layers": [{"type": "dense", "units": 2}]}
    with pytest.raises(mirror.InvalidArgument, match="model spec 'two' does not fit the training"):
        mirror.fit(two, x, y, **QUIET)
    with pytest.raises(mirror.InvalidArgument, match="--model must be one of .* got 'cnnn'"):
        mirror.fit("cnnn", x, y, **QUIET)
    with pytest.raises(mirror.InvalidArgument, match="--train-x and --train-y go together"):
        mirror.fit(MLP_SPEC, x, **QUIET)
    with pytest.raises(TypeError, match="model must be a Keras model"):
        mirror.fit(42, x, y, **QUIET)


class Recorder:
    def __init__(self, stop_at_step=None, stop_at_epoch=None):
        self.steps, self.epochs = [], []
        self.stop_at_step, self.stop_at_epoch = stop_at_step, stop_at_epoch

    def on_step_end(self, step, logs):
        self.steps.append((step, dict(logs)))
        return step == self.stop_at_step

    def on_epoch_end(self, epoch, logs):
        self.epochs.append((epoch, dict(logs)))
        if epoch == self.stop_at_epoch:
            raise mirror.StopTraining()


def test_callbacks_see_logs_and_stop_training(data, tmp_path):
    x, y, xt, yt = data
    options = dict(epochs=5, batch_size=64, validation_data=(xt, yt), **QUIET)
    seen = Recorder(stop_at_epoch=1)
    h = mirror.fit(MLP_SPEC, x, y, callbacks=[seen], **options)
    assert [e for e, _ in seen.epochs] == [0, 1] and h.epoch == [0, 1]
    assert h.summary["stopped_by_callback"] and h.summary["steps"] == 16
    assert [s for s, _ in seen.steps] == list(range(1, 17))
    assert seen.epochs[1][1] == {k: v[1] for k, v in h.history.items()}
    assert set(seen.steps[0][1]) == {"loss", "accuracy"}

    mid = Recorder(stop_at_step=3)  # a step stop still ends its epoch with the evaluation
    h = mirror.fit(MLP_SPEC, x, y, callbacks=[mid], checkpoint_dir=tmp_path / "ck", **options)
    assert h.summary["steps"] == 3 and h.epoch == [0] and len(mid.epochs) == 1
    assert mirror.load(tmp_path / "ck").step == 3  # the stop point was checkpointed


def test_an_exception_in_a_callback_is_raised_as_itself(data):
    x, y, _, _ = data

    class Broken:
        def on_epoch_end(self, epoch, logs):
            raise ZeroDivisionError("broken callback")

    with pytest.raises(ZeroDivisionError, match="broken callback"):
        mirror.fit(MLP_SPEC, x, y, epochs=3, batch_size=64, callbacks=[Broken()], **QUIET)
    # The module stays usable after a failed fit.
    assert mirror.fit(MLP_SPEC, x, y, epochs=1, batch_size=64, **QUIET).epoch == [0]


def test_rank_size_and_version():
    assert (mirror.rank(), mirror.size(), mirror.local_rank(), mirror.local_size()) == (0, 1, 0, 1)
    assert mirror.__version__.count(".") == 2


def cli_predict(checkpoint, x, tmp_path, *flags):
    """mirror-predict's output on x (through a .npy), for comparing with mirror.predict."""
    np.save(tmp_path / "cli_x.npy", x)
    out = run([MIRROR_PREDICT, "--checkpoint", checkpoint, "--input", tmp_path / "cli_x.npy",
               "--output", tmp_path / "cli_y.npy", "--devices", "cpu", *flags])
    assert out.returncode == 0, out.stderr
    return np.load(tmp_path / "cli_y.npy")


def test_predict_follows_mirror_predicts_input_and_output_rules(data, tmp_path):
    x, y, xt, yt = data
    # A sigmoid head: probabilities are each output's sigmoid (a softmax over one value is 1).
    sigmoid = {"name": "bin", "layers": [{"type": "dense", "units": 16, "activation": "relu"},
                                         {"type": "dense", "units": 1,
                                          "activation": "sigmoid"}]}
    h = mirror.fit(sigmoid, x, (y > 0).astype(np.int64), epochs=2, lr=0.01,
                   checkpoint_dir=tmp_path / "sig", **QUIET)
    logits = mirror.predict(h, xt[:16])
    probabilities = mirror.predict(h, xt[:16], output_kind="probabilities")
    np.testing.assert_allclose(probabilities, 1 / (1 + np.exp(-logits.astype(np.float64))),
                               rtol=1e-6)
    assert 0 < probabilities.min() and probabilities.max() < 1
    np.testing.assert_array_equal(
        probabilities,
        cli_predict(tmp_path / "sig", xt[:16], tmp_path, "--output-kind", "probabilities"))

    # A model that rescales its own input reads uint8 as stored, as in training.
    rescaling = {"name": "rs", "input_shape": [8],
                 "layers": [{"type": "rescaling", "scale": 1 / 255},
                            {"type": "dense", "units": 8, "activation": "relu"},
                            {"type": "dense"}]}
    pixels = np.random.default_rng(3).integers(0, 256, (256, 8)).astype(np.uint8)
    h = mirror.fit(rescaling, pixels, y[:256], epochs=1, checkpoint_dir=tmp_path / "rs", **QUIET)
    np.testing.assert_array_equal(mirror.predict(h, pixels[:16]),
                                  mirror.predict(h, pixels[:16].astype(np.float32)))
    np.testing.assert_array_equal(mirror.predict(h, pixels[:16]),
                                  cli_predict(tmp_path / "rs", pixels[:16], tmp_path))


def test_predict_pads_tokens_to_a_keras_models_length(tmp_path):
    # A Keras model that states its input length sees its sequences padded to it, as in training.
    keras = {"class_name": "Sequential", "config": {"name": "tokens", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 10]}},
        {"class_name": "Embedding", "config": {"input_dim": 20, "output_dim": 4}},
        {"class_name": "Conv1D", "config": {"filters": 4, "kernel_size": 3, "padding": "same",
                                            "activation": "relu"}},
        {"class_name": "GlobalAveragePooling1D", "config": {}},
        {"class_name": "Dense", "config": {"units": 2}}]}}
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, 20, (128, 6)).astype(np.int64)
    labels = rng.integers(0, 2, 128)
    h = mirror.fit(json.dumps(keras), tokens, labels, epochs=1,
                   checkpoint_dir=tmp_path / "ck", **QUIET)
    padded = np.zeros((128, 10), np.int64)
    padded[:, :6] = tokens
    np.testing.assert_array_equal(mirror.predict(h, tokens), mirror.predict(h, padded))
    np.testing.assert_array_equal(mirror.predict(h, tokens),
                                  cli_predict(tmp_path / "ck", tokens, tmp_path))


def test_unreadable_arrays_and_truthy_callback_values(data):
    x, y, _, _ = data
    with pytest.raises(mirror.DataError, match=r"other byte order.*astype\('<f4'\)"):
        mirror.fit(MLP_SPEC, x.astype(">f4"), y, epochs=1, **QUIET)
    with pytest.raises(mirror.DataError, match="Python objects"):
        mirror.fit(MLP_SPEC, x, y.astype(object), epochs=1, **QUIET)
    h = mirror.fit(MLP_SPEC, x, y, epochs=1, **QUIET)
    with pytest.raises(mirror.DataError, match=r"'x'.*other byte order|x: NumPy dtype '>f4'"):
        mirror.predict(h, x.astype(">f4"))

    class Chatty:  # returns its logs, as some Keras-style callbacks do: that is not a stop
        def on_epoch_end(self, epoch, logs):
            return logs

    assert mirror.fit(MLP_SPEC, x, y, epochs=2, callbacks=[Chatty()], **QUIET).epoch == [0, 1]

    class StopsWithNumpyTrue:
        def on_epoch_end(self, epoch, logs):
            return np.bool_(epoch == 0)

    assert mirror.fit(MLP_SPEC, x, y, epochs=3, callbacks=[StopsWithNumpyTrue()],
                      **QUIET).epoch == [0]


def test_history_epochs_continue_after_resume(data, tmp_path):
    x, y, _, _ = data
    mirror.fit(MLP_SPEC, x, y, epochs=2, checkpoint_dir=tmp_path / "ck", **QUIET)
    seen = []

    class Epochs:
        def on_epoch_end(self, epoch, logs):
            seen.append(epoch)

    h = mirror.fit(MLP_SPEC, x, y, epochs=4, resume=tmp_path / "ck", callbacks=[Epochs()],
                   **QUIET)
    assert h.epoch == seen == [2, 3]


def test_a_restart_resumes_the_checkpoint_dir(tmp_path, monkeypatch):
    """Note [Python restarts]: the keywords fit() uses when mirrorrun relaunched the script."""
    from mirror._fit import _restart_options
    ck, old = str(tmp_path / "ck"), str(tmp_path / "old")
    monkeypatch.delenv("MIRRORRUN_RESTART", raising=False)
    assert _restart_options({"checkpoint_dir": ck}) == {"checkpoint_dir": ck}
    monkeypatch.setenv("MIRRORRUN_RESTART", "0")  # the first launch
    assert _restart_options({"checkpoint_dir": ck}) == {"checkpoint_dir": ck}
    monkeypatch.setenv("MIRRORRUN_RESTART", "1")
    assert _restart_options({"epochs": 2}) == {"epochs": 2}, "nothing to resume from"
    assert _restart_options({"checkpoint_dir": ck, "overwrite_checkpoints": True}) == {
        "checkpoint_dir": ck, "overwrite_checkpoints": True, "resume_or_start": ck}
    # Started from another run's checkpoints: those until the folder holds its own.
    assert _restart_options({"checkpoint_dir": ck, "resume": old}) == {
        "checkpoint_dir": ck, "resume": old}
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "ckpt-000000000004.safetensors").write_bytes(b"")
    assert _restart_options({"checkpoint_dir": ck, "resume": old}) == {
        "checkpoint_dir": ck, "resume_or_start": ck}
