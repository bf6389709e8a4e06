"""picpac/compat/dataflow/codec.py on its own: the head every message starts with, the two formats' frames,
errors as messages, one-blob storage, tensorpack's msgpack values, and what each malformed input is refused with."""
from __future__ import annotations

import json
import struct
import sys

import numpy as np
import pytest

from picpac.dataflow import WireFormatError, codec
from picpac.errors import PicPacError, PicPacTypeError, PicPacValueError, WorkerError

from dataflow_helpers import MALFORMED, head

# -- the format, on its own -----------------------------------------------------------------------------------
def test_codec_records_its_format():
    dp = [np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2], {"a": b"bytes"}, 3]
    blob = codec.dumps(dp, "pickle5")
    assert blob[:4] == b"PPDF" and b"pickle5" in blob[:16]
    back = codec.loads(blob, unpickle=True)
    assert np.array_equal(back[0], dp[0]) and back[1:] == dp[1:] and back[0].flags.writeable
    arr = [np.zeros((2, 2), np.int16), 1.5, True]
    back = codec.loads(codec.dumps(arr, "arrays"))
    assert back[0].dtype == np.int16 and back[1:] == [1.5, True]
    every = [np.array([True, False]), np.array([1 + 2j]), np.float16([1.5, 2]), np.array(3.0), np.zeros((0, 3)),
             np.arange(6).reshape(2, 3).T, np.array([1, 2], ">i4"), np.float32(2.5), 3, 2.5, True]
    for fmt in codec.FORMATS:  # dtypes, byte order, 0-d, empty, non-contiguous, scalars: all come back as they were
        back = codec.loads(codec.dumps(every, fmt), unpickle=True)
        assert all(type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype and np.shape(a) == np.shape(b)
                   and np.array_equal(a, b) for a, b in zip(every, back)), fmt
    with pytest.raises(WireFormatError, match="format 'arrays'.*given format='pickle5'"):
        codec.loads(codec.dumps(arr, "arrays"), expect="pickle5")
    with pytest.raises(PicPacTypeError, match=r"component 1 is a dict: use format='pickle5' \(and unpickle=True"):
        codec.dumps([np.zeros(2), {"a": 1}], "arrays")
    damaged = bytearray(blob)
    damaged[4] = 99
    with pytest.raises(WireFormatError, match="version 99"):
        codec.loads(bytes(damaged), unpickle=True)
    with pytest.raises(PicPacValueError, match="must be one of"):
        codec.dumps(dp, "json")


@pytest.mark.parametrize("name", MALFORMED)
def test_the_codec_refuses_each_malformed_message_with_a_wire_format_error(name):
    with pytest.raises(WireFormatError, match="from peer-7"):
        codec.decode(MALFORMED[name], "arrays", where="peer-7")



# -- formats and the head -----------------------------------------------------------------------------------
def test_check_format_names_the_choices():
    assert codec.check_format(None) == "arrays" == codec.DEFAULT and codec.check_format("pickle5") == "pickle5"
    with pytest.raises(PicPacValueError, match=r"^format must be one of 'pickle5', 'arrays' \(or None for "
                                               r"'arrays'\), got 'json'$"):
        codec.check_format("json")
    with pytest.raises(PicPacValueError, match=r"^RemoteDataZMQ format='zmq_op' \(tensorpack's zmq_ops layout\) is "
                                               r"not supported: format='arrays' sends lists of arrays without pickle$"):
        codec.check_format("zmq_op", "RemoteDataZMQ format")
    with pytest.raises(PicPacValueError, match=r"^unknown format 'json'$"):
        codec.encode([1], "json")


