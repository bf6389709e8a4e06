"""The image layer: decode, measure, shrink and re-encode images with OpenCV.

Decoding only part of a JPEG (a region, at a reduced scale) goes through picpac's optional C
extension ``picpac.image._jpeg`` over the system's libjpeg-turbo; without it every JPEG is decoded whole.

Every decode is bounded by ``max_pixels`` (width x height, default :data:`MAX_PIXELS`), checked on the
size in the image's header before any decoder runs, so a decompression bomb (a tiny file declaring a
huge image) is refused without allocating its pixels; a progressive JPEG's scans are bounded too
(:func:`check_scans`), since each is a pass over the whole image. Images whose header picpac cannot read (see
:mod:`.headers`) are bounded by OpenCV's own limit, the environment variable
``OPENCV_IO_MAX_IMAGE_PIXELS`` (2**30 unless set before cv2 is imported), and checked after decoding.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from ..engine.processes import register_fork_probe
from ..errors import ImageTooLargeError, PicPacValueError, TooManyScansError
from ..file.inputs import read_file, source_error
from .headers import PNG_MAGIC, image_size, jpeg_frame, jpeg_header, png_chunks_fit  # noqa: F401  (jpeg_header: also offered here)

_HEADERS = ("install libjpeg-turbo's headers (Debian/Ubuntu: libjpeg62-turbo-dev, Fedora: libjpeg-turbo-devel, conda: "
            "libjpeg-turbo, Homebrew: jpeg-turbo) and reinstall picpac, or install a picpac wheel, which carries "
            "libjpeg-turbo")


def _fast_path() -> tuple[Any, str | None, str | None]:
    """(picpac.image._jpeg, None, None), or (None, why it is off, how to get it): not built (no libjpeg-turbo headers at
    install, PICPAC_FAST_PATH=off then), built but not loadable (a warning says why), or turned off by
    PICPAC_FAST_PATH=off now."""
    if os.environ.get("PICPAC_FAST_PATH", "").lower() == "off":
        return None, "the environment variable PICPAC_FAST_PATH=off turns it off", "unset PICPAC_FAST_PATH"
    try:
        from . import _jpeg
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}._jpeg":
            raise
        return None, "picpac.image._jpeg was not built (no libjpeg-turbo headers when picpac was installed)", _HEADERS
    except ImportError as exc:  # built, but its libjpeg is gone (or another)
        why = f"picpac.image._jpeg does not load ({exc})"
        warnings.warn(f"picpac's fast path is off: {why}", RuntimeWarning, stacklevel=3)
        return None, why, _HEADERS
    return _jpeg, None, None


_jpeg, _OFF, _HOW = _fast_path()

REGION_DECODE = _jpeg is not None
"""Whether this build has the fast path: the C extension picpac.image._jpeg, built with libjpeg-turbo, which decodes
regions of JPEGs at reduced scales and runs :func:`fused_sample` (picpac's kernels, as the Python path runs them)."""

FAST_PATH_COST = "1.3x to 1.7x"
"""How much faster the fast path streams JPEGs (`picpac docs performance`, "The fast path, off")."""

FAST_PATH_OFF = None if _OFF is None else (
    f"the fast path is off: {_OFF}, so JPEGs are decoded by OpenCV, without region decoding or the fused sample path "
    f"(which streams JPEGs {FAST_PATH_COST} faster); to get it, {_HOW}")
"""Why this build has no fast path, what it costs and how to get it (``stats()["fused_reason"]``, ``picpac --version``,
``picpac bench``); None where it has it."""

FUSED_DTYPES = {np.dtype(np.uint8): 0, np.dtype(np.float32): 1}
"""The output dtypes :func:`fused_sample` writes, and their codes."""

# Extensions cv2.imencode writes; anything else is re-encoded as PNG.
_ENCODABLE = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
_LOSSY = frozenset({".jpg", ".jpeg", ".webp"})
_QUALITY = 95
_QUALITY_PARAMS = {".jpg": [cv2.IMWRITE_JPEG_QUALITY, _QUALITY], ".jpeg": [cv2.IMWRITE_JPEG_QUALITY, _QUALITY],
                   ".webp": [cv2.IMWRITE_WEBP_QUALITY, _QUALITY]}


MAX_PIXELS = 2**28
"""The default limit on an image's width x height (268 million pixels, as Pillow's MAX_IMAGE_PIXELS):
800 MB decoded as 8-bit colour."""

MAX_SIDE = 32766
"""The longest side an output image (a resize, crop, pad or warp target) may have: OpenCV's remap and
warpAffine need sides below 32767 (SHRT_MAX)."""


def check_pixels(width: int, height: int, max_pixels: int | None = MAX_PIXELS) -> None:
    """Raise ImageTooLargeError when ``width * height`` exceeds ``max_pixels`` (None or 0: no limit)."""
    if max_pixels and width * height > max_pixels:
        raise ImageTooLargeError(width, height, max_pixels)


MAX_SCANS = 64
"""The most scans a progressive JPEG may have (libjpeg's standard progression has 6 to 10; the C decoder stops at
this many too)."""

SCAN_PASSES = 8
"""A progressive JPEG's scans times its pixels may be at most this many images of ``max_pixels``: each scan is a
pass over every block, so a few KB of crafted scans over a huge image would cost seconds each."""


def check_scans(data: Any, width: int, height: int, max_pixels: int | None = MAX_PIXELS) -> None:
    """Raise TooManyScansError when the JPEG ``data`` (a non-baseline one: baseline JPEGs have one scan per
    component at most) has more than MAX_SCANS scans, or more than SCAN_PASSES * max_pixels / pixels."""
    allowed = MAX_SCANS if not max_pixels else min(MAX_SCANS, max(1, SCAN_PASSES * max_pixels // (width * height)))
    scans = bytes(data).count(b"\xff\xda")  # SOS: entropy-coded data stuffs every 0xFF, so only markers match
    if scans > allowed:
        raise TooManyScansError(width, height, scans, allowed)


_CHANNEL_FLAGS = {
    (1, 1): cv2.IMREAD_GRAYSCALE, (1, 2): cv2.IMREAD_REDUCED_GRAYSCALE_2, (1, 4): cv2.IMREAD_REDUCED_GRAYSCALE_4,
    (1, 8): cv2.IMREAD_REDUCED_GRAYSCALE_8,
    (3, 1): cv2.IMREAD_COLOR, (3, 2): cv2.IMREAD_REDUCED_COLOR_2, (3, 4): cv2.IMREAD_REDUCED_COLOR_4,
    (3, 8): cv2.IMREAD_REDUCED_COLOR_8,
}
# JPEG has no alpha, so decoding it with orientation applied loses nothing; other formats keep alpha.
_JPEG_AS_SHOWN = cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH


def decode(data: Any, flags: int | None = None, *, max_pixels: int | None = MAX_PIXELS,
           on_damage: Callable[[str], None] | None = None) -> np.ndarray | None:
    """Decode encoded image bytes (any bytes-like object, not copied); None if they are no image.

    By default the image comes out as viewers show it: a JPEG's EXIF orientation is applied
    (picpac's reading of it, ``headers.jpeg_frame``, by picpac: OpenCV is told to ignore it, so every
    path, fused or not, turns a JPEG the same way), other formats keep their channels, alpha and bit depth.
    With flags ``IMREAD_UNCHANGED`` or ``IMREAD_IGNORE_ORIENTATION`` a JPEG stays as stored.
    An image of more than ``max_pixels`` pixels (None or 0: no limit) raises ImageTooLargeError.
    A JPEG cut short (no end-of-image marker after its last scan) is no image, whatever the OpenCV
    (4.x decodes one with its missing rows grey, 5.x refuses it).

    With the fast path, libjpeg-turbo decodes JPEGs here (as OpenCV would: the same pixels) and nothing is printed:
    a JPEG libjpeg warns about (damaged scan data, a bad marker) still decodes, its damaged part filled in, and
    ``on_damage`` (if given) is called with libjpeg's warning. Without the fast path OpenCV decodes JPEGs and prints
    such warnings itself (:data:`FAST_PATH_OFF`).
    """
    return _decoded(data, flags, max_pixels, on_damage)[0]


def _decoded(data: Any, flags: int | None, max_pixels: int | None, on_damage: Callable[[str], None] | None,
             rgb: bool = False) -> tuple[np.ndarray | None, bool]:
    """:func:`decode`'s image, and whether it is RGB already (``rgb``: libjpeg writes a colour JPEG as RGB itself)."""
    buf = np.frombuffer(data, np.uint8)
    if buf.size == 0:
        return None, False
    size = _checked_size(buf, max_pixels)
    if buf[:8].tobytes() == PNG_MAGIC and not png_chunks_fit(buf):
        return None, False
    jpeg = buf[:2].tobytes() == b"\xff\xd8"
    if jpeg and not jpeg_ends(buf):
        return None, False
    if flags is None:
        flags = _JPEG_AS_SHOWN if jpeg else cv2.IMREAD_UNCHANGED
    orientation = 1
    if jpeg and flags != cv2.IMREAD_UNCHANGED:
        frame = jpeg_frame(buf) if not flags & cv2.IMREAD_IGNORE_ORIENTATION else None
        orientation = frame[2] if frame is not None else 1
        flags |= cv2.IMREAD_IGNORE_ORIENTATION
    if jpeg and _jpeg is not None and (size is not None or not max_pixels):
        # (the size was checked; without a limit, OpenCV's own bounds the C call, as it would bound OpenCV)
        decoded = _libjpeg(buf, flags, rgb, on_damage, 0 if max_pixels else _OPENCV_MAX_PIXELS)
        if decoded is not None:
            img, is_rgb = decoded
            return (None if img is None else oriented(img, orientation)), is_rgb
    try:
        img = cv2.imdecode(buf, flags)
    except cv2.error:
        return None, False
    if img is None:
        return None, False
    if size is None:  # a header picpac cannot read: OpenCV's own limit bounded it
        check_pixels(img.shape[1], img.shape[0], max_pixels)
    return oriented(img, orientation), False


_OPENCV_MAX_PIXELS = int(os.environ.get("OPENCV_IO_MAX_IMAGE_PIXELS", 1 << 30))
"""OpenCV's own limit on an image's pixels, which bounds a decode without max_pixels."""

_GRAY, _BGR, _RGB, _STORED = range(4)
# the OpenCV flags (orientation aside) whose decode of a JPEG the C call makes: (mode, reduction)
_LIBJPEG_FLAGS = {
    cv2.IMREAD_UNCHANGED: (_STORED, 1), _JPEG_AS_SHOWN | cv2.IMREAD_IGNORE_ORIENTATION: (_STORED, 1),
    cv2.IMREAD_ANYCOLOR | cv2.IMREAD_IGNORE_ORIENTATION: (_STORED, 1),
    **{flag | cv2.IMREAD_IGNORE_ORIENTATION: (_GRAY if channels == 1 else _BGR, reduction)
       for (channels, reduction), flag in _CHANNEL_FLAGS.items()},
}


def _libjpeg(buf: np.ndarray, flags: int, rgb: bool, on_damage: Callable[[str], None] | None,
             limit: int) -> tuple[np.ndarray | None, bool] | None:
    """(image or None, whether RGB) as the C call decodes the JPEG ``buf`` with OpenCV's ``flags``, no image when it
    declares more than ``limit`` pixels (0: none); None where OpenCV must (other flags, CMYK). libjpeg's warnings go
    to ``on_damage``."""
    mode, reduction = _LIBJPEG_FLAGS.get(flags, (None, 1))
    if mode is None:
        return None
    is_rgb = rgb and mode == _BGR
    try:
        answer = _jpeg.image(buf, reduction, _RGB if is_rgb else mode, limit)
    except ValueError:  # over the limit: no image, as OpenCV answers
        return None, False
    if answer is None:
        return None
    pixels, width, height, channels, warnings, message = answer
    if pixels is None:
        return None, False
    if warnings and on_damage is not None:
        on_damage(message if warnings == 1 else f"{message} (and {warnings - 1} more libjpeg warnings)")
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.frombuffer(pixels, np.uint8).reshape(shape), is_rgb


def oriented(img: np.ndarray, orientation: int) -> np.ndarray:
    """``img`` as EXIF ``orientation`` (1 to 8) says to show it: mirrored, turned, or transposed (exact)."""
    if orientation in (5, 6, 7, 8):
        img = img.swapaxes(0, 1)
    flip = {2: (1, -1), 3: (-1, -1), 4: (-1, 1), 6: (1, -1), 7: (-1, -1), 8: (-1, 1)}.get(orientation)
    if flip is None:
        return img if orientation == 1 else np.ascontiguousarray(img)
    return np.ascontiguousarray(img[::flip[0], ::flip[1]])


def jpeg_ends(data: Any) -> bool:
    """Whether a JPEG has an end-of-image marker after its last start of scan (entropy-coded data stuffs every 0xFF,
    so only markers match): without one it was cut short."""
    buf = np.frombuffer(data, np.uint8)
    if buf[-2:].tobytes() == b"\xff\xd9":  # the usual end: no copy, no search
        return True
    b = buf.tobytes()
    end = b.rfind(b"\xff\xd9")  # (a search from the end finds a marker near it soon, the last start of scan late)
    return end >= 0 and b.find(b"\xff\xda", end) < 0


def _checked_size(data: Any, max_pixels: int | None) -> tuple[int, int] | None:
    """The header's (width, height) after check_pixels (and check_scans for a progressive JPEG), or None when there
    is no limit or no readable header."""
    if not max_pixels:
        return None
    frame = jpeg_frame(data)
    size = image_size(data) if frame is None else frame[:2]
    if size is not None:
        check_pixels(*size, max_pixels)
    if frame is not None and not frame[3]:
        check_scans(data, *frame[:2], max_pixels)
    return size


def read_image(path: str, *, max_pixels: int | None = MAX_PIXELS, option: str = "max_pixels=",
               on_damage: Callable[[str], None] | None = None) -> tuple[bytes, np.ndarray]:
    """The bytes of the image file ``path`` and the image they decode to, as ``picpac import`` checks every
    image. A file that cannot be read (missing, not a regular file, too large) or decoded, or whose header
    declares more than ``max_pixels``, is a SourceError whose ``reason`` says why; ``option`` names the setting
    that raises the limit. ``on_damage`` is :func:`decode`'s."""
    data = read_file(path)
    return data, checked_image(data, path, max_pixels=max_pixels, option=option, on_damage=on_damage)


def checked_image(data: Any, where: str, *, max_pixels: int | None = MAX_PIXELS, option: str = "max_pixels=",
                  on_damage: Callable[[str], None] | None = None) -> np.ndarray:
    """The image ``data`` decodes to, as ``picpac import`` checks every image: bytes that do not decode, or whose
    header declares more than ``max_pixels``, are a SourceError naming ``where`` whose ``reason`` says why;
    ``option`` names the setting that raises the limit. ``on_damage`` is :func:`decode`'s."""
    try:
        img = decode(data, max_pixels=max_pixels, on_damage=on_damage)
    except ImageTooLargeError as exc:
        raise source_error(where, f"image of {exc.advice(option)}") from None
    if img is None:
        raise source_error(where, "cannot decode (corrupt, truncated or not an image)")
    return img


def shape_of(img: np.ndarray) -> tuple[int, int, int]:
    """(width, height, channels) of a decoded image."""
    height, width = img.shape[:2]
    return width, height, 1 if img.ndim == 2 else img.shape[2]


def shrink(img: np.ndarray, max_size: int, *, nearest: bool = False) -> np.ndarray | None:
    """``img`` resized so that its longer side is ``max_size``, or None when it already fits.

    ``nearest`` resizes by nearest neighbour, which keeps the values of label masks; otherwise
    INTER_AREA averages (the right filter for shrinking photographs).
    """
    width, height, _ = shape_of(img)
    longer = max(width, height)
    if longer <= max_size:
        return None
    size = (max(1, round(width * max_size / longer)), max(1, round(height * max_size / longer)))
    return cv2.resize(img, size, interpolation=cv2.INTER_NEAREST if nearest else cv2.INTER_AREA)


def encode(img: np.ndarray, ext: str, *, lossless: bool = False, quality: int = _QUALITY) -> bytes:
    """Encode ``img`` in the format of file extension ``ext`` (JPEG/WebP at ``quality``, 95 by default).

    ``lossless`` (for masks) and extensions OpenCV cannot write give PNG instead.
    """
    ext = ext.lower()
    if ext not in _ENCODABLE or (lossless and ext in _LOSSY):
        ext = ".png"
    params = _QUALITY_PARAMS.get(ext, [])
    ok, buf = cv2.imencode(ext, img, params[:1] + [int(quality)] if params else [])
    if not ok:
        raise PicPacValueError(f"OpenCV could not encode a {img.dtype} image of shape {img.shape} as {ext}")
    return buf.tobytes()


REDUCTIONS = (4, 2, 1)
"""The scales a JPEG is decoded at (1/4, 1/2, 1/1): libjpeg's DCT scaling skips most of the work.
Its 1/8 scale is left out: it keeps only each block's DC term (32.6 dB against an area-averaged
full decode where 1/4 gives 53.7 dB) and decoded no faster than 1/4 here."""


Region = tuple[int, int, int, int]
"""(x, y, width, height) in pixels."""


def decode_channels(data: Any, channels: int, rgb: bool, reduction: int = 1, region: Region | None = None, *,
                    max_pixels: int | None = MAX_PIXELS,
                    on_damage: Callable[[str], None] | None = None) -> np.ndarray | None:
    """Decode to 1 or 3 channels (or, for -1, as stored); ``rgb`` reorders OpenCV's BGR(A) to RGB(A).

    ``reduction`` 2 or 4 decodes a JPEG at that fraction of its size (1 or 3 channels only;
    other formats decode at full size, which the caller sees from the shape).

    ``region`` (in pixels of the reduced image) asks for that part alone: with REGION_DECODE, a
    JPEG is decoded only as far down as the region reaches, and only the columns around it are
    reconstructed (whole rows for sampling factors libjpeg cannot crop exactly at a reduced scale),
    giving exactly the pixels a whole decode has there. The region is ignored where that cannot be
    done (no extension, CMYK JPEGs, progressive JPEGs missing part of their coefficients, damaged
    JPEGs, other formats), and the caller tells the two answers apart by their shape. The JPEG's
    EXIF orientation is not applied to a region: pass one only for upright JPEGs.

    ``max_pixels`` bounds the whole image's size, as in :func:`decode`, whatever the reduction and region;
    ``on_damage`` is :func:`decode`'s (a damaged JPEG is decoded whole, its region ignored).
    """
    size = _checked_size(data, max_pixels)
    # the C extension runs only on a checked size (or without a limit); OpenCV bounds the rest itself
    if region is not None and _jpeg is not None and channels in (1, 3) and (size is not None or not max_pixels):
        pixels = _decode_region(data, channels, rgb, reduction, region)
        if pixels is not None:
            return pixels
    img, is_rgb = _decoded(data, _CHANNEL_FLAGS.get((channels, reduction)), None if size is not None else max_pixels,
                           on_damage, rgb)
    if rgb and not is_rgb and img is not None and img.ndim == 3 and img.shape[2] in (3, 4):
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB if img.shape[2] == 3 else cv2.COLOR_BGRA2RGBA)
    return img


def _decode_region(data: Any, channels: int, rgb: bool, reduction: int, region: Region) -> np.ndarray | None:
    x, y, width, height = region
    # one more column each side: libjpeg's chroma upsampling at the edge of a cropped row would
    # otherwise lack its neighbour and differ from a whole decode there
    left = max(0, x - 1)
    mode = 0 if channels == 1 else 2 if rgb else 1
    try:  # the size was checked: no limit here
        answer = _jpeg.decode(data, reduction, left, y, width + x - left + 1, height, mode, 0)
    except ValueError:  # a region the C call does not take: OpenCV decodes the image (a MemoryError is the caller's)
        return None
    if answer is None:
        return None
    pixels, first, row_width = answer
    if x + width > first + row_width:  # the region reaches past the right edge
        return None
    rows = np.frombuffer(pixels, np.uint8).reshape((height, row_width, channels) if channels > 1 else (height, row_width))
    return rows[:, x - first:x - first + width]


def opencv_probe() -> None:
    """What a forked worker runs first (``engine.processes.register_fork_probe``): OpenCV calls that take
    its thread pool's and its thread-local storage's locks, which a fork may have copied locked."""
    image = np.zeros((64, 64, 3), np.uint8)
    cv2.warpAffine(image, np.float32([[1, 0.1, 0], [0.1, 1, 0]]), (48, 48))
    cv2.resize(image, (32, 32), interpolation=cv2.INTER_AREA)
    cv2.imdecode(cv2.imencode(".png", image)[1], cv2.IMREAD_COLOR)


register_fork_probe(opencv_probe)


def fused_sample(data: Any, channels: int, rgb: bool, reduction: int, region: Region, geometry: tuple,
                 out: np.ndarray, channel_first: bool, mean: tuple = (), std: tuple = ()) -> bool:
    """One sample in one C call without the GIL: ``region`` of a JPEG decoded at 1/``reduction`` (as
    :func:`decode_channels` decodes it), mapped by ``geometry`` (``sample.fused_geometry``), then written into
    ``out`` (uint8 or float32, C-contiguous) as ``transforms.convert`` writes it, with ``mean`` and ``std`` (0, 1
    or one value per channel; float32 only). The same bytes as the Python path (the same kernels). False, ``out``
    untouched, when the JPEG cannot be decoded this way (CMYK, damaged, progressive with scans missing) or the C call
    refuses the plan or runs out of memory: the caller then takes its Python path, never a raw C error."""
    mode = 0 if channels == 1 else 2 if rgb else 1
    try:  # the caller checked the size: no limit here
        return _jpeg.sample(data, reduction, *region, mode, geometry, out, FUSED_DTYPES[out.dtype], channel_first,
                            mean, std, 0)
    except (ValueError, MemoryError):  # a plan the C call does not take, or no memory for it: the Python path
        return False

