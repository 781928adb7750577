"""`launch/mirrorrun -np 2 python3 script.py`: one replica per rank, the same weights as
mirror-train for the same settings, callbacks agreed across ranks, and stop signals taking the
preemption path (a checkpoint, exit code 5, Preempted raised in the script)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import mirror
from conftest import MIRROR_TRAIN, MIRRORRUN, MLP_SPEC, blobs, fingerprint, run

SETTINGS = ["--epochs", "2", "--batch-size", "64", "--lr", "0.01", "--devices", "cpu",
            "--no-progress"]

# Every script loads the arrays of `d`, trains MLP_SPEC with the keywords of SETTINGS and
# prints one line per rank; SCRIPT_EXTRA adds callbacks and checkpoints.
SCRIPT = """
import json, os, signal, sys, time
import numpy as np
import mirror
d = sys.argv[1]
x, y, xt, yt = (np.load(f"{d}/{n}.npy") for n in ("x", "y", "xt", "yt"))
spec = json.load(open(f"{d}/mlp.json"))
options = dict(epochs=2, batch_size=64, lr=0.01, devices="cpu", no_progress=True)
"""


def write_data(tmp_path):
    x, y = blobs(512, 0)
    xt, yt = blobs(128, 1)
    for name, a in (("x", x), ("y", y), ("xt", xt), ("yt", yt)):
        np.save(tmp_path / f"{name}.npy", a)
    (tmp_path / "mlp.json").write_text(json.dumps(MLP_SPEC))


def script(tmp_path, body):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT + textwrap.dedent(body))
    return path


def mirrorrun(np_, path, tmp_path, timeout=300):
    return run([MIRRORRUN, "-np", np_, sys.executable, path, tmp_path], timeout=timeout)


@pytest.mark.parametrize("ranks", ["1", "2"])
def test_same_fingerprint_as_mirror_train(tmp_path, ranks):
    write_data(tmp_path)
    d = tmp_path
    cli = run([MIRRORRUN, "-np", ranks, MIRROR_TRAIN, "--model-spec", d / "mlp.json",
               "--train-x", d / "x.npy", "--train-y", d / "y.npy", "--test-x", d / "xt.npy",
               "--test-y", d / "yt.npy", *SETTINGS])
    assert cli.returncode == 0, cli.stderr
    path = script(tmp_path, """
        h = mirror.fit(spec, x, y, validation_data=(xt, yt), **options)
        # One write per line: with PYTHONUNBUFFERED, print() writes the text and its newline
        # separately, and mpirun may put the other rank's line between the two.
        sys.stdout.write(f"rank {mirror.rank()}/{mirror.size()} local {mirror.local_rank()} "
                         f"replicas {h.summary['world_replicas']} "
                         f"weights fingerprint: {h.summary['weights_fingerprint']}\\n")
    """)
    py = mirrorrun(ranks, path, tmp_path)
    assert py.returncode == 0, py.stdout + py.stderr
    lines = re.findall(r"rank (\d+)/(\d+) local \d+ replicas (\d+) weights fingerprint: ([0-9a-f]{16})",
                       py.stdout)
    assert sorted(rank for rank, _, _, _ in lines) == [str(r) for r in range(int(ranks))], py.stdout
    assert {size for _, size, _, _ in lines} == {ranks}
    assert {replicas for _, _, replicas, _ in lines} == {ranks}
    assert {found for _, _, _, found in lines} == {fingerprint(cli.stdout)}
    # Rank 0 alone prints the progress lines.
    assert py.stdout.count("epoch 2/2:") == 1


def test_a_callback_stop_on_one_rank_stops_every_rank(tmp_path):
    write_data(tmp_path)
    path = script(tmp_path, """
        class StopOnRankOne:
            def on_epoch_end(self, epoch, logs):
                return mirror.rank() == 1 and epoch == 1
        options["epochs"] = 6
        h = mirror.fit(spec, x, y, callbacks=[StopOnRankOne()], **options)
        print(f"rank {mirror.rank()} epochs {len(h.epoch)} stopped {h.summary['stopped_by_callback']}")
    """)
    out = mirrorrun("2", path, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "rank 0 epochs 2 stopped True" in out.stdout and "rank 1 epochs 2 stopped True" in out.stdout


def test_an_exception_in_a_callback_on_one_rank_stops_every_rank(tmp_path):
    write_data(tmp_path)
    path = script(tmp_path, """
        class FailOnRankOne:
            def on_step_end(self, step, logs):
                if mirror.rank() == 1 and step == 5:
                    raise ZeroDivisionError("boom on rank one")
        options["epochs"] = 50
        try:
            mirror.fit(spec, x, y, callbacks=[FailOnRankOne()], **options)
        except Exception as e:
            print(f"rank {mirror.rank()} raised {type(e).__name__}: {e}", flush=True)
            raise
    """)
    out = mirrorrun("2", path, tmp_path, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rank 1 raised ZeroDivisionError: boom on rank one" in out.stdout
    assert ("rank 0 raised JobStopped: training stopped at step 5: a callback failed on rank 1: "
            "ZeroDivisionError: boom on rank one") in out.stdout


STOP_SCRIPT = """
    class Signal:
        def on_step_end(self, step, logs):
            if mirror.rank() == int(os.environ.get("SIGNAL_RANK", "-1")) and step == 5:
                os.kill(os.getpid(), signal.SIGTERM)  # as Slurm or mpirun would
            if mirror.rank() == 0 and step == 3:
                open(f"{d}/started", "w").close()
    options["epochs"] = 100000
    try:
        mirror.fit(spec, x, y, callbacks=[Signal()], checkpoint_dir=f"{d}/ck", **options)
    except KeyboardInterrupt as e:
        print(f"rank {mirror.rank()} caught {type(e).__name__}: {e}", flush=True)
        raise
