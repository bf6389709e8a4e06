"""How datapoints travel and are stored: serialisation formats that name themselves.

Every message (a ZMQ multipart message, or one stored value) begins with a head that records its
format: ``b"PPDF"``, a version byte, a kind byte (data or error) and the format's name. A reader
checks it, so the format is never guessed and never chosen by an environment variable.

Formats:

* ``"arrays"`` (the default, in files and over the network): a datapoint that is a list (or tuple) of
  NumPy arrays, numbers, bytes and strings, as a JSON header (dtypes and shapes) and one raw frame per
  component. Nothing is unpickled, and every header is checked before it is used, so it is safe to read.
* ``"pickle5"`` (an opt-in on both sides, for any picklable datapoint): pickle protocol 5; NumPy arrays
  (anything pickled as a ``PickleBuffer``) travel out of band, as raw frames after the pickle, so large
  arrays are not copied into it. Unpickling runs code, so a reader unpickles only when told to
  (``unpickle=True``, or a ZMQ receiver given ``format='pickle5'``): for files and peers you trust.

Decoded arrays are writable (each frame is copied once into memory of its own).
"""
from __future__ import annotations

import json
import math
import pickle
import struct
import traceback
from typing import Any

import numpy as np

from ...engine.processes import _pack, _unpack
from ...errors import FormatError, PicPacError, PicPacTypeError, PicPacValueError, WorkerError
from ...stores import msgpack_values

MAGIC = b"PPDF"
VERSION = 1
DATA, ERROR = 0, 1
FORMATS = ("pickle5", "arrays")
DEFAULT = "arrays"
MAX_HEADER_BYTES = 1 << 20
"""The largest JSON header (of an ``arrays`` datapoint or an error) a reader parses."""
MAX_DIMS = 32


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


def _from(where: str) -> str:
    return f" from {where}" if where else ""


def read_head(frame: Any, where: str = "") -> tuple[int, str, int]:
    """``(kind, format, head length)`` of a message's first frame."""
    b = memoryview(frame).cast("B")
    at = _from(where)
    if len(b) < 7 or bytes(b[:4]) != MAGIC:
        raise WireFormatError(f"a message{at} has no picpac head (b'PPDF'): it was not written by picpac's "
                              "dataflow serialisation (e.g. a tensorpack sender, or a different protocol)")
    version, kind, n = b[4], b[5], b[6]
    if version != VERSION:
        raise WireFormatError(f"a message{at} has serialisation version {version}; this picpac reads version "
                              f"{VERSION}: use the same picpac version on both sides")
    if kind not in (DATA, ERROR):
        raise WireFormatError(f"a message{at} has an unknown kind {kind} (0: data, 1: error)")
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


_TEXT = {bytes: "bytes", str: "str"}
"""Components carried as their bytes (a str as UTF-8), each a uint8 frame whose spec names its type."""


