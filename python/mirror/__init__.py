"""Mirror from Python: mirrored data-parallel training of a Keras model object, a Mirror model
spec or a built-in model on NumPy arrays, one replica per rank under ``launch/mirrorrun``.

    import mirror
    history = mirror.fit(keras_model, x, y, epochs=3, batch_size=64,
                         validation_data=(xt, yt), checkpoint_dir="ck")
    mirror.predict(history.model, xt)

Every keyword of :func:`fit` is a ``mirror-train`` flag with ``_`` for ``-``, parsed and
checked by the library exactly as the program does. See docs/python.md.
"""

import atexit as _atexit
import sys as _sys

from . import _mirror
from . import _errors
from ._errors import (CommError, DataError, InvalidArgument, JobStopped, MirrorError,
                      OutOfMemory, Preempted, StopTraining, Unavailable)
from ._fit import History, fit
from ._models import Model, load, predict, set_keras_weights

__version__ = _mirror.__version__
_errors.register(_mirror)

__all__ = [
    "fit", "predict", "load", "set_keras_weights", "History", "Model", "rank", "size",
    "local_rank", "local_size", "barrier", "MirrorError", "InvalidArgument", "DataError",
    "OutOfMemory", "CommError", "Unavailable", "JobStopped", "Preempted", "StopTraining",
]


def rank():
    """This process's rank in the job (0 alone). Starts MPI on first use."""
    return _mirror.rank()


def size():
    """Ranks in the job (1 alone, N under ``mirrorrun -np N``)."""
    return _mirror.size()


def local_rank():
    """Rank among the ranks on this node (from MPI's shared-memory split, not launcher
    variables): the GPU a rank takes with ``devices="auto"``."""
    return _mirror.local_rank()


def local_size():
    """Ranks on this node."""
    return _mirror.local_size()


def barrier():
    """Waits until every rank has called it."""
    _mirror.barrier()


def _shutdown():
    if _mirror.runtime_started():
        _mirror.shutdown()


_atexit.register(_shutdown)

_previous_excepthook = _sys.excepthook


def _excepthook(kind, value, traceback):
    # An exception that ends the script on one rank of several would leave the others waiting
    # in a collective (and MPI_Finalize) forever: end the whole job, as mirror-train does. An
    # error every rank raised together (JobStopped, a callback's own exception on its rank)
    # ends each rank normally instead.
    _previous_excepthook(kind, value, traceback)
    agreed = isinstance(value, JobStopped) or getattr(value, "mirror_agreed", False)
    if _mirror.runtime_started() and _mirror.size() > 1 and not agreed:
        _sys.stderr.flush()
        _mirror.abort_job(f"uncaught {kind.__name__} in the Python script: {value}")


_sys.excepthook = _excepthook
