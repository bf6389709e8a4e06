"""Remote input (tensorpack's ZMQInput): examples/remote_augment.py streams augmented batches over
ZeroMQ on loopback to examples/remote_train.py, which trains on them through DevicePrefetcher. Both
run as real processes; the batches received equal the stream's bit for bit, and both exit cleanly."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'picpac[torch]')")
pytest.importorskip("zmq", reason="pyzmq is not installed")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EPOCHS, SEED = 2, 5


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_remote_augment_feeds_remote_train(tmp_path, scheme):
    augment = load_example("remote_augment")
    db = augment.make_demo_db(str(tmp_path / "demo.picpac"))
    with augment.make_stream(db, SEED) as stream:  # what the sender's stream gives: epoch 0, then epoch 1
        want = [tuple(np.array(x) if isinstance(x, np.ndarray) else x for x in batch)
                for _ in range(EPOCHS) for batch in stream]
    if scheme == "ipc":
        addr = f"ipc://{tmp_path / 'remote.sock'}"
    else:
        import socket
        with socket.socket() as s:  # a free loopback port (the trainer binds it a moment later)
            s.bind(("127.0.0.1", 0))
            addr = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    dump = tmp_path / "received.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    common = dict(cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                  start_new_session=True)  # each in its own process group: nothing it starts may outlive it
    trainer = subprocess.Popen([sys.executable, str(EXAMPLES / "remote_train.py"), "--addr", addr, "--steps",
                                str(len(want)), "--timeout", "25", "--dump", str(dump)], **common)
    sender = subprocess.Popen([sys.executable, str(EXAMPLES / "remote_augment.py"), "--db", db, "--addr", addr,
                               "--epochs", str(EPOCHS), "--seed", str(SEED)], **common)
    procs = {"remote_train": trainer, "remote_augment": sender}
    try:
        out = {name: p.communicate(timeout=40)[0] for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for name, p in procs.items():
        assert p.returncode == 0, f"{name} exited with {p.returncode}:\n{out[name]}"
        assert not group_alive(p.pid), f"{name} left processes behind"
    assert f"sent {len(want)} batches" in out["remote_augment"]
    assert f"{len(want)} steps, {len(want)} batches received" in out["remote_train"]
    assert out["remote_train"].count("loss ") == len(want)

    with np.load(dump) as got:
        assert len(got.files) == 3 * len(want)
        for i, (images, labels, pad) in enumerate(want):
            assert got[f"images_{i}"].dtype == images.dtype == np.uint8
            np.testing.assert_array_equal(got[f"images_{i}"], images)
            assert got[f"labels_{i}"].dtype == labels.dtype == np.int64
            np.testing.assert_array_equal(got[f"labels_{i}"], labels)
            assert int(got[f"pad_{i}"]) == pad
    # epoch 1 is augmented differently from epoch 0, so equality above is not trivially true
    half = len(want) // EPOCHS
    assert any(not np.array_equal(want[i][0], want[half + i][0]) for i in range(half))
