"""The pixel limit: every decode refuses an image over ``max_pixels`` from its header, fast and without
allocating its pixels (decompression bombs)."""
from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac import errors
from picpac.image import decoding, headers

from helpers import jpeg_bomb, png_bomb, progressive_jpeg

PIXELS = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)


def encoded(ext: str, params: tuple = ()) -> bytes:
    """PIXELS (53x37) as OpenCV writes them in the format of ``ext``."""
    img = PIXELS.astype(np.float32) / 255 if ext in (".pfm", ".hdr") else PIXELS[:, :, 0] if ext in (".pgm", ".pbm") \
        else PIXELS
    return cv2.imencode(ext, img, list(params))[1].tobytes()


FORMATS = [(".jpg", ()), (".png", ()), (".bmp", ()), (".tif", ()), (".webp", ()),
           (".webp", (cv2.IMWRITE_WEBP_QUALITY, 80)), (".ppm", ()), (".pgm", ()), (".pbm", ()), (".pam", ()),
           (".pfm", ()), (".sr", ()), (".hdr", ()), (".jp2", ()), (".avif", ()), (".gif", ())]


@pytest.mark.parametrize("ext, params", FORMATS, ids=lambda v: v if isinstance(v, str) else str(len(v)))
def test_the_header_size_of_every_format_opencv_decodes(ext, params):
    data = encoded(ext, params)
    assert headers.image_size(data) == (53, 37)
    want = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(decoding.decode(data), want)  # under the limit: bit-exact as before
    assert np.array_equal(decoding.decode(data, max_pixels=53 * 37), want)
    with pytest.raises(picpac.ImageTooLargeError):
        decoding.decode(data, max_pixels=53 * 37 - 1)


def tiff_bomb(width: int, height: int, big_endian: bool = False) -> bytes:
    """An 8-bit grayscale TIFF declaring ``width`` x ``height`` with one byte of strip data."""
    o = ">" if big_endian else "<"
    tags = [(256, 4, width), (257, 4, height), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 8 + 2 + 9 * 12 + 4),
            (277, 3, 1), (278, 4, height), (279, 4, 1)]
    ifd = struct.pack(o + "H", len(tags)) + b"".join(
        struct.pack(o + "HHI" + ("HH" if kind == 3 else "I"), tag, kind, 1, *((value, 0) if kind == 3 else (value,)))
        for tag, kind, value in tags) + struct.pack(o + "I", 0)
    return (b"MM\0*" if big_endian else b"II*\0") + struct.pack(o + "I", 8) + ifd + b"\0"


