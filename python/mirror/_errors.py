"""Mirror's errors as Python exceptions.

The library raises them with its own messages (the same as mirror-train's); each carries
``exit_code``, the code mirror-train exits with for it (3: a set-up error such as a bad
argument, model or data; 1: a run-time failure).
"""


class MirrorError(Exception):
    """Base of every error Mirror raises."""

    exit_code = 1


class InvalidArgument(MirrorError, ValueError):
    """An unusable argument: an unknown keyword, a value out of range, a model that does not fit
    the data."""


class DataError(MirrorError, ValueError):
    """Malformed data: a bad file, labels out of range, NaN in the inputs, an unreadable dtype."""


class OutOfMemory(MirrorError, MemoryError):
    """A device (or the host) cannot hold the model and batch."""


class CommError(MirrorError):
    """A collective failed or timed out, or the ranks disagree."""


class Unavailable(MirrorError):
    """A capability that is not available here (no GPU, built without CUDA, ...)."""


class JobStopped(MirrorError):
    """Every rank stopped together with this error (a set-up check of a multi-rank job, a
    diverged loss, a callback that failed on another rank); ``exit_code`` is mirror-train's."""


class Preempted(SystemExit, KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGUSR1 stopped training on every rank after the same step; rank 0
    wrote a checkpoint of it when ``checkpoint_dir`` was given.

    It is a ``KeyboardInterrupt`` (``except KeyboardInterrupt`` catches it) and a ``SystemExit``
    with code 5, so a script that does not catch it ends with mirror-train's exit code for a
    preempted run (5), which ``launch/mirrorrun`` and schedulers take as "resume later"."""

    exit_code = 5

    def __init__(self, message="training was stopped by a signal"):
        super().__init__(5)
        self.message = message

    def __str__(self):
        return self.message


class StopTraining(Exception):
    """Raise it in a callback to stop training cleanly (the same as returning True)."""


def register(module):
    module._set_error_types({
        "MirrorError": MirrorError,
        "InvalidArgument": InvalidArgument,
        "DataError": DataError,
        "OutOfMemory": OutOfMemory,
        "CommError": CommError,
        "Unavailable": Unavailable,
        "JobStopped": JobStopped,
    })
