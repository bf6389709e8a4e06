"""picpac.tools.verify and `picpac verify`: every single-byte flip and truncation is reported, nothing crashes (a
flip in a recovery frame, which only `picpac repair` reads, harms nothing)."""
from __future__ import annotations

import json
import re
import subprocess
import warnings

import cv2
import numpy as np
import pytest

import picpac
from picpac.file.frames import RECORD_FRAME
from picpac.file.layout import FILE_HEAD, HEADER_SIZE, SLOT, SLOT_OFFSETS, Commit, crc32, read_header
from picpac.tools.verify import VerifyReport, verify

from helpers import payload


def write_small_db(path) -> bytes:
    """Three records (about 700 bytes in all), each with meta {"path": "I.jpg"}; returns the file's bytes
    (replacing what ``path`` held)."""
    with picpac.Writer(path, overwrite=True, metadata={"classes": ["a", "b"]}) as w:
        for i in range(3):
            w.append(image=payload(i, 40), label=i % 2, group=i, meta={"path": f"{i}.jpg"})
    return path.read_bytes()


def record_spans(path) -> list[tuple[int, int, int]]:
    """(start, payload start, end) of every record: the payload follows head, field table and meta."""
    with picpac.Reader(path) as r:
        return [(int(o), int(o) + 8 + 12 + len(json.dumps({"path": f"{i}.jpg"}, separators=(",", ":"))),
                 int(o + s)) for i, (o, s) in enumerate(zip(r.index["offset"], r.index["size"]))]


