"""mirror.fit: keywords -> mirror-train flags, the model and arrays -> in-memory sources,
callbacks -> the library's fit hooks. Glue only: parsing, checks and training are the
library's (Note [One command line], tools/train_flags.h)."""

import glob
import json
import os
import shutil
import tempfile

from . import _mirror
from ._errors import Preempted, StopTraining
from ._models import Model, readable_array


class History:
    """What :func:`fit` returns, shaped like Keras's ``History``.

    ``history``: per-epoch lists by metric name (``loss``, ``accuracy`` or ``mse``/``mae``, and
    ``val_...`` with validation data); ``epoch``: the epoch indices (0-based, continuing from
    the checkpoint after ``resume``, as the callbacks number them); ``model``: the
    trained :class:`Model` (weights and bound spec, for :func:`predict`); ``summary``: the run's
    summary (test metrics, ``weights_fingerprint`` as mirror-train prints it, ``steps``,
    ``wall_seconds``, ``preempted``, ``stopped_by_callback``, ...); ``params``: the keywords."""

    def __init__(self, result, params):
        logs = result["history"]
        first = result.get("first_epoch", 0)  # past 0 when the run resumed
        self.epoch = list(range(first, first + len(logs)))
        self.history = {}
        for epoch_logs in logs:
            for name, value in epoch_logs.items():
                self.history.setdefault(name, []).append(value)
        self.summary = {k: v for k, v in result.items() if k not in ("history", "weights", "spec")}
        self.model = Model(json.loads(result["spec"]), result["weights"],
                           step=result["final_step"])
        self.params = params

    def __repr__(self):
        return f"History(epochs={len(self.epoch)}, metrics={sorted(self.history)})"


def _is_path(value):
    return isinstance(value, (str, bytes, os.PathLike))


def _model_source(model, builtin_names):
    """(flag args, spec JSON text or None) for the model argument."""
    if hasattr(model, "to_json") and callable(model.to_json):  # a Keras model object
        name = f"Keras model '{getattr(model, 'name', 'model')}'"
        return ["--model-spec", name], model.to_json()
    if isinstance(model, (dict, list)):
        named = model.get("name") if isinstance(model, dict) else None
        name = f"model spec '{named}'" if isinstance(named, str) else "model spec (dict)"
        return ["--model-spec", name], json.dumps(model)
    if _is_path(model):
        text = os.fsdecode(model)
        if text.lstrip().startswith(("{", "[")):
            return ["--model-spec", "model spec (JSON text)"], text
        if text in builtin_names or not (os.path.exists(text) or text.endswith(".json")
                                         or os.sep in text):
            return ["--model", text], None  # mirror-train names the built-ins (or the typo)
        return ["--model-spec", text], None
    raise TypeError("model must be a Keras model (anything with to_json()), a Mirror model spec "
                    "(a dict, JSON text or a .json file) or a built-in model's name, got "
                    f"{type(model).__name__}")


def _keras_weights(model, options, args, arrays):
    """Note [Keras model's weights]: a built Keras model starts from its current weights, as its
    own fit() would (a model the user loaded, adapted or trained): saved by this rank to a file
    of its own, read as --init-weights (rank 0's are broadcast, as every initial weight is).
    ``init_weights=`` overrides. Returns the folder to remove after the run, or None."""
    if (options.get("init_weights") is not None or not getattr(model, "built", False)
            or not callable(getattr(model, "save_weights", None))):
        return None
    folder = tempfile.mkdtemp(prefix="mirror-keras-weights-")
    path = os.path.join(folder, "model.weights.h5")
    try:
        model.save_weights(path)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    arrays["init_weights_file"] = path
    args.append(f"--init-weights=Keras model '{getattr(model, 'name', 'model')}' (its weights)")
    return folder


