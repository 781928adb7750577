"""docs/python.md's complete script (examples/python/train.py, printed whole on the page and
checked byte for byte by e2e.docs_examples) runs under mirrorrun with 2 ranks."""

import re
import sys

import mirror
from conftest import MIRRORRUN, ROOT, run


def test_the_documented_script_runs_on_two_ranks(tmp_path):
    page = (ROOT / "docs" / "python.md").read_text()
    assert "<!-- example: examples/python/train.py -->" in page
    out = run([MIRRORRUN, "-np", "2", sys.executable, ROOT / "examples" / "python" / "train.py",
               tmp_path / "demo"], timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("history: {") == 1  # rank 0 only
    assert re.search(r"callback: epoch 1 val_accuracy 0\.9\d+", out.stdout), out.stdout
    predicted = re.search(r"predicted: \[([\d ]+)\] true: \[([\d ]+)\]", out.stdout)
    assert predicted and predicted.group(1).split() == predicted.group(2).split(), out.stdout
    assert mirror.load(tmp_path / "demo" / "ckpt").spec["name"] == "mlp"
