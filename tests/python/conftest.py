"""Shared fixtures of the Python module's tests (run by ctest through run_pytest.sh, in the venv
that python.install made). MIRROR_BUILD_DIR names the C++ build (mirror-train for the CLI
comparisons); the repository root is two folders up."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("MIRROR_BUILD_DIR", ROOT / "build"))
MIRRORRUN = ROOT / "launch" / "mirrorrun"
MIRROR_TRAIN = BUILD / "bin" / "mirror-train"
MIRROR_PREDICT = BUILD / "bin" / "mirror-predict"

# A small three-class problem: 8 features, class c shifted along feature c.
MLP_SPEC = {"name": "mlp", "layers": [{"type": "dense", "units": 16, "activation": "relu"},
                                      {"type": "dense"}]}


def blobs(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.7, (n, 8)).astype(np.float32) + 2 * np.eye(3, 8, dtype=np.float32)[y]
    return x, y


@pytest.fixture
def data():
    return blobs(512, 0) + blobs(128, 1)


def run(cmd, timeout=300, **kw):
    """Runs cmd (a list), returning the CompletedProcess with text output."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    env.update(kw.pop("env", {}))
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env=env, **kw)


def fingerprint(text):
    """The weights fingerprint mirror-train (and the scripts here) print."""
    found = re.findall(r"weights fingerprint: ([0-9a-f]{16})", text)
    assert found, f"no fingerprint in:\n{text}"
    return found[-1]


def python_cmd():
    return [sys.executable]


def pytest_sessionfinish(session, exitstatus):
    """A file whose tests were all skipped (no Keras here) is Skipped for ctest (exit 77)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    if exitstatus == 0 and stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = 77