def _data_source(split, x, y, args, arrays):
    """Adds --train-x/--train-y (or test) for paths, or in-memory arrays named in the config."""
    if x is None and y is None:
        return
    names = ("x", "y") if split == "train" else ("validation_data x", "validation_data y")
    for key, value, name in ((f"{split}_x", x, names[0]), (f"{split}_y", y, names[1])):
        if value is None:
            continue  # the library says that x and y go together
        flag = f"--{split}-{key[-1]}"
        if _is_path(value):
            args.append(f"{flag}={os.fsdecode(value)}")
            continue
        arrays[key] = readable_array(value, name)
        args.append(f"{flag}={name}")


def _flag_args(options, switches):
    """mirror-train flags for the keywords: `batch_size=64` -> `--batch-size 64`,
    `force_lr=True` -> `--force-lr`, `input_shape=(1, 28, 28)` -> `--input-shape 1,28,28`; a
    flag without a value given anything but a bool gets it as `--force-lr=yes`, which the
    parser refuses as mirror-train does."""
    args = []
    for key, value in options.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if flag in switches:
            if type(value).__name__ in ("bool", "bool_"):
                args += [flag] if value else []
            else:
                args.append(f"{flag}={value}")
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        elif _is_path(value):
            value = os.fsdecode(value)
        args += [flag, str(value)]  # as on mirror-train's command line, `--seed -1` included
    return args


def _asks_to_stop(result):
    """True only for True (a NumPy bool included): a callback written for Keras returns None,
    and a value that merely happens to be truthy (a dict of logs, an array) must not stop."""
    kind = type(result)
    numpy_bool = kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    return result is True or (numpy_bool and bool(result))


class _Hooks:
    """The callbacks as the library calls them (Note [Fit callbacks]): every rank, after each
    step / epoch; True stops, a str is the message of an exception kept here to raise again."""

    def __init__(self, callbacks):
        self.callbacks = list(callbacks or [])
        self.error = None

    def _call(self, method, index, logs):
        stop = False
        for callback in self.callbacks:
            fn = getattr(callback, method, None)
            if fn is None:
                continue
            try:
                stop = _asks_to_stop(fn(index, logs)) or stop
            except StopTraining:
                stop = True
            except BaseException as error:  # noqa: B036 -- every rank must hear of it
                self.error = error
                return f"{type(error).__name__}: {error}"
        return stop

    def step_hook(self):
        if not any(hasattr(c, "on_step_end") for c in self.callbacks):
            return None  # no per-step collective without a step callback
        return lambda step, logs: self._call("on_step_end", step, logs)

    def epoch_hook(self):
        if not any(hasattr(c, "on_epoch_end") for c in self.callbacks):
            return None
        return lambda epoch, logs: self._call("on_epoch_end", epoch, logs)


def _restart_options(options):
    """Note [Python restarts]: `mirrorrun --max-restarts N python3 script.py` relaunches a
    failed job as it was, with MIRRORRUN_RESTART set to the restart's number (launch/mirrorrun:
    it cannot add mirror-train's --resume-or-start to a script's command line). A relaunched
    fit() with a ``checkpoint_dir`` then resumes from it, as mirror-train resumes its
    --checkpoint-dir: ``resume_or_start=checkpoint_dir`` (the first run may have died before its
    first checkpoint: then it starts fresh, saying so), so ``overwrite_checkpoints`` deletes
    nothing. A fit given ``resume=OLD`` keeps it until checkpoint_dir holds checkpoints of its
    own (as mirrorrun does for mirror-train; each rank looks, so on several nodes the folder
    must be shared). Outside a restart the keywords are used as given."""
    restart = os.environ.get("MIRRORRUN_RESTART", "")
    folder = options.get("checkpoint_dir")
    if restart in ("", "0") or folder is None or folder is False:
        return options
    folder = os.fsdecode(folder)
    given = options.get("resume") or options.get("resume_or_start")
    own = glob.glob(os.path.join(glob.escape(folder), "ckpt-*.safetensors"))
    if given is not None and not own:
        return options
    out = {k: v for k, v in options.items() if k not in ("resume", "resume_or_start")}
    out["resume_or_start"] = folder
    return out


