"""examples/train_*.py run as real programs: they train on the digits database, checkpoint and resume.

Short settings (two epochs, one for TensorFlow and JAX) keep this quick; the full default runs reach
more (docs/adapters.md, "Examples").
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ACCURACY = re.compile(r"^held-out accuracy ([0-9.]+)", re.MULTILINE)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                reason="the examples build their data with scikit-learn (the test extra has it)")


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]' installs it)")


def command(script: str, *args: str) -> list[str]:
    return [sys.executable, str(EXAMPLES / script), *args]


def run(script: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run(command(script, *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def accuracy_of(output: str) -> float:
    found = ACCURACY.findall(output)
    assert found, f"no 'held-out accuracy' line in:\n{output}"
    return float(found[-1])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import digits
        return digits.build(tmp_path_factory.mktemp("digits") / "digits.picpac")
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def torch_two_epochs(db):
    needs("torch")
    return run("train_torch.py", "--db", str(db), "--epochs", "2")


def test_torch_trains_to_a_held_out_accuracy(torch_two_epochs):
    assert re.findall(r"^epoch (\d+) step (\d+)", torch_two_epochs, re.MULTILINE) == [("0", "23"), ("1", "46")]
    assert accuracy_of(torch_two_epochs) >= 0.90   # two epochs; the default 12 reach >= 0.97


def test_torch_killed_run_resumes_from_its_checkpoint(db, tmp_path, torch_two_epochs):
    import torch

    checkpoint = tmp_path / "digits.pt"
    proc = subprocess.Popen(command("train_torch.py", "--db", str(db), "--epochs", "2", "--checkpoint", str(checkpoint),
                                    "--save-every", "10"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)           # as a preempted job dies: mid-epoch, no clean-up
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    saved = torch.load(checkpoint, weights_only=True)
    epoch, step = saved["epoch"], saved["step"]
    assert step % 10 == 0 and 0 < step < 46 and epoch == step // 23

    resumed = run("train_torch.py", "--db", str(db), "--epochs", "2", "--checkpoint", str(checkpoint),
                  "--resume", str(checkpoint))
    assert f"resumed from {checkpoint}: epoch {epoch} step {step}" in resumed
    # it goes on from the saved epoch and step: the epochs before are not run again
    assert re.findall(r"^epoch (\d+) step (\d+)", resumed, re.MULTILINE) == [(str(e), str(23 * (e + 1))) for e in range(epoch, 2)]
    # the same batches, augmentation and dropout as the uninterrupted run: the same model at the end
    assert accuracy_of(resumed) == accuracy_of(torch_two_epochs)
    assert torch.load(checkpoint, weights_only=True)["step"] == 46


def test_tensorflow_example_runs_an_epoch(db):
    needs("tensorflow")
    assert accuracy_of(run("train_tf.py", "--db", str(db), "--epochs", "1")) > 0.1


def test_jax_example_runs_an_epoch(db):
    needs("jax")
    assert accuracy_of(run("train_jax.py", "--db", str(db), "--epochs", "1")) > 0.1


def test_the_digits_builder_takes_help_and_a_path(tmp_path):
    """``--help`` prints the usage (it once wrote a database named '--help'); a path builds the database there."""
    out = run("digits.py", "--help")
    assert out.startswith("usage: digits.py [-h] [db]") and not (ROOT / "--help").exists()
    target = tmp_path / "d.picpac"
    assert run("digits.py", str(target)).strip() == f"{target}: 1797 records"
