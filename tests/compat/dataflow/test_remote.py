"""send_dataflow_zmq / RemoteDataZMQ between two real processes (a subprocess sends, the test receives),
over TCP on loopback and over IPC, with bounded queues and a recorded serialisation format."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from picpac.dataflow import DataFlow, DataFromGenerator, RemoteDataZMQ, RemoteTimeout
from picpac.errors import PicPacValueError, WorkerError

from dataflow_helpers import take

pytest.importorskip("zmq")
TESTS = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]  # this module, helpers


# -- what the sender sends (module level: the sender process imports it from here) --------------------------
def arrays(n: int) -> DataFlow:
    return DataFromGenerator(lambda: ([np.full((3, 4), i, np.uint8), np.float32(i) / 2, i] for i in range(n)), size=n)


def mixed(n: int) -> DataFlow:
    return DataFromGenerator(lambda: ({"id": i, "name": f"dp{i}", "x": np.arange(i, dtype=np.int64)} for i in range(n)))


def failing(n: int) -> DataFlow:
    def gen():
        yield from ([i] for i in range(3))
        raise ZeroDivisionError("the sender's source failed")
    return DataFromGenerator(gen)


def big(n: int, log: str) -> DataFlow:
    def gen():
        with open(log, "w") as f:
            for i in range(n):
                f.write(f"{i}\n")
                f.flush()
                yield [np.full(1 << 20, i % 251, np.uint8), i]  # 1 MiB each
    return DataFromGenerator(gen)


SENDER = """
import sys
sys.path[:0] = {tests!r}
from picpac.dataflow import send_dataflow_zmq
import test_remote as t

if __name__ == "__main__":
    n = send_dataflow_zmq(t.{flow}, {addr!r}, hwm={hwm}, format={fmt!r}, epochs={epochs}, progress=False)
    print("sent", n, flush=True)
