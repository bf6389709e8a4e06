"""How datapoints travel and are stored: serialisation formats that name themselves.

Every message (a ZMQ multipart message, or one stored value) begins with a head that records its
format: ``b"PPDF"``, a version byte, a kind byte (data or error) and the format's name. A reader
checks it, so the format is never guessed and never chosen by an environment variable.

Formats:

* ``"pickle5"`` (the default): pickle protocol 5; NumPy arrays (anything pickled as a ``PickleBuffer``)
  travel out of band, as raw frames after the pickle, so large arrays are not copied into it. Only
  read it from peers you trust: unpickling runs code.
* ``"arrays"``: a datapoint that is a list (or tuple) of NumPy arrays and numbers, as a JSON header
  (dtypes and shapes) and one raw frame per array. Nothing is unpickled, so it is safe to receive.

Decoded arrays are writable (each frame is copied once into memory of its own).
"""
from __future__ import annotations

import json
import pickle
import struct
import traceback
from typing import Any

import numpy as np

from ..engine.processes import _pack, _unpack
from ..errors import PicPacError, PicPacTypeError, PicPacValueError, WorkerError

MAGIC = b"PPDF"
VERSION = 1
DATA, ERROR = 0, 1
FORMATS = ("pickle5", "arrays")
DEFAULT = "pickle5"


class WireFormatError(PicPacError, ValueError):
    """Bytes that are not what the reader expects: another format, another version, or no picpac head."""


def check_format(name: str | None, who: str = "format") -> str:
    """The format's name (``None``: the default); a clear error for an unknown one."""
    if name is None:
        return DEFAULT
    if name in ("zmq_op", "zmq_ops"):
        raise PicPacValueError(f"{who}={name!r} (tensorpack's zmq_ops layout) is not supported: format='arrays' "
                               "sends lists of arrays without pickle")
    if name not in FORMATS:
        raise PicPacValueError(f"{who} must be one of {', '.join(map(repr, FORMATS))} (or None for "
                               f"{DEFAULT!r}), got {name!r}")
    return name


def _head(kind: int, fmt: str) -> bytes:
    name = fmt.encode()
    return MAGIC + bytes((VERSION, kind, len(name))) + name


def read_head(frame: Any, where: str = "") -> tuple[int, str, int]:
    """``(kind, format, head length)`` of a message's first frame."""
    b = memoryview(frame).cast("B")
    at = f" from {where}" if where else ""
    if len(b) < 7 or bytes(b[:4]) != MAGIC:
        raise WireFormatError(f"a message{at} has no picpac head (b'PPDF'): it was not written by picpac's "
                              "dataflow serialisation (e.g. a tensorpack sender, or a different protocol)")
    version, kind, n = b[4], b[5], b[6]
    if version != VERSION:
        raise WireFormatError(f"a message{at} has serialisation version {version}; this picpac reads version "
                              f"{VERSION}: use the same picpac version on both sides")
    return kind, bytes(b[7:7 + n]).decode(errors="replace"), 7 + n


# -- encoding ------------------------------------------------------------------------------------------
def encode(dp: Any, fmt: str = DEFAULT) -> list:
    """A datapoint as frames: ``[head, body, *buffers]``."""
    if fmt == "pickle5":
        buffers: list = []
        body = pickle.dumps(dp, protocol=5, buffer_callback=buffers.append)
        return [_head(DATA, fmt), body] + [b.raw() for b in buffers]
    if fmt == "arrays":
        return [_head(DATA, fmt)] + _encode_arrays(dp)
    raise PicPacValueError(f"unknown format {fmt!r}")