"""


def test_sigterm_to_one_rank_checkpoints_and_exits_5(tmp_path):
    write_data(tmp_path)
    path = script(tmp_path, STOP_SCRIPT)
    out = run([MIRRORRUN, "-np", "2", "-x", "SIGNAL_RANK=1", sys.executable, path, tmp_path],
              timeout=300)
    assert out.returncode == 5, out.stdout + out.stderr
    # The signal thread sets the flag at once, so the next step or the one after carries it.
    step = mirror.load(tmp_path / "ck").step
    assert step in (6, 7)
    for r in (0, 1):
        assert (f"rank {r} caught Preempted: training stopped by a signal after step {step} on "
                f"every rank; checkpoint in {tmp_path}/ck") in out.stdout


def _start_and_signal(cmd, tmp_path, sig):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.time() + 120
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_sigterm_to_mirrorrun_stops_every_rank_with_a_checkpoint(tmp_path):
    write_data(tmp_path)
    path = script(tmp_path, STOP_SCRIPT)
    code, out, err = _start_and_signal([MIRRORRUN, "-np", "2", sys.executable, path, tmp_path],
                                       tmp_path, signal.SIGTERM)
    assert code == 5, out + err
    assert "rank 0 caught Preempted" in out and "rank 1 caught Preempted" in out
    step = mirror.load(tmp_path / "ck").step
    assert step >= 3 and f"after step {step} on every rank" in out


def test_ctrl_c_without_a_launcher_raises_keyboard_interrupt(tmp_path):
    write_data(tmp_path)
    path = script(tmp_path, STOP_SCRIPT)
    code, out, err = _start_and_signal([sys.executable, path, tmp_path], tmp_path, signal.SIGINT)
    assert code == 5, out + err
    assert "rank 0 caught Preempted" in out and "checkpoint written to" in out + err
    assert mirror.load(tmp_path / "ck").step >= 3


def test_an_uncaught_exception_on_one_rank_ends_the_job(tmp_path):
    """Rank 0 waits in a barrier that rank 1 never reaches: without the abort it would hang."""
    write_data(tmp_path)
    path = script(tmp_path, """
        h = mirror.fit(spec, x, y, **options)
        if mirror.rank() == 1:
            raise RuntimeError("only rank one fails")
        mirror.barrier()
    """)
    out = mirrorrun("2", path, tmp_path, timeout=120)
    assert out.returncode != 0
    assert "uncaught RuntimeError in the Python script: only rank one fails" in out.stderr


RESTART_SCRIPT = """
    class Slow:
        \"\"\"Time for the test to kill a rank mid-run (the weights do not depend on it).\"\"\"
        def on_step_end(self, step, logs):
            time.sleep(0.05)
    options["epochs"] = 6
    h = mirror.fit(spec, x, y, callbacks=[Slow()], checkpoint_dir=f"{d}/ck", checkpoint_every=4,
                   overwrite_checkpoints=True, **options)
    sys.stdout.write(f"rank {mirror.rank()} restart {os.environ.get('MIRRORRUN_RESTART', '-')} "
                     f"weights fingerprint: {h.summary['weights_fingerprint']}\\n")
"""


def test_max_restarts_relaunches_a_killed_script_which_resumes_its_checkpoint_dir(tmp_path):
    """Note [Python restarts] (mirror/_fit.py): a rank killed mid-run, mirrorrun relaunches the
    script with MIRRORRUN_RESTART=1, fit resumes from its checkpoint_dir (overwrite_checkpoints
    notwithstanding) and ends with the uninterrupted run's weights."""
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    write_data(plain_dir)
    write_data(tmp_path)
    path = script(tmp_path, RESTART_SCRIPT)
    plain = mirrorrun("2", path, plain_dir)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    want = fingerprint(plain.stdout)

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               MIRRORRUN_BACKOFF_S="1")
    proc = subprocess.Popen([str(MIRRORRUN), "--max-restarts", "1", "-np", "2", sys.executable,
                             str(path), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not list((tmp_path / "ck").glob("ckpt-*.safetensors")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    # A rank of this job: the interpreter running this script (not mirrorrun or mpirun).
    ranks = subprocess.run(["pgrep", "-f", f"^{sys.executable} {path} {tmp_path}$"],
                           capture_output=True, text=True).stdout.split()
    assert ranks, "no rank to kill: the run ended before it could be interrupted"
    os.kill(int(ranks[-1]), signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "restart 1 of 1" in err and "MIRRORRUN_RESTART=1" in err, err
    assert f"resumed from {tmp_path}/ck/ckpt-" in out + err, out + err
    lines = re.findall(r"rank (\d) restart (\S+) weights fingerprint: ([0-9a-f]{16})", out)
    assert sorted(lines) == [("0", "1", want), ("1", "1", want)], out