"""


_SENDERS: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _kill_senders():
    """A test that fails while its sender is blocked must not leave the sender running."""
    yield
    while _SENDERS:
        proc = _SENDERS.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def sender(tmp_path: Path, flow: str, addr: str, fmt: str | None = None, hwm: int = 50, epochs: int | None = 1,
           name: str = "sender.py") -> subprocess.Popen:
    script = tmp_path / name
    script.write_text(SENDER.format(tests=TESTS, flow=flow, addr=addr, hwm=hwm, fmt=fmt, epochs=epochs))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _SENDERS.append(proc)
    return proc


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, out, err


def receiver(addr: str, **kw) -> RemoteDataZMQ:
    r = RemoteDataZMQ(addr, timeout=20, **kw)
    r.reset_state()
    return r


# -- between two processes ------------------------------------------------------------------------------------
def test_tcp_loopback_pickle5(tmp_path):
    with receiver("tcp://127.0.0.1:*", format="pickle5") as r:
        addr = r.addresses[0]
        assert addr.startswith("tcp://127.0.0.1:") and not addr.endswith("*")
        proc = sender(tmp_path, "mixed(20)", addr, fmt="pickle5")
        got = take(r, 20)
        code, out, err = finish(proc)
    assert code == 0 and "sent 20" in out, err
    assert [dp["id"] for dp in got] == list(range(20)) and got[7]["name"] == "dp7"
    assert np.array_equal(got[7]["x"], np.arange(7)) and got[7]["x"].flags.writeable
    assert r.cnt1 == 20


def test_ipc_arrays_format(tmp_path):
    with receiver(f"ipc://{tmp_path}/dataflow.sock", format="arrays") as r:
        proc = sender(tmp_path, "arrays(15)", f"ipc://{tmp_path}/dataflow.sock", fmt="arrays")
        got = take(r, 15)
        code, out, err = finish(proc)
    assert code == 0 and "sent 15" in out, err
    for i, (image, half, index) in enumerate(got):
        assert image.dtype == np.uint8 and image.shape == (3, 4) and (image == i).all()
        assert half == np.float32(i / 2) and index == i and type(index) is int


def test_a_receiver_given_another_format_says_so(tmp_path):
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=3) as r:  # the default: 'arrays' only
        r.reset_state()
        proc = sender(tmp_path, "arrays(5)", r.addresses[0], fmt="pickle5")
        with pytest.warns(RuntimeWarning, match=rf"format 'pickle5' from {r.addresses[0]}, but this reader was "
                                                r"given format='arrays'.*only where every sender is trusted"):
            with pytest.raises(RemoteTimeout, match="5 messages were dropped; the last: received a datapoint in "
                                                    "format 'pickle5'"):
                next(iter(r))
        finish(proc)
    assert r.rejected == 5 and r.cnt1 == 0


@pytest.mark.parametrize("fmt", [None, "pickle5"])
def test_the_senders_exception_reaches_the_receiver(tmp_path, fmt):
    with receiver("tcp://127.0.0.1:*", format=fmt) as r:
        proc = sender(tmp_path, "failing(0)", r.addresses[0], fmt=fmt)
        it = iter(r)
        assert [next(it) for _ in range(3)] == [[0], [1], [2]]
        # pickle5 (trusted peers) rebuilds the exception; 'arrays' names its type in a WorkerError
        error = ZeroDivisionError if fmt == "pickle5" else WorkerError
        with pytest.raises(error, match="the sender's source failed") as info:
            next(it)
        code, out, err = finish(proc)
    assert fmt == "pickle5" or str(info.value).startswith("builtins.ZeroDivisionError: ")
    assert "traceback in the sender" in "\n".join(info.value.__notes__) and "in gen" in info.value.__notes__[-1]
    assert code != 0 and "ZeroDivisionError" in err


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_the_queue_is_bounded_and_the_sender_blocks(tmp_path, transport):
    log = tmp_path / "produced.txt"
    addr = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{tmp_path}/bounded.sock"
    with receiver(addr, hwm=2) as r:
        proc = sender(tmp_path, f"big(100, {str(log)!r})", r.addresses[0], hwm=2)
        counts = [0]
        deadline = time.monotonic() + 30  # a loaded machine fills the queues slowly: wait until it stops
        while time.monotonic() < deadline and not (counts[-1] and len(counts) > 2 and counts[-1] == counts[-2]):
            time.sleep(0.5)
            counts.append(len(log.read_text().split()) if log.exists() else 0)
        # 2 queued on each side, and what the kernel's socket buffers hold: far from all 100 MiB
        assert 0 < counts[-1] <= 20 and counts[-1] == counts[-2], counts
        got = take(r, 100)  # reading lets it go on, to the end
        code, out, err = finish(proc)
    assert code == 0 and "sent 100" in out, err
    assert [dp[1] for dp in got] == list(range(100)) and all(dp[0][0] == i % 251 for i, dp in enumerate(got))


def test_two_endpoints_two_senders(tmp_path):
    with RemoteDataZMQ("tcp://127.0.0.1:*", f"ipc://{tmp_path}/second.sock", timeout=20, format="pickle5") as r:
        r.reset_state()
        tcp, ipc = r.addresses
        one = sender(tmp_path, "arrays(10)", tcp, name="one.py")  # 'arrays': a pickle5 receiver takes both
        two = sender(tmp_path, "mixed(10)", ipc, fmt="pickle5", name="two.py")
        got = take(r, 20)
        assert finish(one)[0] == 0 and finish(two)[0] == 0
    assert r.cnt1 == 10 and r.cnt2 == 10
    assert sorted(dp[2] for dp in got if isinstance(dp, list)) == list(range(10))
    assert sorted(dp["id"] for dp in got if isinstance(dp, dict)) == list(range(10))


def test_receiver_timeout_and_misuse(tmp_path):
    r = RemoteDataZMQ(f"ipc://{tmp_path}/nobody.sock", timeout=0.2)
    with pytest.raises(Exception, match=r"reset_state\(\)"):
        iter(r)
    r.reset_state()
    t = time.monotonic()
    with pytest.raises(RemoteTimeout, match="no datapoint arrived"):
        next(iter(r))
    assert time.monotonic() - t < 2
    r.close()
    with pytest.raises(Exception, match="closed"):
        iter(r)
    with pytest.raises(PicPacValueError, match="zmq_ops"):
        RemoteDataZMQ("tcp://127.0.0.1:5555", format="zmq_ops")