def test_every_message_starts_with_magic_version_kind_and_format():
    assert codec.encode([1], "arrays")[0] == b"PPDF\x01\x00\x06arrays"
    assert codec.encode([1], "pickle5")[0] == b"PPDF\x01\x00\x07pickle5"
    assert codec.encode_error(KeyError("k"), "arrays")[0] == b"PPDF\x01\x01\x06arrays"
    assert codec.read_head(b"PPDF\x01\x01\x07pickle5") == (codec.ERROR, "pickle5", 14)
    assert codec.read_head(memoryview(b"PPDF\x01\x00\x06arraysXYZ")) == (codec.DATA, "arrays", 13)
    for frame in (b"PPDF\x01\x00", b"ppdf\x01\x00\x00", b""):  # short, or another magic
        with pytest.raises(WireFormatError, match=r"^a message from tcp://10.0.0.2:5 has no picpac head \(b'PPDF'\): it "
                                                  r"was not written by picpac's dataflow serialisation"):
            codec.read_head(frame, "tcp://10.0.0.2:5")
    with pytest.raises(WireFormatError, match=r"^a message has serialisation version 2; this picpac reads version 1: "
                                              r"use the same picpac version on both sides$"):
        codec.read_head(head(codec.DATA, version=2))
    with pytest.raises(WireFormatError, match=r"^a message has an unknown kind 5 \(0: data, 1: error\)$"):
        codec.read_head(head(5))
    assert isinstance(WireFormatError("x"), PicPacError) and isinstance(WireFormatError("x"), ValueError)


def test_the_arrays_format_is_a_json_header_and_one_raw_frame_per_array():
    image = np.arange(6, dtype="<i4").reshape(2, 3)
    frames = codec.encode((image, 2.5, np.float32(1.5), True), "arrays")
    assert json.loads(frames[1]) == {"container": "tuple", "arrays": [
        {"dtype": "<i4", "shape": [2, 3], "scalar": False, "generic": False},
        {"dtype": "<f8", "shape": [], "scalar": True, "generic": False},
        {"dtype": "<f4", "shape": [], "scalar": False, "generic": True},
        {"dtype": "|b1", "shape": [], "scalar": True, "generic": False}]}
    assert [bytes(f) for f in frames[2:]] == [image.tobytes(), struct.pack("<d", 2.5), struct.pack("<f", 1.5), b"\x01"]
    kind, back = codec.decode(frames, "arrays")
    assert kind == codec.DATA and type(back) is tuple and back[1:] == (2.5, np.float32(1.5), True)
    assert type(back[1]) is float and type(back[2]) is np.float32 and type(back[3]) is bool
    assert np.array_equal(back[0], image) and back[0].flags.writeable
    with pytest.raises(PicPacTypeError, match=r"^format='arrays' stores datapoints that are lists of arrays, numbers, "
                                              r"bytes and strings, got a dict: use format='pickle5' \(and unpickle=True "
                                              r"to read it back: trusted files and peers only\)$"):
        codec.encode({"x": image}, "arrays")
    with pytest.raises(PicPacTypeError, match=r"^format='arrays' cannot store component 1 of dtype object"):
        codec.encode([image, np.array([None])], "arrays")
    with pytest.raises(PicPacTypeError, match=r"cannot store component 0 of dtype \[\('a', '<i4'\)\]"):
        codec.encode([np.zeros(2, [("a", "<i4")])], "arrays")
    with pytest.raises(PicPacTypeError, match=r"cannot store component 0 of dtype object"):
        codec.encode([2**70], "arrays")  # no integer dtype holds it


def test_pickle5_sends_arrays_out_of_band_and_decodes_them_into_memory_of_their_own():
    array = np.arange(1000, dtype=np.int64)
    frames = codec.encode([array, "text"], "pickle5")
    assert len(frames) == 3 and len(frames[1]) < 200 and bytes(frames[2]) == array.tobytes()  # not in the pickle
    received = [bytearray(memoryview(f)) for f in frames]
    _, back = codec.decode(received, unpickle=True)
    received[2][:8] = bytes(8)
    assert back[0][0] == 0 and back[0][1] == 1 and back[1] == "text" and back[0].flags.writeable
    back[0][1] = 99
    assert received[2][8] == 1  # nor does writing into the array write into the frame
    _, back = codec.decode(codec.encode([array], "arrays"))
    back[0][0] = -1
    assert array[0] == 0


