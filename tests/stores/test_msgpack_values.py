"""picpac.stores.msgpack_values: tensorpack's msgpack datapoints (msgpack-numpy's arrays and scalars) read without
running code; a pickle is told apart by its first bytes; what is neither, or msgpack missing, is a FormatError."""
from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from picpac.errors import FormatError
from picpac.stores import msgpack_values

msgpack = pytest.importorskip("msgpack")


def packed(value) -> bytes:
    """``value`` as tensorpack's msgpack serialisation writes it (msgpack-numpy's layout of arrays and scalars)."""
    def encode(obj):
        if isinstance(obj, np.ndarray):
            return {b"nd": True, b"type": obj.dtype.str, b"kind": b"", b"shape": obj.shape, b"data": obj.tobytes()}
        if isinstance(obj, np.generic):
            return {b"nd": False, b"type": obj.dtype.str, b"kind": b"", b"data": obj.tobytes()}
        raise TypeError(type(obj))
    return msgpack.dumps(value, use_bin_type=True, default=encode)


def test_a_datapoint_of_bytes_arrays_and_numbers_reads_back():
    image, array, label, scalar = msgpack_values.loads(packed([b"\xff\xd8jpeg", np.arange(6, dtype=np.int16)
                                                                .reshape(2, 3), 3, np.float32(0.5)]))
    assert image == b"\xff\xd8jpeg" and label == 3 and scalar == np.float32(0.5) and scalar.dtype == np.float32
    assert array.dtype == np.int16 and array.tolist() == [[0, 1, 2], [3, 4, 5]] and array.flags.writeable


def test_pickles_are_told_apart_by_their_first_bytes():
    for protocol in (2, 3, 4, 5):
        assert msgpack_values.is_pickle(pickle.dumps([b"x", 1], protocol=protocol))
    assert not msgpack_values.is_pickle(packed([b"x", 1])) and not msgpack_values.is_pickle(b"\x80")
    assert not msgpack_values.is_pickle(b"") and not msgpack_values.is_pickle(b"\x80\x06\x95")


def test_what_is_not_msgpack_or_without_msgpack_is_a_format_error(monkeypatch):
    with pytest.raises(FormatError, match=r"^it is not tensorpack's msgpack either: "):
        msgpack_values.loads(b"\xc1 never valid")
    monkeypatch.setitem(sys.modules, "msgpack", None)
    with pytest.raises(FormatError, match=r"needs `pip install msgpack` to read$"):
        msgpack_values.loads(packed([1]))