def _encode_arrays(dp: Any) -> list:
    if not isinstance(dp, (list, tuple)):
        raise PicPacTypeError(f"format='arrays' stores datapoints that are lists of arrays, numbers, bytes and "
                              f"strings, got a {type(dp).__name__}: use format='pickle5' (and unpickle=True to read "
                              "it back: trusted files and peers only)")
    specs, frames = [], []
    for k, value in enumerate(dp):
        text = _TEXT.get(type(value))
        if text is not None:
            raw = value.encode() if text == "str" else value
            specs.append({"dtype": "|u1", "shape": [len(raw)], "scalar": False, "generic": False, "as": text})
            frames.append(raw)
            continue
        scalar = isinstance(value, (bool, int, float, complex))
        if not (scalar or isinstance(value, (np.ndarray, np.generic))):
            raise PicPacTypeError(f"format='arrays' stores lists of arrays, numbers, bytes and strings; component {k} "
                                  f"is a {type(value).__name__}: use format='pickle5' (and unpickle=True to read it "
                                  "back: trusted files and peers only)")
        array = np.asarray(value, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype.hasobject or array.dtype.fields is not None:
            raise PicPacTypeError(f"format='arrays' cannot store component {k} of dtype {array.dtype}: use "
                                  "format='pickle5' (and unpickle=True to read it back: trusted files and peers only)")
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
def decode(frames: list, expect: str | None = None, where: str = "", *, unpickle: bool = False) -> tuple[int, Any]:
    """``(DATA, datapoint)`` or ``(ERROR, exception)`` from frames; ``expect`` (a format name) refuses others.

    Anything malformed (a missing frame, a header that is not what its format says, sizes that do
    not add up) is a :class:`WireFormatError` naming ``where``; a ``pickle5`` message is unpickled only
    with ``unpickle=True`` (unpickling runs code), and refused by a WireFormatError naming the opt-in otherwise.
    """
    at = _from(where)
    if not frames:
        raise WireFormatError(f"an empty message{at}")
    kind, fmt, skip = read_head(frames[0], where)
    if expect is not None and fmt != expect:
        trust = (" (pickle5 runs code when it is read: give a reader format='pickle5' only where every sender "
                 "is trusted)" if fmt == "pickle5" else "")
        raise WireFormatError(f"received a datapoint in format {fmt!r}{at}, but this reader was given "
                              f"format={expect!r}: give the sender and the reader the same format{trust}")
    if fmt not in FORMATS:
        raise WireFormatError(f"received a datapoint in format {fmt!r}{at}, which this picpac does not know "
                              f"(it knows {', '.join(FORMATS)})")
    if fmt == "pickle5" and not unpickle:
        raise WireFormatError(f"received a datapoint in format 'pickle5'{at}; unpickling runs code, so it is refused "
                              "unless asked for: unpickle=True (LMDBSerializer.load, PicPacData, TFRecordData, "
                              "NumpySerializer.load) or RemoteDataZMQ(format='pickle5'), for files and peers you trust")
    rest = frames[1:]
    if len(memoryview(frames[0])) > skip:  # a packed blob read as one frame: not expected here
        raise WireFormatError(f"a message head{at} is followed by stray bytes")
    if not rest or (kind == ERROR and len(rest) != 1):
        raise WireFormatError(f"{'a data' if kind == DATA else 'an error'} message{at} has {len(rest)} frames "
                              f"after its head; its format {fmt!r} needs {'one' if kind == ERROR else 'at least one'}")
    if kind == ERROR:
        if fmt == "pickle5":
            return ERROR, _unpack(pickle.loads(memoryview(rest[0])), f"the sender{f' at {where}' if where else ''}")
        return ERROR, _decode_error(rest[0], where)
    if fmt == "pickle5":
        try:
            return DATA, pickle.loads(memoryview(rest[0]), buffers=[bytearray(memoryview(f)) for f in rest[1:]])
        except pickle.UnpicklingError as exc:  # e.g. fewer out-of-band frames than the pickle refers to
            raise WireFormatError(f"a pickle5 message{at} with {len(rest) - 1} out-of-band frames cannot be "
                                  f"unpickled ({exc}): a frame is missing or the message is damaged; send every "
                                  "frame that codec.encode made") from None
    return DATA, _decode_arrays(rest, where)


def _json(frame: Any, what: str, where: str) -> Any:
    """A JSON header, refused (never a raw ValueError or RecursionError) when too large or malformed."""
    data = memoryview(frame).cast("B")
    if data.nbytes > MAX_HEADER_BYTES:
        raise WireFormatError(f"{what}{_from(where)} is {data.nbytes} bytes of JSON; at most {MAX_HEADER_BYTES}")
    try:
        return json.loads(bytes(data))
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise WireFormatError(f"{what}{_from(where)} is not valid JSON: {reason}") from None


def _decode_error(frame: Any, where: str) -> WorkerError:
    info = _json(frame, "an error message", where)
    if not (isinstance(info, dict) and all(isinstance(info.get(key), str) for key in ("type", "message", "traceback"))):
        raise WireFormatError(f"an error message{_from(where)} is malformed: it needs the strings 'type', "
                              "'message' and 'traceback'")
    exc = WorkerError(f"{info['type']}: {info['message']}")
    exc.add_note(f"traceback in the sender{f' at {where}' if where else ''}:\n{info['traceback'].rstrip()}")
    return exc


def _array_spec(spec: Any, k: int, where: str) -> tuple[np.dtype, tuple[int, ...], bool, bool]:
    """``(dtype, shape, scalar, generic)`` of component ``k``'s header entry, checked."""
    bad = f"a message{_from(where)}: component {k}"
    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str) or not isinstance(spec.get("shape"), list):
        raise WireFormatError(f"{bad} needs a 'dtype' string and a 'shape' list")
    try:
        dtype = np.dtype(spec["dtype"])
    except (TypeError, ValueError):
        raise WireFormatError(f"{bad} has an unknown dtype {spec['dtype'][:40]!r}") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize == 0:
        raise WireFormatError(f"{bad} has dtype {dtype}: the arrays format carries plain numeric arrays only")
    shape = spec["shape"]
    if len(shape) > MAX_DIMS or not all(type(n) is int and n >= 0 for n in shape):
        raise WireFormatError(f"{bad} has a bad shape: at most {MAX_DIMS} non-negative ints")
    scalar, generic = spec.get("scalar", False), spec.get("generic", False)
    if type(scalar) is not bool or type(generic) is not bool or ((scalar or generic) and shape):
        raise WireFormatError(f"{bad}: 'scalar' and 'generic' are booleans, true only for a 0-d shape")
    return dtype, tuple(shape), scalar, generic


