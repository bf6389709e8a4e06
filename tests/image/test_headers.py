"""picpac.image.headers on its own: sizes read from hand-made headers of each format's variants (EXIF
orientation, BITMAPCOREHEADER, BigTIFF, PNM comments, Radiance axes, a J2K image offset, AVIF boxes), the
PNG chunk check, and what the readers take as bytes."""
from __future__ import annotations

import struct
import subprocess
import sys
import zlib

import cv2
import numpy as np
import pytest

from picpac.image.headers import PNG_MAGIC, image_size, jpeg_header, png_chunks_fit

from image_helpers import after_frame, exif, with_segment

PIXELS = np.random.default_rng(1).integers(0, 256, (30, 50, 3), dtype=np.uint8)  # 50 wide, 30 high
JPEG = cv2.imencode(".jpg", PIXELS)[1].tobytes()
PNG = cv2.imencode(".png", PIXELS)[1].tobytes()


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


# -- JPEG -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("orientation, want", [(None, (50, 30, 1)), (1, (50, 30, 1)), (3, (50, 30, 3)),
                                               (4, (50, 30, 4)), (5, (30, 50, 5)), (6, (30, 50, 6)),
                                               (8, (30, 50, 8)), (9, (50, 30, 1)), (0, (50, 30, 1))])
@pytest.mark.parametrize("order", ["<", ">"])
def test_jpeg_header_is_the_size_as_opencv_shows_it(orientation, want, order):
    data = with_segment(JPEG, exif(orientation, order))
    assert jpeg_header(data) == want and image_size(data) == want[:2]
    shown = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert shown.shape[:2] == (want[1], want[0])


def test_jpeg_header_of_an_unreadable_exif_is_upright():
    body = b"Exif\0\0" + b"XX" + bytes(10)  # no byte order
    assert jpeg_header(with_segment(JPEG, b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body)) == (50, 30, 1)
    cut = exif(6)[:-8]  # the IFD entry cut short
    cut = cut[:2] + struct.pack(">H", len(cut) - 2) + cut[4:]
    assert jpeg_header(with_segment(JPEG, cut)) == (50, 30, 1)


def frame(marker: int, width: int, height: int) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">HBHHB", 8, 8, height, width, 1)


@pytest.mark.parametrize("marker", [0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCF])
def test_jpeg_header_reads_every_start_of_frame(marker):
    assert jpeg_header(b"\xff\xd8" + frame(marker, 640, 480)) == (640, 480, 1)


@pytest.mark.parametrize("marker", [0xC4, 0xC8, 0xCC])  # DHT, JPG, DAC: no frame
def test_jpeg_header_skips_the_segments_numbered_like_frames(marker):
    segment = bytes([0xFF, marker]) + struct.pack(">H", 6) + bytes(4)
    assert jpeg_header(b"\xff\xd8" + segment + frame(0xC0, 7, 9)) == (7, 9, 1)


def test_jpeg_header_steps_over_fill_bytes_and_markers_without_a_length():
    data = b"\xff\xd8" + b"\xff\xff\xff" + b"\xff\x01" + b"\xff\xd3" + b"\x00\x12" + frame(0xC2, 3, 4)
    assert jpeg_header(data) == (3, 4, 1)


@pytest.mark.parametrize("data", [
    b"", b"\xff", b"\xff\xd8", b"\x89PNG", PNG,
    b"\xff\xd8" + b"\xff\xda" + struct.pack(">H", 4) + bytes(40) + frame(0xC0, 3, 4),  # scan data first
    b"\xff\xd8" + frame(0xC0, 0, 4), b"\xff\xd8" + frame(0xC0, 3, 0),  # no size
    b"\xff\xd8" + frame(0xC0, 640, 480)[:6],  # cut inside the frame header
    JPEG[:20],  # no frame header yet
], ids=range(10))
def test_jpeg_header_of_what_is_no_readable_jpeg_is_none(data):
    assert jpeg_header(data) is None


# -- PNG ------------------------------------------------------------------------------------------------------
def test_png_chunks_fit_a_whole_png():
    assert png_chunks_fit(PNG) and image_size(PNG) == (50, 30)


def test_png_chunks_fit_stops_at_iend_and_ignores_what_follows():
    assert png_chunks_fit(PNG + b"trailing bytes")


def test_a_chunk_longer_than_the_data_does_not_fit():
    data = bytearray(PNG)
    struct.pack_into(">I", data, 33, 0x7F000050)  # the chunk after IHDR declares 2 GB
    assert not png_chunks_fit(bytes(data))
    assert not png_chunks_fit(PNG[:-5])  # IEND cut short


def test_chunks_that_end_with_the_data_fit_and_a_stray_tail_does_not():
    head = PNG_MAGIC + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
    assert png_chunks_fit(head)
    assert png_chunks_fit(PNG_MAGIC)
    assert not png_chunks_fit(head + b"\0\0")  # a partial chunk header