def test_errors_travel_as_messages_of_their_own():
    try:
        raise KeyError("seven")
    except KeyError as exc:
        error = exc
    kind, exc = codec.decode(codec.encode_error(error, "pickle5"), where="peer-3", unpickle=True)
    assert kind == codec.ERROR and type(exc) is KeyError and exc.args == ("seven",)  # pickle5: the exception itself
    assert exc.__notes__[-1].startswith("traceback in the sender at peer-3:\n") and "raise KeyError" in exc.__notes__[-1]
    frames = codec.encode_error(error, "arrays")
    assert json.loads(frames[1])["type"] == "builtins.KeyError" and json.loads(frames[1])["message"] == "'seven'"
    kind, exc = codec.decode(frames, "arrays", where="peer-3")
    assert kind == codec.ERROR and type(exc) is WorkerError and str(exc) == "builtins.KeyError: 'seven'"
    assert exc.__notes__ == [f"traceback in the sender at peer-3:\n{json.loads(frames[1])['traceback'].rstrip()}"]
    with pytest.raises(WorkerError, match=r"^builtins.KeyError: 'seven'\ntraceback in the sender:\n"):
        codec.loads(codec.pack(frames))  # a stored error is raised when it is read


def test_decode_refuses_another_format_than_expected_and_says_why():
    with pytest.raises(WireFormatError, match=r"^received a datapoint in format 'pickle5' from peer-1, but this reader "
                                              r"was given format='arrays': give the sender and the reader the same "
                                              r"format \(pickle5 runs code when it is read: give a reader "
                                              r"format='pickle5' only where every sender is trusted\)$"):
        codec.decode(codec.encode([1], "pickle5"), "arrays", where="peer-1")
    with pytest.raises(WireFormatError, match=r"^an empty message from peer-1$"):
        codec.decode([], where="peer-1")
    with pytest.raises(WireFormatError, match=r"^received a datapoint in format 'json' from peer-1, which this picpac "
                                              r"does not know \(it knows pickle5, arrays\)$"):
        codec.decode([head(codec.DATA, "json"), b"{}"], where="peer-1", unpickle=True)
    with pytest.raises(WireFormatError, match=r"^a data message from peer-1 has 0 frames after its head; its format "
                                              r"'arrays' needs at least one$"):
        codec.decode([head(codec.DATA)], where="peer-1")
    with pytest.raises(WireFormatError, match=r" error message from peer-1 has 2 frames after its head; its format "
                                              r"'pickle5' needs one$"):
        codec.decode(codec.encode_error(KeyError(), "pickle5") + [b""], where="peer-1", unpickle=True)


def test_the_frame_count_message_of_an_error_message_reads_an_error():
    with pytest.raises(WireFormatError, match=r"^an error message from peer-1 has 2 frames"):
        codec.decode(codec.encode_error(KeyError(), "pickle5") + [b""], where="peer-1", unpickle=True)


def test_a_pickle5_message_missing_its_array_frame_is_a_wire_format_error():
    frames = codec.encode([np.arange(4)], "pickle5")
    with pytest.raises(WireFormatError, match=r"^a pickle5 message from peer-1 with 0 out-of-band frames cannot be "
                                              r"unpickled \(not enough out-of-band buffers\): a frame is missing"):
        codec.decode(frames[:2], where="peer-1", unpickle=True)


# -- one blob, for storage ------------------------------------------------------------------------------------
def test_pack_is_the_head_a_frame_table_and_the_frames():
    assert codec.pack([b"HEAD", b"ab", b"", b"c"]) == b"HEAD" + struct.pack("<I3Q", 3, 2, 0, 1) + b"abc"
    blob = codec.dumps([np.arange(3, dtype=np.int16), 7], "arrays")
    frames = codec.unpack(blob)
    assert bytes(frames[0]) == b"PPDF\x01\x00\x06arrays" and len(frames) == 4
    assert bytes(frames[2]) == np.arange(3, dtype=np.int16).tobytes() and bytes(frames[3]) == struct.pack("<q", 7)
    assert codec.pack(frames) == blob
    back = codec.loads(blob, expect="arrays")
    assert back[0].tolist() == [0, 1, 2] and back[0].dtype == np.int16 and back[1] == 7


def test_unpack_refuses_a_damaged_blob():
    blob = codec.dumps([np.arange(3)], "arrays")
    head_length = 13
    with pytest.raises(WireFormatError, match=rf"^a stored datapoint of {head_length + 2} bytes ends inside its frame "
                                              r"table: it is damaged$"):
        codec.unpack(blob[:head_length + 2])
    claims = blob[:head_length] + struct.pack("<I", 1_000_000) + bytes(16)
    with pytest.raises(WireFormatError, match=rf"^a stored datapoint of {len(claims)} bytes claims 1000000 frames: "
                                              r"it is damaged$"):
        codec.unpack(claims)
    with pytest.raises(WireFormatError, match=rf"^a stored datapoint is {len(blob) + 1} bytes, its frames say "
                                              rf"{len(blob)}: it is damaged$"):
        codec.unpack(blob + b"\x00")
    with pytest.raises(WireFormatError, match=rf"^a stored datapoint is {len(blob) - 1} bytes, its frames say "
                                              rf"{len(blob)}: it is damaged$"):
        codec.unpack(blob[:-1])