def fit(model, x=None, y=None, *, validation_data=None, callbacks=None, **options):
    """Trains ``model`` on ``x``, ``y`` with mirrored data parallelism: one replica per rank
    (``launch/mirrorrun -np N python3 script.py``), each rank calling ``fit`` with the same
    arguments. Rank 0 prints progress.

    model: a Keras model object (its ``to_json()`` is read, and a built model starts from its
        current weights, adapted Normalization included, as Keras's own ``fit`` does;
        ``init_weights=`` overrides; Keras itself is not needed otherwise), a
        Mirror model spec (a dict, JSON text or a ``.json`` file) or a built-in model's name
        (``"cnn"``, ``"gru-rows"``, ...).
    x, y: NumPy arrays (a C-contiguous array of uint8 ... float64 is read in place, never
        copied) or ``.npy``/IDX paths; integer ``y`` are class labels, float ``y`` targets.
        Both None: the built-in model's own data.
    validation_data: ``(x_test, y_test)``, evaluated after every epoch (``val_`` metrics).
    callbacks: objects with ``on_epoch_end(epoch, logs)`` and/or ``on_step_end(step, logs)``,
        called on every rank with the same logs; returning True (or raising
        :class:`StopTraining`) stops every rank; an exception stops every rank and is raised
        again on the rank where it happened (the others raise :class:`JobStopped`).
    options: any ``mirror-train`` flag with ``_`` for ``-`` (``epochs=3``, ``batch_size=64``,
        ``optimizer="adam"``, ``lr=1e-3``, ``precision="mixed_bfloat16"``, ``devices="auto"``,
        ``checkpoint_dir="ck"``, ``force_lr=True``, ...), checked as the program checks them.

    Returns a :class:`History`. Raises :class:`InvalidArgument`/:class:`DataError` for bad
    arguments or data (with mirror-train's messages) and :class:`Preempted` when a signal
    stopped the run. Relaunched by ``mirrorrun --max-restarts`` (MIRRORRUN_RESTART > 0), a fit
    with a ``checkpoint_dir`` resumes from it.
    """
    options = _restart_options(options)
    args, spec_json = _model_source(model, _builtin_names())
    arrays = {}
    _data_source("train", x, y, args, arrays)
    if validation_data is not None:
        if not (isinstance(validation_data, (tuple, list)) and len(validation_data) == 2):
            raise TypeError("validation_data must be a pair (x_test, y_test)")
        _data_source("test", validation_data[0], validation_data[1], args, arrays)
    args += _flag_args(options, _switches())
    hooks = _Hooks(callbacks)
    weights_folder = _keras_weights(model, options, args, arrays) if spec_json else None
    try:
        result = _mirror.fit(args, spec_json, arrays, hooks.step_hook(), hooks.epoch_hook())
    except BaseException:
        if hooks.error is not None:
            # This rank's callback failed: its own exception, which every rank heard of (the
            # others raise JobStopped), so ending the script with it ends no rank abruptly.
            hooks.error.mirror_agreed = True
            raise hooks.error from None
        raise
    finally:
        if weights_folder:
            shutil.rmtree(weights_folder, ignore_errors=True)
    history = History(result, dict(options))
    if result["preempted"]:
        stopped = Preempted("training stopped by a signal after step "
                            f"{result['final_step']} on every rank" +
                            (f"; checkpoint in {options['checkpoint_dir']}"
                             if options.get("checkpoint_dir") else ""))
        stopped.history = history
        raise stopped
    return history


_cache = {}


def _switches():
    """mirror-train's flags that take no value (`--force-lr`)."""
    if "switches" not in _cache:
        _cache["switches"] = {"--" + name for name in _mirror.flag_switches()}
    return _cache["switches"]


def _builtin_names():
    if "builtins" not in _cache:
        _cache["builtins"] = set(_mirror.builtin_models())
    return _cache["builtins"]