def _encode_arrays(dp: Any) -> list:
    if not isinstance(dp, (list, tuple)):
        raise PicPacTypeError(f"format='arrays' sends datapoints that are lists of arrays and numbers, got a "
                              f"{type(dp).__name__}: use format='pickle5'")
    specs, frames = [], []
    for k, value in enumerate(dp):
        scalar = isinstance(value, (bool, int, float, complex))
        if not (scalar or isinstance(value, (np.ndarray, np.generic))):
            raise PicPacTypeError(f"format='arrays' sends lists of arrays and numbers; component {k} is a "
                                  f"{type(value).__name__}: use format='pickle5'")
        array = np.asarray(value, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype.hasobject or array.dtype.fields is not None:
            raise PicPacTypeError(f"format='arrays' cannot send component {k} of dtype {array.dtype}: use "
                                  "format='pickle5'")
        specs.append({"dtype": array.dtype.str, "shape": list(array.shape), "scalar": scalar,
                      "generic": isinstance(value, np.generic)})
        frames.append(memoryview(array.reshape(-1).view(np.uint8)) if array.size else b"")
    header = json.dumps({"container": "tuple" if isinstance(dp, tuple) else "list", "arrays": specs})
    return [header.encode()] + frames


def encode_error(exc: BaseException, fmt: str = DEFAULT) -> list:
    """An exception as frames, to tell the reader why the data stopped."""
    if fmt == "pickle5":
        return [_head(ERROR, fmt), pickle.dumps(_pack(exc), protocol=5)]
    text = "".join(traceback.format_exception(exc))
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return [_head(ERROR, fmt), json.dumps({"type": kind, "message": str(exc), "traceback": text}).encode()]


# -- decoding ------------------------------------------------------------------------------------------
def decode(frames: list, expect: str | None = None, where: str = "") -> tuple[int, Any]:
    """``(DATA, datapoint)`` or ``(ERROR, exception)`` from frames; ``expect`` (a format name) refuses others."""
    kind, fmt, skip = read_head(frames[0], where)
    if expect is not None and fmt != expect:
        raise WireFormatError(f"received a datapoint in format {fmt!r}{f' from {where}' if where else ''}, but this "
                              f"reader was given format={expect!r}: give the sender and the reader the same format")
    if fmt not in FORMATS:
        raise WireFormatError(f"received a datapoint in format {fmt!r}, which this picpac does not know "
                              f"(it knows {', '.join(FORMATS)})")
    rest = frames[1:]
    if len(memoryview(frames[0])) > skip:  # a packed blob read as one frame: not expected here
        raise WireFormatError("a message head is followed by stray bytes")
    if kind == ERROR:
        body = bytes(memoryview(rest[0]))
        if fmt == "pickle5":
            return ERROR, _unpack(pickle.loads(body), f"the sender{f' at {where}' if where else ''}")
        info = json.loads(body)
        exc = WorkerError(f"{info['type']}: {info['message']}")
        exc.add_note(f"traceback in the sender{f' at {where}' if where else ''}:\n{info['traceback'].rstrip()}")
        return ERROR, exc
    if fmt == "pickle5":
        return DATA, pickle.loads(memoryview(rest[0]), buffers=[bytearray(memoryview(f)) for f in rest[1:]])
    return DATA, _decode_arrays(rest)


def _decode_arrays(frames: list) -> Any:
    header = json.loads(bytes(memoryview(frames[0])))
    out = []
    for spec, frame in zip(header["arrays"], frames[1:]):
        dtype = np.dtype(spec["dtype"])
        array = np.frombuffer(bytearray(memoryview(frame)), dtype).reshape(tuple(spec["shape"]))
        out.append(array.item() if spec["scalar"] else array[()] if spec.get("generic") else array)
    return tuple(out) if header["container"] == "tuple" else out


# -- one blob, for storage -----------------------------------------------------------------------------
def pack(frames: list) -> bytes:
    """Frames as one bytes value: the head, the frame count and lengths, then the frames."""
    views = [memoryview(f).cast("B") for f in frames[1:]]
    parts = [bytes(frames[0]), struct.pack(f"<I{len(views)}Q", len(views), *(v.nbytes for v in views))]
    parts += views
    return b"".join(parts)


def unpack(blob: Any) -> list:
    """The frames of a blob made by :func:`pack` (views into it)."""
    b = memoryview(blob).cast("B")
    _, _, skip = read_head(b)
    (count,) = struct.unpack_from("<I", b, skip)
    sizes = struct.unpack_from(f"<{count}Q", b, skip + 4)
    at = skip + 4 + 8 * count
    frames = [b[:skip]]
    for size in sizes:
        frames.append(b[at:at + size])
        at += size
    if at != len(b):
        raise WireFormatError(f"a stored datapoint is {len(b)} bytes, its frames say {at}: it is damaged")
    return frames


def dumps(dp: Any, fmt: str | None = None) -> bytes:
    """A datapoint as one self-describing bytes value."""
    return pack(encode(dp, check_format(fmt)))


def loads(blob: Any, expect: str | None = None) -> Any:
    """The datapoint of a value made by :func:`dumps`; a tensorpack value (msgpack, no picpac head) is read
    too when the ``msgpack`` package is installed."""
    b = memoryview(blob).cast("B")
    if bytes(b[:4]) != MAGIC:
        return _loads_tensorpack(b)
    kind, value = decode(unpack(b), expect)
    if kind == ERROR:
        raise value
    return value


def _loads_tensorpack(b: memoryview) -> Any:
    """tensorpack's default serialisation: msgpack with msgpack-numpy's array encoding."""
    try:
        import msgpack
    except ImportError:
        raise WireFormatError("a stored value has no picpac head: it looks like tensorpack's msgpack "
                              "serialisation, which needs `pip install msgpack` to read") from None

    def hook(obj: dict) -> Any:
        nd = obj.get(b"nd", obj.get("nd"))
        if nd is None:
            return obj
        get = lambda key: obj.get(key.encode(), obj.get(key))  # noqa: E731
        dtype = np.dtype(get("type").decode() if isinstance(get("type"), bytes) else get("type"))
        data = get("data")
        if nd:
            return np.frombuffer(bytearray(data), dtype).reshape(get("shape"))
        return np.frombuffer(bytearray(data), dtype)[0]

    try:
        return msgpack.unpackb(bytes(b), raw=False, object_hook=hook, strict_map_key=False,
                               max_bin_len=2**31 - 1)
    except Exception as exc:
        raise WireFormatError(f"a stored value has no picpac head and is not tensorpack's msgpack either: "
                              f"{exc}") from None
