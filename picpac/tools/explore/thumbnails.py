"""Pictures of records for the explorer: thumbnails (made on demand, kept in a bounded LRU cache) and the
record page's image with its annotation drawn over it. Decoding goes through picpac.image with the pixel
limit, so a decompression bomb in a database is refused, not decoded."""
from __future__ import annotations

import threading
from collections import OrderedDict

import cv2
import numpy as np

from ...errors import PicPacError
from ...file.reader import Reader
from ...image.decoding import decode, shrink
from ...image.headers import image_size
from ...image.shapes import Shapes
from ..drawing import blend_mask, draw_shapes
from ..info import what_classes_name

THUMB_SIDE = 160
VIEW_SIDE = 1024
MAX_PIXELS = 2**26
"""The largest image (width x height, from its header) the explorer decodes."""
CACHE_BYTES = 64 << 20

class NoImage(PicPacError):
    """A record has no picture to show (no image field, bytes that are no image, a damaged record)."""


class LRUBytes:
    """A thread-safe LRU cache of bytes values, bounded by their total size."""

    def __init__(self, limit: int = CACHE_BYTES):
        self.limit = limit
        self.size = 0
        self._items: OrderedDict[object, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: object, value: bytes) -> None:
        if len(value) > self.limit:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self.size += len(value) - (len(old) if old is not None else 0)
            self._items[key] = value
            while self.size > self.limit:
                _, dropped = self._items.popitem(last=False)
                self.size -= len(dropped)

    def __len__(self) -> int:
        return len(self._items)


def image_field(reader: Reader) -> str | None:
    """The field that holds the picture: ``image`` when there is one, else the first field."""
    fields = reader.fields
    return "image" if "image" in fields else (fields[0] if fields else None)


def record_image(reader: Reader, i: int) -> np.ndarray:
    """Record ``i``'s picture as 8-bit BGR (H, W, 3); NoImage when it has none."""
    field = image_field(reader)
    if field is None:
        raise NoImage(f"record {i}: the database has no fields")
    if field in reader.arrays:
        return _array_image(reader.array(i, field), i)
    record = reader.read(i, check=False)
    if field not in record:
        raise NoImage(f"record {i} has no {field!r} field")
    img = decode(record[field], cv2.IMREAD_COLOR, max_pixels=MAX_PIXELS)
    if img is None:
        raise NoImage(f"record {i}: field {field!r} holds no image picpac can decode")
    return img


def _array_image(array: np.ndarray, i: int) -> np.ndarray:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise NoImage(f"record {i}: an array of shape {array.shape} is no image")
    if array.dtype != np.uint8:
        lo, hi = float(np.nanmin(array)), float(np.nanmax(array))
        array = ((array - lo) * (255.0 / (hi - lo) if hi > lo else 0.0)).astype(np.uint8)
    if array.ndim == 2:
        return cv2.cvtColor(array, cv2.COLOR_GRAY2BGR)
    return array[:, :, :3][:, :, ::-1].copy() if array.shape[2] == 3 else cv2.cvtColor(array, cv2.COLOR_RGBA2BGR)


def thumbnail(reader: Reader, i: int, cache: LRUBytes) -> bytes:
    """Record ``i``'s thumbnail as JPEG bytes (longer side at most THUMB_SIDE), from the cache when there."""
    key = ("thumb", id(reader), i)
    data = cache.get(key)
    if data is None:
        img = record_image(reader, i)
        small = shrink(img, THUMB_SIDE)
        img = img if small is None else small
        data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])[1].tobytes()
        cache.put(key, data)
    return data


def annotated(reader: Reader, i: int) -> bytes:
    """Record ``i``'s image (longer side at most VIEW_SIDE) with its annotation drawn over it, as PNG."""
    img = record_image(reader, i)
    small = shrink(img, VIEW_SIDE)
    img = img if small is None else small
    fields = [name for name in ("annotation", "mask") if name in reader.fields]  # as picpac dump draws them
    if fields:
        record = reader.read(i, check=False)
        named = what_classes_name(reader.metadata.get("source")) == "shapes"
        for name in fields:
            if name in record and record[name].nbytes:
                img = _draw(img, record[name], reader.classes if named else [])
    return cv2.imencode(".png", img)[1].tobytes()


def _draw(img: np.ndarray, annotation: memoryview, classes: list[str]) -> np.ndarray:
    """Shapes (PicPac JSON, normalised coordinates) outlined with their classes; a mask image blended in."""
    height, width = img.shape[:2]
    if bytes(annotation[:1]) in (b"{", b" ", b"\n"):
        try:
            shapes = Shapes.from_json(annotation, width, height)
        except PicPacError:
            return img
        draw_shapes(img, shapes, classes, thickness=max(1, round(max(width, height) / 400)))
        return img
    size = image_size(annotation)
    if size is None or size[0] * size[1] > MAX_PIXELS:
        return img
    mask = decode(annotation, cv2.IMREAD_GRAYSCALE, max_pixels=MAX_PIXELS)
    if mask is None:
        return img
    blend_mask(img, cv2.resize(mask, (width, height), interpolation=cv2.INTER_NEAREST))
    return img


def probe_size(reader: Reader, i: int) -> tuple[int, int] | None:
    """Record ``i``'s (width, height) from its image header (or its array's shape), without decoding."""
    field = image_field(reader)
    if field is None:
        return None
    if field in reader.arrays:
        shape = reader.arrays[field].shape
        return (shape[1], shape[0]) if len(shape) >= 2 else None
    record = reader.read(i, check=False)
    return image_size(record[field]) if field in record else None