def test_dumps_defaults_to_arrays_and_checks_the_format():
    assert codec.dumps([1])[:13] == b"PPDF\x01\x00\x06arrays" and codec.loads(codec.dumps([1])) == [1]
    with pytest.raises(PicPacValueError, match="got 'npz'"):
        codec.dumps([1], "npz")


def test_bytes_and_strings_travel_in_the_arrays_format_exactly():
    dp = [b"\x00raw\x00\x00", "naïve ✓", b"", "", np.arange(3)]
    frames = codec.encode(dp, "arrays")
    assert [s.get("as") for s in json.loads(frames[1])["arrays"]] == ["bytes", "str", "bytes", "str", None]
    back = codec.loads(codec.dumps(dp))
    assert back[:4] == dp[:4] and [type(v) for v in back[:4]] == [bytes, str, bytes, str]  # trailing NULs kept
    spec = {"dtype": "|u1", "shape": [2], "scalar": False, "generic": False}
    for bad, message in (({**spec, "as": "code"}, "is 'as' 'code'"), ({**spec, "dtype": "<i4", "as": "str"}, "1-d uint8"),
                         ({**spec, "as": "str"}, "not valid UTF-8")):
        header = json.dumps({"container": "list", "arrays": [bad]}).encode()
        data = b"\xff\xfe" if bad["dtype"] == "|u1" else bytes(8)
        with pytest.raises(WireFormatError, match=message):
            codec.decode([head(codec.DATA), header, data], where="peer-2")


@pytest.mark.parametrize("blob", [codec.dumps([1], "pickle5"), codec.pack(codec.encode_error(KeyError(), "pickle5"))])
def test_nothing_is_unpickled_without_the_opt_in(blob, monkeypatch):
    """A pickle5 value (data, or an error) is refused by a WireFormatError naming the opt-in, before pickle runs."""
    import pickle
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled without the opt-in"))
    with pytest.raises(WireFormatError, match=r"format 'pickle5'; unpickling runs code, so it is refused unless "
                                              r"asked for: unpickle=True"):
        codec.loads(blob)
    with pytest.raises(WireFormatError, match=r"unpickling runs code"):
        codec.decode(codec.unpack(blob), where="peer-1")


# -- tensorpack's values ------------------------------------------------------------------------------------
def test_loads_reads_tensorpacks_msgpack_values():
    msgpack = pytest.importorskip("msgpack")

    def encode(obj):  # msgpack-numpy's layout, as tensorpack writes it
        if isinstance(obj, np.ndarray):
            return {b"nd": True, b"type": obj.dtype.str, b"kind": b"", b"shape": obj.shape, b"data": obj.tobytes()}
        if isinstance(obj, np.generic):
            return {b"nd": False, b"type": obj.dtype.str, b"kind": b"", b"data": obj.tobytes()}
        raise TypeError(type(obj))
    value = msgpack.dumps([np.arange(6, dtype=np.float32).reshape(2, 3), np.int16(-4), "name", {"k": 1}],
                          use_bin_type=True, default=encode)
    image, number, name, mapping = codec.loads(value)
    assert image.dtype == np.float32 and image.tolist() == [[0, 1, 2], [3, 4, 5]] and image.flags.writeable
    assert number == -4 and number.dtype == np.int16 and name == "name" and mapping == {"k": 1}
    with pytest.raises(WireFormatError, match=r"^a stored value has no picpac head: it is not tensorpack's msgpack "
                                              r"either: "):
        codec.loads(b"\xc1 not msgpack")


def test_a_msgpack_value_without_msgpack_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "msgpack", None)
    with pytest.raises(WireFormatError, match=r"^a stored value has no picpac head: it looks like tensorpack's "
                                              r"msgpack serialisation, which needs `pip install msgpack` to read$"):
        codec.loads(b"\x92\x01\x02")
    assert codec.loads(codec.dumps([1])) == [1]  # picpac's own values need no msgpack
