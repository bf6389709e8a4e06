"""Recovery frames (picpac/file/frames.py): what a frame holds, and that a damaged or cut one is never taken for one."""
from __future__ import annotations

import math

import numpy as np

import picpac
from picpac.file.frames import (METADATA_FRAME, RECORD_FRAME, RECORD_FRAME_DTYPE, RecordFrame, encode_metadata, framed,
                                metadata_frame, read_metadata_frame, read_record_frame, record_frame)
from picpac.file.layout import NO_GROUP


def test_a_record_frame_holds_size_label_group_and_checksum():
    frame = record_frame(1234, -2.5, 7, 0xDEADBEEF)
    assert len(frame) == RECORD_FRAME.size == 40 and frame.startswith(b"\x89PICREC\n")
    data = b"x" * 5 + frame + b"record"
    assert read_record_frame(data, 5, len(data)) == RecordFrame(1234, -2.5, 7, 0xDEADBEEF)
    nan = read_record_frame(record_frame(1, float("nan"), NO_GROUP, 0), 0, 40)
    assert math.isnan(nan.label) and nan.group == NO_GROUP
    for i in range(40):  # any damaged byte, the magic's included: not a frame
        for mask in (0x01, 0x80):
            damaged = bytearray(frame)
            damaged[i] ^= mask
            assert read_record_frame(bytes(damaged), 0, 40) is None, (i, mask)
    assert read_record_frame(frame, 0, 39) is None and read_record_frame(frame[:39], 0, 39) is None  # cut
    row = np.frombuffer(frame, RECORD_FRAME_DTYPE)[0]  # the NumPy record reads what the struct packed
    assert (row["magic"], row["size"], row["label"], row["group"], row["checksum"]) == (
        b"\x89PICREC\n", 1234, -2.5, 7, 0xDEADBEEF) and row["crc"] == RECORD_FRAME.unpack(frame)[-1]


def test_a_metadata_frame_holds_the_metadata_as_a_commit_stores_it():
    metadata = {"fields": ["image", "annotation"], "classes": ["cat"], "note": {"nested": [1, 2]}}
    frame = metadata_frame(encode_metadata(metadata))
    assert len(frame) == METADATA_FRAME.size + len(encode_metadata(metadata)) and frame.startswith(b"\x89PICMET\n")
    assert read_metadata_frame(b"ab" + frame, 2, len(frame) + 2) == (metadata, len(frame))
    for i in range(len(frame)):
        damaged = bytearray(frame)
        damaged[i] ^= 0x10
        assert read_metadata_frame(bytes(damaged), 0, len(frame)) is None, i
    assert read_metadata_frame(frame, 0, len(frame) - 1) is None  # its metadata cut
    for bad in (b"[1, 2]", b'{"fields": [1]}', b"{not json"):  # intact, but no dataset metadata
        assert read_metadata_frame(metadata_frame(bad), 0, METADATA_FRAME.size + len(bad)) is None


def test_databases_of_array_fields_have_no_frames(tmp_path):
    assert framed({"fields": ["image"]}) and not framed({"fields": ["image"], "arrays": {}})
    path = tmp_path / "a.picpac"
    picpac.write_arrays(path, [[1, 2], [3, 4]], sync=False)
    with picpac.Reader(path) as reader:
        assert reader.stride == reader.index["size"][0]  # back to back: the batch path reads them as one array
