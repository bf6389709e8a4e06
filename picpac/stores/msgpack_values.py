"""tensorpack's msgpack values: its serialisation before 0.10 (and with ``TENSORPACK_SERIALIZE=msgpack``), msgpack
with msgpack-numpy's encoding of arrays. Read without running code (unlike its pickles, since 0.10)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FormatError


def is_pickle(value: Any) -> bool:
    """Whether ``value`` starts as a pickle does: the PROTO opcode, protocols 2 to 5 (tensorpack's since 0.10)."""
    b = memoryview(value).cast("B")
    return len(b) > 2 and b[0] == 0x80 and 2 <= b[1] <= 5


def loads(value: Any) -> Any:
    """The datapoint of a msgpack value; FormatError (its message says what the value is) when it is none, or when
    the ``msgpack`` package is missing."""
    try:
        import msgpack
    except ImportError:
        raise FormatError("it looks like tensorpack's msgpack serialisation, which needs `pip install msgpack` to "
                          "read") from None

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
        return msgpack.unpackb(bytes(value), raw=False, object_hook=hook, strict_map_key=False,
                               max_bin_len=2**31 - 1)
    except Exception as exc:
        raise FormatError(f"it is not tensorpack's msgpack either: {exc}") from None