def test_png_without_ihdr_first_has_no_size():
    data = PNG_MAGIC + chunk(b"tEXt", b"k\0v") + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
    assert image_size(data) is None


# -- the other formats ----------------------------------------------------------------------------------------
def test_bmp_core_header_sizes_are_16_bit_and_a_top_down_height_counts():
    core = b"BM" + bytes(12) + struct.pack("<IHHHH", 12, 300, 200, 1, 24)
    assert image_size(core) == (300, 200)
    info = bytearray(cv2.imencode(".bmp", PIXELS)[1].tobytes())
    struct.pack_into("<i", info, 22, -30)
    assert image_size(bytes(info)) == (50, 30)
    assert cv2.imdecode(np.frombuffer(bytes(info), np.uint8), cv2.IMREAD_COLOR).shape[:2] == (30, 50)


def test_gif_size_is_the_logical_screen():
    assert image_size(b"GIF87a" + struct.pack("<HH", 640, 480) + bytes(10)) == (640, 480)


@pytest.mark.parametrize("params, chunk_kind", [((cv2.IMWRITE_WEBP_QUALITY, 101), b"VP8L"),
                                                ((cv2.IMWRITE_WEBP_QUALITY, 60), b"VP8 ")])
def test_webp_lossless_and_lossy(params, chunk_kind):
    data = cv2.imencode(".webp", PIXELS, list(params))[1].tobytes()
    assert data[12:16] == chunk_kind and image_size(data) == (50, 30)


def test_a_riff_that_is_no_webp_or_an_unknown_webp_chunk_has_no_size():
    assert image_size(b"RIFF\0\0\0\0WAVEfmt " + bytes(32)) is None
    assert image_size(b"RIFF\0\0\0\0WEBPALPH" + bytes(32)) is None


def tiff(entries: list[tuple[int, int, int]], order: str = "<", big: bool = False) -> bytes:
    """A TIFF (or BigTIFF) whose first IFD holds (tag, type, value) entries."""
    magic = b"II" if order == "<" else b"MM"
    codes = {3: "H", 4: "I", 16: "Q"}
    if big:
        head = magic + struct.pack(order + "HHHQ", 43, 8, 0, 16) + struct.pack(order + "Q", len(entries))
        body = b"".join(struct.pack(order + "HHQ", tag, kind, 1) + struct.pack(order + codes.get(kind, "I"), value)
                        .ljust(8, b"\0") for tag, kind, value in entries)
        return head + body + bytes(8)
    head = magic + struct.pack(order + "HI", 42, 8) + struct.pack(order + "H", len(entries))
    body = b"".join(struct.pack(order + "HHI", tag, kind, 1) + struct.pack(order + codes.get(kind, "I"), value)
                    .ljust(4, b"\0") for tag, kind, value in entries)
    return head + body + bytes(4)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("kind", [3, 4])
def test_tiff_size_from_the_first_ifd(order, big, kind):
    assert image_size(tiff([(254, 4, 0), (257, kind, 480), (256, kind, 640)], order, big)) == (640, 480)


def test_bigtiff_long8_sizes():
    assert image_size(tiff([(256, 16, 70000), (257, 16, 3)], big=True)) == (70000, 3)


def test_tiff_without_both_sizes_or_of_another_type_has_none():
    assert image_size(tiff([(256, 4, 640)])) is None
    assert image_size(tiff([(256, 5, 640), (257, 4, 480)])) is None  # RATIONAL: no size


def test_tiff_written_by_opencv():
    assert image_size(cv2.imencode(".tif", PIXELS)[1].tobytes()) == (50, 30)


@pytest.mark.parametrize("data", [b"P1\n3 2\n", b"P2 3\t2 255 ", b"P3\n# made by hand\n3\n# w then h\n2\n255\n",
                                  b"P5 #c\n3 2\n", b"P6\n3 2 255\n" + bytes(18), b"PF\n3 2\n-1.0\n",
                                  b"Pf\n3\n2\n-1\n"])
def test_pnm_and_pfm_sizes_with_comments_between_them(data):
    assert image_size(data) == (3, 2)


def test_pnm_whose_size_lies_past_the_text_head_is_not_understood():
    assert image_size(b"P6\n" + b"#" * 5000 + b"\n3 2\n255\n") is None


def test_a_comment_runs_to_the_end_of_its_line():
    assert image_size(b"P6\n# 3 2\n5 4\n255\n") == (5, 4)
    assert image_size(b"P6\n#c 3 2") is None  # all comment: no size, as OpenCV reads it


HASHES = """
from picpac.image.headers import image_size
print(image_size(b"P6\\n" + b"#" * 4093), image_size(b"P5 " + b"#" * 40 + b" 3 2"), image_size(b"P6\\n" + b"# \\n" * 1300))
"""


def test_pnm_comments_take_linear_time():
    """A header of 40 '#' took hours: each could end one comment or go on with it, and the regex tried
    every way when no number followed (a 45-byte file stalled its decoder)."""
    done = subprocess.run([sys.executable, "-c", HASHES], capture_output=True, text=True, timeout=20)
    assert done.stdout.split() == ["None"] * 3, done.stderr


