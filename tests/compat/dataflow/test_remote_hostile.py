"""RemoteDataZMQ against hostile peers: a second process sends crafted messages; nothing is unpickled by
default, every malformed message is dropped with a reason while the stream goes on, and memory is bounded."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from picpac.dataflow import DataFromList, RemoteDataZMQ, RemoteTimeout, codec, send_dataflow_zmq
from picpac.errors import PicPacTypeError, PicPacValueError

from dataflow_helpers import MALFORMED, RunsCode, head, header

zmq = pytest.importorskip("zmq")
TESTS = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]  # this module, helpers
DATA, ERROR = codec.DATA, codec.ERROR

# A process that sends given frames (read from a file the test wrote) to a PUSH socket, as any peer could.
RAW_SENDER = """
import pickle, sys, zmq
messages = pickle.load(open(sys.argv[2], "rb"))
ctx = zmq.Context()
sock = ctx.socket(zmq.PUSH)
sock.connect(sys.argv[1])
for frames in messages:
    sock.send_multipart(frames)
sock.close(linger=10000)
ctx.term()
print("sent", len(messages), flush=True)
"""


def good(value: int) -> list[bytes]:
    """A well-formed 'arrays' message holding [value] (an int64 scalar)."""
    return [head(DATA), header({"dtype": "<i8", "shape": [], "scalar": True, "generic": False}),
            np.int64(value).tobytes()]


def raw_sender(tmp_path: Path, addr: str, messages: list[list[bytes]]) -> subprocess.Popen:
    (tmp_path / "messages.pickle").write_bytes(pickle.dumps(messages))
    (tmp_path / "raw_sender.py").write_text(RAW_SENDER)
    return subprocess.Popen([sys.executable, str(tmp_path / "raw_sender.py"), addr, str(tmp_path / "messages.pickle")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 30) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return out


def test_a_default_receiver_never_unpickles(tmp_path):
    """Pickled data and pickled errors from a peer are refused unread; the stream goes on."""
    marker = tmp_path / "marker"
    boom = pickle.dumps(RunsCode(marker), protocol=5)
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=20) as r:
        r.reset_state()
        proc = raw_sender(tmp_path, r.addresses[0], [[head(DATA, "pickle5"), boom], [head(ERROR, "pickle5"), boom],
                                                     good(42)])
        with pytest.warns(RuntimeWarning, match="format 'pickle5'") as caught:
            assert next(iter(r)) == [42]
        finish(proc)
    assert not marker.exists()
    assert r.rejected == 2 and len([w for w in caught if "dropped a message" in str(w.message)]) == 2
    # the same bytes do run code where the user opted in: the test above is not vacuous
    assert codec.decode([head(DATA, "pickle5"), boom], None, unpickle=True) == (DATA, 0) and marker.exists()


def test_malformed_messages_from_a_peer_are_dropped_and_the_stream_goes_on(tmp_path):
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=20) as r:
        r.reset_state()
        addr = r.addresses[0]
        proc = raw_sender(tmp_path, addr, [good(1)] + list(MALFORMED.values()) + [good(2)])
        with pytest.warns(RuntimeWarning) as caught:
            it = iter(r)
            got = [next(it), next(it)]
        finish(proc)
    assert got == [[1], [2]] and r.cnt1 == 2
    assert r.rejected == len(MALFORMED)
    reasons = [str(w.message) for w in caught if "dropped a message" in str(w.message)]
    assert len(reasons) == len(MALFORMED) and all(addr in reason for reason in reasons)


def test_messages_over_max_message_bytes_are_never_delivered(tmp_path):
    """picpac drops a message whose frames, each under the limit, add up to more; a single frame over it
    never arrives either (ZMQ drops it and the sender's connection, with what that connection queued)."""
    limit = 1 << 20
    two_frames = [head(DATA), header({"dtype": "|u1", "shape": [limit // 2 + 1]}, {"dtype": "|u1", "shape": [limit // 2]}),
                  bytes(limit // 2 + 1), bytes(limit // 2)]
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=20, max_message_bytes=limit) as r:
        r.reset_state()
        proc = raw_sender(tmp_path, r.addresses[0], [good(1), two_frames, good(2)])
        with pytest.warns(RuntimeWarning, match=f"at most max_message_bytes={limit}"):
            it = iter(r)
            assert [next(it), next(it)] == [[1], [2]]
        finish(proc)
    assert r.rejected == 1
    one_frame = [head(DATA), header({"dtype": "|u1", "shape": [2 * limit]}), bytes(2 * limit)]
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=3, max_message_bytes=limit) as r:
        r.reset_state()
        proc = raw_sender(tmp_path, r.addresses[0], [good(3), one_frame])
        it = iter(r)
        assert next(it) == [3]
        with pytest.raises(RemoteTimeout):
            next(it)
        proc.kill()
        proc.communicate()


# A receiver in a fresh interpreter that does not read for a while, then reads 100 messages: its RSS is this test's
# alone, and malloc's fixed mmap threshold (the environment) gives freed buffers back at once, so that the growth
# is what the receiver holds, not what earlier allocations left in the heap.
IDLE_RECEIVER = """
import json, os, sys, time
from picpac.dataflow import RemoteDataZMQ

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

mib = 1 << 20
with RemoteDataZMQ("tcp://127.0.0.1:*", hwm=3, timeout=20, max_queued_bytes=3 * (mib + 4096)) as r:
    r.reset_state()
    before = rss()
    print(r.addresses[0], flush=True)
    sys.stdin.readline()  # the sender has started
    time.sleep(2)
    grown = rss() - before
    it = iter(r)
    got = [int(next(it)[1]) for _ in range(100)]  # reading lets the sender go on, to the end
    print(json.dumps({"grown": grown, "got": got, "rejected": r.rejected}), flush=True)
"""


def test_an_idle_receiver_holds_a_bounded_number_of_bytes(tmp_path):
    """A sender pushing 100 MiB at a receiver that does not read: the receiver queues at most
    max_queued_bytes (hwm messages of max_queued_bytes // hwm), however much the sender has."""
    mib = 1 << 20
    messages = [[bytes(f) for f in codec.encode([np.full(mib, i % 251, np.uint8), i], "arrays")] for i in range(100)]
    errors = tmp_path / "receiver.err"
    sender = None
    with open(errors, "w") as stderr:
        receiver = subprocess.Popen([sys.executable, "-c", IDLE_RECEIVER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)})
    try:
        address = receiver.stdout.readline().strip()
        assert address, f"the receiver ended before it listened: {errors.read_text()[-2000:]}"
        sender = raw_sender(tmp_path, address, messages)
        receiver.stdin.write("go\n")
        receiver.stdin.flush()
        line = receiver.stdout.readline()
        assert line, f"the receiver ended without its report: {errors.read_text()[-2000:]}"
        report = json.loads(line)
        finish(sender)
    finally:  # a sender left behind blocks for ever holding its 100 MiB
        for proc in (sender, receiver):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert report["grown"] < 16 * mib, f"an idle receiver grew by {report['grown'] / mib:.0f} MiB"
    assert report["got"] == list(range(100)) and report["rejected"] == 0


def test_the_default_sender_sends_arrays_and_says_how_to_send_anything_else(tmp_path):
    with RemoteDataZMQ("tcp://127.0.0.1:*", timeout=20) as r:
        r.reset_state()
        send_dataflow_zmq(DataFromList([[np.arange(3), 7]], shuffle=False), r.addresses[0], epochs=1, progress=False)
        assert next(iter(r))[1] == 7 and r.rejected == 0
        with pytest.raises(PicPacTypeError, match="use format='pickle5'"):
            send_dataflow_zmq(DataFromList([{"a": 1}], shuffle=False), r.addresses[0], epochs=1, progress=False)


def test_limits_are_checked():
    with pytest.raises(PicPacValueError, match="max_message_bytes"):
        RemoteDataZMQ("tcp://127.0.0.1:*", max_message_bytes=0)
    with pytest.raises(PicPacValueError, match="could queue more than max_queued_bytes"):
        RemoteDataZMQ("tcp://127.0.0.1:*", hwm=50, max_message_bytes=256 << 20)
    assert RemoteDataZMQ("tcp://127.0.0.1:*", hwm=4, max_message_bytes=256 << 20)._max_message == 256 << 20
    with pytest.raises(PicPacValueError, match="127.0.0.1"):
        RemoteDataZMQ("")