def outcome(path) -> VerifyReport | picpac.PicPacError:
    """verify()'s report or the PicPacError it raised; any other exception or a warning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return verify(path, progress=False)
        except picpac.PicPacError as exc:
            return exc


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *args], capture_output=True, text=True)


def assert_cli_error(result: subprocess.CompletedProcess, path) -> None:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"picpac: error: {path}: ")


def test_clean_database_verifies(tmp_path):
    path = tmp_path / "db.picpac"
    write_small_db(path)
    report = verify(path, progress=False)
    assert report.ok and (report.records, report.problems, report.damaged) == (3, [], [])
    assert report.summary() == f"{path}: OK (3 records)"
    result = run_cli("verify", str(path))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{path}: OK (3 records)\n", "")


@pytest.mark.parametrize("mask", [0x01, 0xFF])
def test_every_byte_flip_is_reported(tmp_path, mask):
    clean = tmp_path / "clean.picpac"
    data = write_small_db(clean)
    spans = record_spans(clean)
    slot_1 = range(SLOT_OFFSETS[1], SLOT_OFFSETS[1] + SLOT.size)  # the unused slot of a one-commit db
    frames = range(HEADER_SIZE, spans[0][0])  # the metadata frame and record 0's (read by `picpac repair` only)
    path = tmp_path / "flipped.picpac"
    for pos in range(len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= mask
        path.write_bytes(flipped)
        result = outcome(path)
        owner = next((i for i, (start, _, end) in enumerate(spans) if start <= pos < end), None)
        if pos in frames or any(start - RECORD_FRAME.size <= pos < start for start, _, _ in spans):
            assert isinstance(result, VerifyReport) and result.ok, pos  # reading never uses a frame
            continue
        if owner is not None:
            assert isinstance(result, VerifyReport) and result.damaged == [owner], pos
            (problem,) = result.problems
            assert re.match(rf"record {owner}( \(.*\))?: ", problem), pos  # named by meta path if it parses
            if pos >= spans[owner][1]:  # the meta is intact
                assert problem == f"record {owner} ({owner}.jpg): fails its checksum (damaged bytes)"
        elif pos in slot_1:
            assert isinstance(result, VerifyReport) and result.damaged == [], pos
            (problem,) = result.problems
            assert problem.startswith("header: commit slot 1 is damaged"), pos
        else:  # file head, the used slot, metadata and index: the database does not open
            assert isinstance(result, picpac.PicPacError) and str(result).startswith(f"{path}: "), pos
        assert not isinstance(result, VerifyReport) or not result.ok


def test_byte_flips_through_the_cli(tmp_path):
    clean = tmp_path / "clean.picpac"
    data = write_small_db(clean)
    spans = record_spans(clean)
    path = tmp_path / "flipped.picpac"

    def flip(pos: int) -> subprocess.CompletedProcess:
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        path.write_bytes(flipped)
        return run_cli("verify", str(path))

    result = flip(spans[1][2] - 1)
    assert result.returncode == 1
    assert result.stderr == "record 1 (1.jpg): fails its checksum (damaged bytes)\n"
    assert result.stdout == (f"{path}: 1 problem(s) in 3 records (1 damaged, 0 undecodable); `picpac repair` drops "
                             "the damaged records\n")
    result = flip(SLOT_OFFSETS[1] + 3)
    assert result.returncode == 1 and result.stderr.startswith("header: commit slot 1 is damaged")
    for pos in (2, 9, SLOT_OFFSETS[0] + 5, spans[-1][2] + 1, len(data) - 1):  # magic, version, slot 0, region
        assert_cli_error(flip(pos), path)


def test_truncated_tails_are_reported(tmp_path):
    path = tmp_path / "db.picpac"
    data = write_small_db(path)
    spans = record_spans(path)
    cuts = [0, 7, FILE_HEAD.size, SLOT_OFFSETS[1] + 1, spans[1][0] + 5, spans[-1][2], len(data) - 40]
    for cut in cuts + [len(data) - 1]:
        path.write_bytes(data[:cut])
        result = outcome(path)
        assert isinstance(result, picpac.FormatError), cut
        assert str(result).startswith(f"{path}: ")
    for cut in (0, spans[1][0] + 5, len(data) - 1):
        path.write_bytes(data[:cut])
        assert_cli_error(run_cli("verify", str(path)), path)


def jpeg(seed: int) -> bytes:
    image = np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    return cv2.imencode(".jpg", image)[1].tobytes()


def test_checksummed_but_undecodable_image_is_found_only_with_decode(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(3):
            image = jpeg(i)[:len(jpeg(i)) // 2] if i == 1 else jpeg(i)
            w.append(image=image, mask=cv2.imencode(".png", np.zeros((16, 16), np.uint8))[1].tobytes(),
                     meta={"path": f"{i}.jpg"})
    assert verify(path, progress=False).ok
    report = verify(path, decode=True, progress=False)
    assert (report.ok, report.damaged, report.undecodable) == (False, [], [1])
    assert report.problems == ["record 1 (1.jpg): field 'image' does not decode as an image"]
    assert verify(path, decode=True, fields=["mask"], progress=False).ok
    with pytest.raises(picpac.PicPacValueError, match="no field 'depth' to decode"):
        verify(path, decode=True, fields=["depth"])

    result = run_cli("verify", str(path))
    assert result.returncode == 0 and result.stderr == ""
    result = run_cli("verify", "--decode", str(path))
    assert result.returncode == 1
    assert result.stderr == "record 1 (1.jpg): field 'image' does not decode as an image\n"
    assert result.stdout == f"{path}: 1 problem(s) in 3 records, images decoded (0 damaged, 1 undecodable)\n"


def test_decode_finds_an_image_over_the_pixel_limit(tmp_path):
    from helpers import jpeg_bomb

    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=jpeg(0), meta={"path": "0.jpg"})
        w.append(image=jpeg_bomb(), meta={"path": "bomb.jpg"})
    report = verify(path, decode=True, progress=False)
    assert (report.ok, report.damaged, report.undecodable) == (False, [], [1])
    why = ("is an image of 65500x65500 = 4,290,250,000 pixels, over the limit max_pixels=268435456 (a "
           "decompression bomb?); raise max_pixels (0: no limit) if it is genuine")
    assert report.problems == [f"record 1 (bomb.jpg): field 'image' {why}"]
    assert verify(path, decode=True, progress=False, max_pixels=None).problems == [
        "record 1 (bomb.jpg): field 'image' does not decode as an image"]  # OpenCV's own limit, 2**30
    result = run_cli("verify", "--decode", str(path))
    assert result.returncode == 1 and "65500x65500" in result.stderr


def rewrite_index(path, edit) -> None:
    """Apply ``edit`` to the committed index and store it with fresh checksums, as a buggy writer would."""
    data = bytearray(path.read_bytes())
    state = read_header(data, len(data), str(path))
    commit = state.current
    with picpac.Reader(path) as r:
        index = r.index.copy()
    edit(index)
    data[commit.index_offset:commit.end] = index.tobytes()
    region_crc = crc32(bytes(data[commit.offset:commit.end]))
    fixed = Commit(commit.seq, commit.offset, commit.meta_size, commit.index_offset, commit.count, region_crc)
    data[SLOT_OFFSETS[state.slot]:SLOT_OFFSETS[state.slot] + SLOT.size] = fixed.pack()
    path.write_bytes(data)


def test_index_sanity(tmp_path):
    path = tmp_path / "db.picpac"
    write_small_db(path)
    with picpac.Reader(path) as r:
        first = r.index[0].copy()
        size_2, data_end = int(r.index["size"][2]), int(r.index["offset"][2] + r.index["size"][2])

    def overlap_and_reserved(index: np.ndarray) -> None:
        index[1] = first  # records 0 and 1 both point at record 0's bytes, with its checksum
        index["reserved"][2] = 5

    rewrite_index(path, overlap_and_reserved)
    report = verify(path, progress=False)
    assert report.problems == ["index entries 0 and 1: their records overlap",
                               "index entry 2: reserved column is 5, not 0"]
    assert report.damaged == []

    def past_data_area(index: np.ndarray) -> None:
        index["offset"][2] = data_end  # the metadata/index region starts there

    write_small_db(path)
    rewrite_index(path, past_data_area)
    report = verify(path, progress=False)
    assert report.problems == [
        f"index entry 2: record bytes {data_end}-{data_end + size_2} lie outside the data area "
        f"(bytes 112-{data_end})",
        "record 2: fails its checksum (damaged bytes)",
    ]
    assert report.damaged == [2]