def test_pam_size_from_its_keys_in_any_order():
    assert image_size(b"P7\nHEIGHT 2\nDEPTH 3\n  WIDTH 3\nMAXVAL 255\nENDHDR\n") == (3, 2)
    assert image_size(b"P7\nWIDTH 3\nENDHDR\n") is None


@pytest.mark.parametrize("line, want", [(b"-Y 480 +X 640", (640, 480)), (b"+Y 480 -X 640", (640, 480)),
                                        (b"+X 640 -Y 480", (640, 480)), (b"-X 640 +Y 480", (640, 480))])
def test_radiance_resolution_line_in_either_axis_order(line, want):
    assert image_size(b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n" + line + b"\n") == want
    assert image_size(b"#?RGBE\n\n" + line + b"\n") == want


def test_sun_raster():
    assert image_size(b"\x59\xa6\x6a\x95" + struct.pack(">iiii", 320, 240, 24, 0)) == (320, 240)
    assert image_size(b"\x59\xa6\x6a\x95" + struct.pack(">ii", -1, 240)) is None


def siz(x: int, y: int, x0: int = 0, y0: int = 0) -> bytes:
    return b"\xff\x4f\xff\x51" + struct.pack(">HHIIII", 41, 0, x, y, x0, y0)


def test_jpeg2000_codestream_size_is_its_area_less_the_offset():
    assert image_size(siz(640, 480)) == (640, 480)
    assert image_size(siz(640, 480, 40, 80)) == (600, 400)
    assert image_size(siz(640, 480, 640, 0)) is None  # nothing left


def test_jp2_finds_the_codestream_inside_its_boxes():
    jp2 = b"\x00\x00\x00\x0cjP  \r\n\x87\n" + b"\x00\x00\x00\x14ftypjp2 " + bytes(8) + b"\x00\x00\x00\x30jp2c" + siz(9, 7)
    assert image_size(jp2) == (9, 7)
    assert image_size(jp2.replace(b"\xff\x4f\xff\x51", b"....")) is None


def box(kind: bytes, body: bytes, large: bool = False) -> bytes:
    if large:
        return struct.pack(">I", 1) + kind + struct.pack(">Q", 16 + len(body)) + body
    return struct.pack(">I", 8 + len(body)) + kind + body


def ispe(width: int, height: int) -> bytes:
    return box(b"ispe", bytes(4) + struct.pack(">II", width, height))


def test_avif_size_is_the_largest_ispe_in_meta():
    ftyp = box(b"ftyp", b"avif" + bytes(4) + b"mif1")
    meta = box(b"meta", bytes(4) + box(b"iprp", ispe(512, 512) + ispe(1024, 768) + ispe(512, 512)))
    assert image_size(ftyp + box(b"free", bytes(20)) + meta) == (1024, 768)
    assert image_size(ftyp + box(b"meta", bytes(4) + ispe(30, 20), large=True)) == (30, 20)
    assert image_size(ftyp + struct.pack(">I", 0) + b"meta" + bytes(4) + ispe(30, 20)) == (30, 20)  # to the end


def test_avif_without_a_size():
    ftyp = box(b"ftyp", b"avif" + bytes(4))
    assert image_size(ftyp + box(b"meta", bytes(4))) is None
    assert image_size(ftyp + struct.pack(">I", 4) + b"meta" + bytes(20)) is None  # a box shorter than its header
    assert image_size(ftyp + box(b"mdat", bytes(8))) is None


def test_avif_written_by_opencv():
    data = cv2.imencode(".avif", PIXELS)[1].tobytes()
    assert image_size(data) == (50, 30)


# -- what image_size takes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, lambda d: np.frombuffer(d, np.uint8)],
                         ids=["bytes", "bytearray", "memoryview", "ndarray"])
def test_image_size_takes_any_bytes_like(wrap):
    assert image_size(wrap(PNG)) == (50, 30) and image_size(wrap(JPEG)) == (50, 30)
    assert jpeg_header(wrap(JPEG)) == (50, 30, 1) and png_chunks_fit(wrap(PNG))


def test_unknown_formats_have_no_size():
    assert image_size(b"hello world, no image here") is None
    assert image_size(b"") is None


def test_one_reading_of_the_orientation_the_first_exif_before_the_first_scan():
    """picpac's rule (every decode follows it): the first Exif segment wins, before or after the frame header."""
    assert jpeg_header(after_frame(JPEG, exif(6))) == (30, 50, 6)
    assert jpeg_header(with_segment(with_segment(JPEG, exif(1)), exif(3))) == (50, 30, 3)  # 3 comes first
    assert jpeg_header(after_frame(with_segment(JPEG, exif(8)), exif(1))) == (30, 50, 8)
    assert jpeg_header(with_segment(JPEG, exif(None)) + b"") == (50, 30, 1)