def patched(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


BOMBS = {
    "jpeg": lambda: jpeg_bomb(),
    "png": lambda: png_bomb(),
    "bmp": lambda: patched(encoded(".bmp"), 18, "<ii", 65500, -65500),  # negative: top-down
    "gif": lambda: patched(encoded(".gif"), 6, "<HH", 18000, 18000),  # OpenCV's own limit lets this one through
    "tiff": lambda: tiff_bomb(65500, 65500),
    "tiff-big-endian": lambda: tiff_bomb(20000, 20000, big_endian=True),
    "webp": lambda: patched(encoded(".webp"), 21, "<I", 16383 | 16383 << 14),  # VP8L: 16384x16384, its largest
    "ppm": lambda: b"P6\n# a comment\n65500 65500\n255\n" + bytes(64),
}


@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_is_refused_from_its_header(name):
    data = BOMBS[name]()
    width, height = headers.image_size(data)
    limit = 2**27 if name == "webp" else decoding.MAX_PIXELS
    assert len(data) < 10_000 and width * height > limit
    start = time.perf_counter()
    with pytest.raises(picpac.ImageTooLargeError) as info:
        decoding.decode(data, max_pixels=limit)
    with pytest.raises(picpac.ImageTooLargeError):
        decoding.decode_channels(data, 3, True, 4, (0, 0, 16, 16), max_pixels=limit)
    assert time.perf_counter() - start < 1
    exc = info.value
    assert (exc.width, exc.height, exc.limit) == (width, height, limit)
    assert f"{width}x{height}" in str(exc) and f"max_pixels={limit}" in str(exc) and "0: no limit" in str(exc)
    assert isinstance(exc, picpac.PicPacValueError)
    assert pickle.loads(pickle.dumps(exc)).args == exc.args


def test_a_jpeg_with_stray_bytes_before_its_frame_header_is_still_measured():
    """libjpeg skips stray bytes before a marker (with a warning) and decodes the image, so the header
    reader must find the size past them: else a reduced decode of a 65500x65500 bomb took 1.6 GB."""
    data = jpeg_bomb()
    i = 2
    while not 0xC0 <= data[i + 1] <= 0xC2:
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    stray = data[:i] + b"\x12\x34\xff\x00" + data[i:]
    assert decoding.jpeg_header(stray) == (65500, 65500, 1)
    with pytest.raises(picpac.ImageTooLargeError):
        decoding.decode_channels(stray, 3, True, 4)


def test_max_pixels_none_or_zero_is_no_limit_and_the_default_is_2_to_the_28():
    data = encoded(".png")
    assert decoding.MAX_PIXELS == picpac.image.MAX_PIXELS == 2**28
    for limit in (None, 0):
        assert decoding.decode(data, max_pixels=limit).shape == (37, 53, 3)
        assert decoding.decode_channels(data, 1, False, max_pixels=limit).shape == (37, 53)
    decoding.check_pixels(16384, 16384)  # exactly 2**28: allowed
    with pytest.raises(picpac.ImageTooLargeError):
        decoding.check_pixels(16385, 16384)
    decoding.check_pixels(10**6, 10**6, None)


def test_decode_channels_checks_before_the_region_and_reduced_decoders():
    big = cv2.imencode(".jpg", cv2.resize(PIXELS, (800, 600)))[1].tobytes()
    whole = decoding.decode_channels(big, 3, True, 2)
    part = decoding.decode_channels(big, 3, True, 2, (10, 20, 30, 40))
    assert whole.shape == (300, 400, 3) and part.shape[:2] in ((40, 30), (300, 400))
    for reduction, region in ((1, None), (2, None), (4, (0, 0, 8, 8)), (1, (10, 20, 30, 40))):
        with pytest.raises(picpac.ImageTooLargeError, match="800x600"):
            decoding.decode_channels(big, 3, True, reduction, region, max_pixels=800 * 600 - 1)


def test_an_unreadable_header_is_checked_after_opencv_decodes_it(monkeypatch):
    data = encoded(".png")
    monkeypatch.setattr(decoding, "image_size", lambda data: None)
    assert decoding.decode(data, max_pixels=53 * 37).shape == (37, 53, 3)
    with pytest.raises(picpac.ImageTooLargeError):
        decoding.decode(data, max_pixels=100)


def test_headers_that_are_not_understood_give_none():
    for data in (b"", b"\xff\xd8", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM", b"RIFF....WEBPVP8X", b"II*\0\xff\xff\xff\xff",
                 b"P6\nabc", b"P7\nHEIGHT 3\n", b"#?RADIANCE\n", b"\0\0\0\x0cjP  \r\n\x87\n", b"not an image",
                 png_bomb(0, 5)):
        assert headers.image_size(data) is None, data


BOMB_RSS = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # before the fix: MemoryError, not a 12 GB swap
    sys.path.insert(0, sys.argv[1])
    from helpers import jpeg_bomb, png_bomb
    import picpac
    from picpac.image import decoding
    gif = bytearray(open(sys.argv[2], "rb").read())
    gif[6:10] = (18000).to_bytes(2, "little") * 2
    calls = [lambda: decoding.decode(jpeg_bomb()), lambda: decoding.decode(png_bomb()),
             lambda: decoding.decode(bytes(gif)), lambda: decoding.decode_channels(jpeg_bomb(), 3, True, 4),
             lambda: decoding.decode_channels(jpeg_bomb(), 3, True, 1, (0, 0, 65500, 65500))]
    open("/proc/self/clear_refs", "w").write("5")  # ru_maxrss would hold the parent's peak (kept across exec)
    start = time.perf_counter()
    for call in calls:
        try:
            call()
            sys.exit("decoded a bomb")
        except picpac.ImageTooLargeError:
            pass
    print(time.perf_counter() - start, next(line for line in open("/proc/self/status")
                                            if line.startswith("VmHWM")).split()[1])
""")


def test_bombs_cost_neither_time_nor_memory(tmp_path):
    gif = tmp_path / "small.gif"
    gif.write_bytes(encoded(".gif"))
    tests = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", BOMB_RSS, str(tests), str(gif)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seconds, max_rss_kib = proc.stdout.split()
    assert float(seconds) < 1 and int(max_rss_kib) < 500 * 1024


def test_the_canvas_of_an_extended_webp():
    bgra = np.dstack([PIXELS, PIXELS[:, :, 0]])
    data = cv2.imencode(".webp", bgra, [cv2.IMWRITE_WEBP_QUALITY, 80])[1].tobytes()
    assert data[12:16] == b"VP8X" and headers.image_size(data) == (53, 37)
    bomb = patched(data, 24, "<HBHB", 0xFFFF, 0xFF, 0xFFFF, 0xFF)  # 2**24 x 2**24
    with pytest.raises(picpac.ImageTooLargeError, match="16777216x16777216"):
        decoding.decode(bomb)


PNG_CHUNK_BOMB = textwrap.dedent("""
    import struct
    import cv2, numpy as np
    import picpac.image
    png = bytearray(cv2.imencode(".png", np.zeros((24, 40, 3), np.uint8))[1].tobytes())
    png[33:37] = struct.pack(">I", 0x7F000050)  # the first chunk after IHDR declares 2 GB
    open("/proc/self/clear_refs", "w").write("5")  # peak RSS from here on
    print(picpac.image.decode(bytes(png)))
    print([int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")][0] >> 10)
""")


def test_a_png_chunk_longer_than_the_file_is_refused_before_opencv_allocates_it():
    done = subprocess.run([sys.executable, "-c", PNG_CHUNK_BOMB], capture_output=True, text=True, timeout=120)
    result, peak_mib = done.stdout.split()
    assert result == "None" and int(peak_mib) < 300, (done.stdout, done.stderr)


def test_image_size_of_hostile_headers():
    image_size = headers.image_size
    assert image_size(b"MM\x00+\x00\x08\x00\x00" + b"\xff" * 8) is None  # a BigTIFF IFD offset past 2**63
    avif = b"\x00\x00\x00\x14ftypavif" + bytes(8) + b"\x00\x00\x00\x1cmeta" + b"\x00\x00\x00\x14ispe" + bytes(4) \
        + struct.pack(">II", 0, 24)
    assert image_size(avif) is None  # a zero width is no size


def scan_bomb(width: int = 16383, height: int = 16383, scans: int = 68) -> bytes:
    """A JPEG whose progressive frame header declares ``width`` x ``height``, with ``scans`` start-of-scan markers in
    all: refused before any decoder reads them."""
    data = bytearray(jpeg_bomb(width, height))
    data[data.index(b"\xff\xc0") + 1] = 0xC2  # progressive
    return bytes(data[:-2]) + b"\xff\xda" * (scans - 1) + b"\xff\xd9"


def test_a_progressive_jpeg_of_too_many_scans_is_refused_from_its_markers():
    """Each scan is a pass over every block: at most MAX_SCANS, and scans x pixels at most SCAN_PASSES images of
    max_pixels (8 scans of a 16383x16383 image at the default limit)."""
    assert decoding.MAX_SCANS == 64 and decoding.SCAN_PASSES == 8
    for scans, width, limit, allowed in ((68, 100, decoding.MAX_PIXELS, 64), (9, 16383, decoding.MAX_PIXELS, 8),
                                         (65, 100, None, 64), (3, 16383, 2**26, 2)):
        bomb = scan_bomb(width, width, scans)
        with pytest.raises(errors.TooManyScansError, match=rf"{width}x{width} in {scans} progressive scans, more than "
                                                           rf"the {allowed} picpac decodes at this size"):
            decoding.check_scans(bomb, width, width, limit)
    decoding.check_scans(scan_bomb(16383, 16383, 8), 16383, 16383)  # at the bound
    for decode in (decoding.decode, lambda data: decoding.decode_channels(data, 3, False, 1, (0, 0, 8, 8))):
        with pytest.raises(errors.ImageTooLargeError, match="68 progressive scans"):  # a kind of ImageTooLargeError
            decode(scan_bomb())
    error = pickle.loads(pickle.dumps(errors.TooManyScansError(10, 20, 70, 64)))
    assert (error.width, error.height, error.scans, error.allowed) == (10, 20, 70, 64)


def test_the_c_decoder_stops_a_progressive_jpeg_at_its_scan_budget_and_checks_the_pixels_itself():
    """The same budget inside libjpeg's progress monitor, for direct calls: 66 scans of a 2048x2048 image stop at scan
    65 (None: decode it another way), 60 decode; a direct call past max_pixels (default 2**28) is a ValueError."""
    if decoding._jpeg is None:
        pytest.skip("picpac's C extension is not built")
    many, fewer = progressive_jpeg(2048, 2048, 66), progressive_jpeg(2048, 2048, 60)
    assert many.count(b"\xff\xda") == 66 and fewer.count(b"\xff\xda") == 60
    assert decoding._jpeg.decode(many, 1, 0, 0, 64, 64, 0, 0) is None
    pixels, x0, width = decoding._jpeg.decode(fewer, 1, 0, 0, 64, 64, 0, 0)
    assert len(pixels) == 64 * width and set(pixels) == {0}
    with pytest.raises(ValueError, match=r"declares more than max_pixels=268435456 pixels"):
        decoding._jpeg.decode(jpeg_bomb(), 1, 0, 0, 8, 8, 1)
    with pytest.raises(ValueError, match=r"max_pixels=100 pixels"):
        decoding._jpeg.decode(fewer, 1, 0, 0, 8, 8, 1, 100)
    out = np.zeros((8, 8, 1), np.uint8)
    assert not decoding._jpeg.sample(many, 1, 0, 0, 8, 8, 0, (0,) * 12, out, 0, False, (), ())


def test_direct_calls_with_hostile_numbers_are_value_errors():
    """Regions past a JPEG's largest side and plans of numbers no int or float32 holds: ValueError, no undefined
    behaviour (UBSan found these: a signed overflow in the region's width, float-to-int casts)."""
    if decoding._jpeg is None:
        pytest.skip("picpac's C extension is not built")
    data = encoded(".jpg")
    out = np.zeros((37, 53, 3), np.uint8)
    for region in ((2**31 - 2, 0, 2**31 - 2, 8), (0, 0, 65536, 8)):
        with pytest.raises(ValueError, match="bad reduction, mode or region"):
            decoding._jpeg.decode(data, 1, *region, 1)
        with pytest.raises(ValueError, match="bad reduction, mode or region"):
            decoding._jpeg.sample(data, 1, *region, 1, (0,) * 12, out, 0, False, (), ())
    for geometry in ((2, 0, 0, 1e300, 0, 0, 0, 1, 0, 0, 53, 37), (float("nan"),) + (0,) * 11, (1e10,) + (0,) * 11):
        with pytest.raises(ValueError, match="not finite or past 1e9"):
            decoding._jpeg.sample(data, 1, 0, 0, 53, 37, 1, geometry, out, 0, False, (), ())
    with pytest.raises(ValueError, match="mean: a value that is not a finite float32"):
        decoding._jpeg.sample(data, 1, 0, 0, 53, 37, 1, (0,) * 12, out.astype(np.float32), 1, False, (1e300,), ())
    assert not decoding.fused_sample(data, 3, False, 1, (0, 0, 53, 37), (1e10,) + (0,) * 11, out, False)  # no raw error
