"""Remote DataFlows over ZeroMQ: one process sends a flow, another receives it.

``send_dataflow_zmq`` pushes the datapoints of a flow to a ZMQ PUSH socket; ``RemoteDataZMQ`` pulls them
from one or two PULL sockets (many senders may feed one receiver). Both sides bound their queues by the
high-water mark ``hwm``, so a sender whose receiver does not read blocks instead of filling memory.

Every peer may be hostile. Both sides use the pickle-free ``'arrays'`` format unless told otherwise;
``format='pickle5'`` is an opt-in for trusted peers only, since unpickling runs code. The receiver
checks every message before it uses it (:mod:`.codec`). A message that is malformed, in another
format, or over ``max_message_bytes`` is dropped with a warning that says why, and the stream goes
on. Its queue holds at most ``max_queued_bytes`` per sender. An exception in the sender's
flow is sent to the receiver, which raises it.

Addresses are ZMQ endpoints: ``tcp://127.0.0.1:5555``, ``ipc:///tmp/name`` (``ipc://@name`` is an
abstract socket on Linux). By default the receiver binds and the senders connect. Bind loopback
(``127.0.0.1``) unless other machines must reach the receiver.
"""
from __future__ import annotations

import errno
import itertools
import warnings
from collections.abc import Iterator
from typing import Any

from ...errors import PicPacError, PicPacValueError
from .base import DataFlow, DataFlowError, DataFlowReentrantGuard, DataFlowTerminated, optional_import
from .codec import ERROR, WireFormatError, check_format, decode, encode, encode_error

__all__ = ["send_dataflow_zmq", "RemoteDataZMQ", "RemoteTimeout"]

NETWORK_FORMAT = "arrays"
"""What crosses the network unless both sides opt in to ``'pickle5'``: nothing a receiver unpickles."""
MAX_QUEUED_BYTES = 1 << 30


def _network_format(format: str | None) -> str:
    return NETWORK_FORMAT if format is None else check_format(format)


class RemoteTimeout(PicPacError, TimeoutError):
    """No datapoint arrived within the receiver's ``timeout``."""


def _zmq() -> Any:
    return optional_import("zmq", "send_dataflow_zmq / RemoteDataZMQ", "pyzmq", "zmq")


def send_dataflow_zmq(df: DataFlow, addr: str, hwm: int = 50, format: str | None = None, bind: bool = False, *,
                      epochs: int | None = None, progress: bool = True, linger: float = 10.0) -> int:
    """Reset ``df`` and send its datapoints to ``addr`` on a PUSH socket (connecting, or ``bind=True``).

    It loops over ``df`` forever, as tensorpack's does, unless ``epochs`` says how many passes to send;
    then it returns the number of datapoints sent, after waiting up to ``linger`` seconds for the queued
    ones to leave. ``format`` is ``'arrays'`` (the default, ``None``: lists of arrays and numbers) or
    ``'pickle5'`` (any picklable datapoint; trusted peers only: the receiver must opt in too, as
    unpickling runs code); each message records it. ``hwm`` bounds the messages queued: when it is
    reached, sending blocks. An exception in ``df`` is sent to the receiver, then raised here.
    """
    zmq = _zmq()
    fmt = _network_format(format)
    if int(hwm) < 1:
        raise PicPacValueError(f"hwm must be >= 1, got {hwm}")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.set_hwm(int(hwm))
    wait_ms = 0
    sent = 0
    try:
        (sock.bind if bind else sock.connect)(addr)
        df.reset_state()
        from tqdm import tqdm
        passes = itertools.count() if epochs is None else range(int(epochs))
        with tqdm(desc=f"sending to {addr} ({fmt})", disable=not progress, leave=True, smoothing=0.8) as bar:
            for _ in passes:
                for dp in df:
                    sock.send_multipart(encode(dp, fmt))  # copied: the flow may reuse its arrays
                    sent += 1
                    bar.update()
        wait_ms = int(linger * 1000)
        return sent
    except Exception as exc:
        try:  # tell the receiver why the data stops, without waiting for ever on a full queue
            sock.setsockopt(zmq.SNDTIMEO, int(linger * 1000))
            sock.send_multipart(encode_error(exc, fmt))
            wait_ms = int(linger * 1000)
        except Exception:
            pass
        raise
    finally:
        sock.close(linger=wait_ms)
        ctx.term()