def _decode_arrays(frames: list, where: str = "") -> Any:
    header = _json(frames[0], "the header of a message", where)
    if not (isinstance(header, dict) and header.get("container") in ("list", "tuple")
            and isinstance(header.get("arrays"), list)):
        raise WireFormatError(f"a message{_from(where)} has a malformed header: it needs 'container' ('list' or "
                              "'tuple') and 'arrays' (a list)")
    specs, data = header["arrays"], frames[1:]
    if len(specs) != len(data):
        raise WireFormatError(f"a message{_from(where)} declares {len(specs)} arrays but carries {len(data)} frames")
    out = []
    for k, (spec, frame) in enumerate(zip(specs, data)):
        dtype, shape, scalar, generic = _array_spec(spec, k, where)
        size = memoryview(frame).nbytes
        if math.prod(shape) * dtype.itemsize != size:
            raise WireFormatError(f"a message{_from(where)}: component {k} declares {dtype} {list(shape)} but its "
                                  f"frame has {size} bytes")
        text = spec.get("as")
        if text is not None:
            if text not in ("bytes", "str") or dtype != np.uint8 or len(shape) != 1:
                raise WireFormatError(f"a message{_from(where)}: component {k} is 'as' {str(text)[:20]!r}; bytes and "
                                      "str components are 1-d uint8")
            raw = bytes(memoryview(frame))
            try:
                out.append(raw if text == "bytes" else raw.decode())
            except UnicodeDecodeError:
                raise WireFormatError(f"a message{_from(where)}: component {k} is not valid UTF-8") from None
            continue
        array = np.frombuffer(bytearray(memoryview(frame)), dtype).reshape(shape)
        out.append(array.item() if scalar else array[()] if generic else array)
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
    if len(b) < skip + 4:
        raise WireFormatError(f"a stored datapoint of {len(b)} bytes ends inside its frame table: it is damaged")
    (count,) = struct.unpack_from("<I", b, skip)
    if len(b) < skip + 4 + 8 * count:  # checked before the table's struct is built
        raise WireFormatError(f"a stored datapoint of {len(b)} bytes claims {count} frames: it is damaged")
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


def loads(blob: Any, expect: str | None = None, *, unpickle: bool = False) -> Any:
    """The datapoint of a value made by :func:`dumps`; a tensorpack value (no picpac head) is read too. A pickle
    (picpac's ``pickle5`` format, or tensorpack's values since 0.10) is read only with ``unpickle`` (unpickling runs
    code: for files you trust); msgpack, tensorpack's default before, when the ``msgpack`` package is installed."""
    b = memoryview(blob).cast("B")
    if bytes(b[:4]) != MAGIC:
        if msgpack_values.is_pickle(b):
            if not unpickle:
                raise WireFormatError("a stored value is a pickle, as tensorpack's LMDBSerializer writes them since "
                                      "0.10; unpickling runs code, so it is refused unless asked for: "
                                      "LMDBSerializer.load(path, unpickle=True) for a file you trust")
            return pickle.loads(b)
        return _loads_tensorpack(b)
    kind, value = decode(unpack(b), expect, unpickle=unpickle)
    if kind == ERROR:
        raise value
    return value


def _loads_tensorpack(b: memoryview) -> Any:
    """tensorpack's msgpack serialisation (its default before 0.10; TENSORPACK_SERIALIZE=msgpack)."""
    try:
        return msgpack_values.loads(b)
    except FormatError as exc:
        raise WireFormatError(f"a stored value has no picpac head: {exc}") from None