class RemoteDataZMQ(DataFlow):
    """Datapoints received on ZMQ PULL socket(s) at ``addr1`` (and ``addr2``: e.g. one IPC and one TCP
    endpoint), forever. ``cnt1`` / ``cnt2`` count the datapoints from each.

    ``bind=True`` (the default) binds the endpoints and senders connect. The sockets are made in
    ``reset_state()`` and kept until ``close()`` (tensorpack makes them anew in every ``__iter__``,
    dropping what was queued). ``timeout`` (seconds) raises :class:`RemoteTimeout` when nothing arrives
    for that long; ``None`` waits for ever.

    ``format`` says what is accepted: ``'arrays'`` only, by default (``None``); ``'pickle5'``, an
    opt-in for trusted peers only since unpickling runs code, accepts both formats.

    Memory is bounded per sender: at most ``hwm`` messages of at most ``max_message_bytes`` are
    queued, and ``hwm * max_message_bytes`` may not exceed ``max_queued_bytes`` (1 GiB by default;
    ``max_message_bytes`` defaults to ``max_queued_bytes // hwm``, 20 MiB for ``hwm=50``). On TCP,
    a frame over ``max_message_bytes`` makes ZMQ drop the message and the sender's connection (the
    sender reconnects). A message that is malformed, in another format, or larger in all than
    ``max_message_bytes`` is dropped with a ``RuntimeWarning`` naming its sender and the reason,
    and counted in ``rejected``; the stream goes on.
    """

    def __init__(self, addr1: str, addr2: str | None = None, hwm: int = 50, bind: bool = True, *,
                 format: str | None = None, timeout: float | None = None,
                 max_message_bytes: int | None = None, max_queued_bytes: int = MAX_QUEUED_BYTES):
        if not addr1:
            raise PicPacValueError("RemoteDataZMQ needs an address, e.g. 'tcp://127.0.0.1:5555' or 'ipc://@name'")
        hwm, max_queued_bytes = int(hwm), int(max_queued_bytes)
        max_message_bytes = max_queued_bytes // max(hwm, 1) if max_message_bytes is None else int(max_message_bytes)
        if hwm < 1 or max_message_bytes < 1:
            raise PicPacValueError(f"hwm and max_message_bytes must be >= 1, got {hwm} and {max_message_bytes}")
        if hwm * max_message_bytes > max_queued_bytes:
            raise PicPacValueError(f"hwm={hwm} messages of max_message_bytes={max_message_bytes} could queue more than "
                                   f"max_queued_bytes={max_queued_bytes}: lower hwm, or raise max_queued_bytes")
        self._addrs = [addr1] + ([addr2] if addr2 else [])
        self._max_message = max_message_bytes
        self._hwm = hwm
        self._bind = bool(bind)
        self._format = _network_format(format)
        self._timeout = timeout
        self.cnt1 = self.cnt2 = 0
        self.rejected = 0
        """Messages dropped as malformed, in another format or too large."""
        self._last_rejection = ""
        self._ctx: Any = None
        self._socks: list = []
        self._closed = False
        self._guard = DataFlowReentrantGuard("RemoteDataZMQ")

    def reset_state(self) -> None:
        if self._closed:
            raise DataFlowError("RemoteDataZMQ is closed: make a new one")
        self.cnt1 = self.cnt2 = 0
        if self._ctx is not None:
            return
        zmq = _zmq()
        self._ctx = zmq.Context()
        try:
            for addr in self._addrs:
                sock = self._ctx.socket(zmq.PULL)
                self._socks.append(sock)
                sock.set_hwm(self._hwm)
                sock.setsockopt(zmq.MAXMSGSIZE, self._max_message)
                (sock.bind if self._bind else sock.connect)(addr)
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> list[str]:
        """The endpoints as bound (a ``tcp://...:*`` address shows the port the system chose)."""
        if not self._socks:
            return list(self._addrs)
        zmq = _zmq()
        return [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self._socks]

    def __iter__(self) -> Iterator:
        if self._closed:
            raise DataFlowError("RemoteDataZMQ is closed: make a new one")
        self._need_reset(self._ctx is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        zmq = _zmq()
        with self._guard:
            poller = zmq.Poller()
            for sock in self._socks:
                poller.register(sock, zmq.POLLIN)
            timeout = None if self._timeout is None else int(self._timeout * 1000)
            where = self.addresses
            try:
                while True:
                    events = dict(poller.poll(timeout))
                    if not events:
                        dropped = (f" ({self.rejected} messages were dropped; the last: {self._last_rejection})"
                                   if self.rejected else "")
                        raise RemoteTimeout(f"RemoteDataZMQ: no datapoint arrived on {', '.join(self._addrs)} "
                                            f"within {self._timeout} s{dropped}")
                    for k, sock in enumerate(self._socks):
                        if sock not in events:
                            continue
                        frames = sock.recv_multipart(copy=False)
                        try:
                            kind, value = self._decode(frames, where[k])
                        except WireFormatError as exc:
                            self._reject(exc)
                            continue
                        if kind == ERROR:
                            raise value
                        if k == 0:
                            self.cnt1 += 1
                        else:
                            self.cnt2 += 1
                        yield value
            except zmq.ContextTerminated:
                raise DataFlowTerminated("RemoteDataZMQ: its ZMQ context was terminated") from None
            except zmq.ZMQError as exc:
                if exc.errno == errno.ENOTSOCK:
                    raise DataFlowTerminated("RemoteDataZMQ: its socket was closed") from None
                raise

    def _decode(self, frames: list, where: str) -> tuple[int, Any]:
        size = sum(memoryview(f).nbytes for f in frames)
        if size > self._max_message:
            raise WireFormatError(f"a message from {where} has {size} bytes in {len(frames)} frames; this "
                                  f"receiver takes at most max_message_bytes={self._max_message}")
        trusted = self._format == "pickle5"  # the receiver's opt-in: it takes both formats and unpickles
        return decode(frames, None if trusted else self._format, where=where, unpickle=trusted)

    def _reject(self, exc: WireFormatError) -> None:
        self.rejected += 1
        self._last_rejection = str(exc)
        warnings.warn(f"RemoteDataZMQ dropped a message: {exc}", RuntimeWarning, stacklevel=2)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def close(self) -> None:
        self._closed = True
        socks, self._socks = self._socks, []
        for sock in socks:
            sock.close(linger=0)
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.term()
