"""`picpac downsize`: a copy of a database whose images are at most N pixels on their longer side.

Images that fit are copied byte for byte; larger ones are shrunk (INTER_AREA) and re-encoded in their own
format, and their masks (the ``mask`` field, or an ``annotation`` field that holds an image) are shrunk to
the same size by nearest neighbour, so class ids are never blended. PicPac's JSON annotations are in
coordinates relative to the image (0..1) and stay as they are. Labels, groups, meta and other fields are
kept; ``width``/``height`` in a record's meta follow the image. The helpers here are shared with
:mod:`.crop`: checking the output, the output's metadata, decoding a record's field under the pixel limit.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from .. import image
from ..engine.threads import ordered_map
from ..errors import ImageTooLargeError, PathExistsError, PicPacValueError
from ..file.reader import Reader
from ..file.writer import Writer
from ..image.decoding import MAX_SIDE
from ..stores.base import output_errors
from ..stores.tar import image_extension

Progress = Callable[[int], Any]
"""``progress(total)`` returns a bar with ``update(n)`` and ``close()`` (tqdm), as the CLI's ``_bar`` does."""


@dataclass
class DownsizeReport:
    """What :func:`downsize` did."""

    db: str
    out: str
    max_size: int
    records: int
    resized: int
    masks: int
    """Masks shrunk with their image."""
    bytes_in: int
    bytes_out: int
    seconds: float

    def summary(self) -> str:
        """One line."""
        return (f"downsized {self.resized} of {self.records} records of {self.db} to at most {self.max_size} px "
                f"({self.records - self.resized} copied unchanged, {self.masks} masks resized) into {self.out}: "
                f"{self.bytes_in:,} -> {self.bytes_out:,} bytes in {self.seconds:.1f} s")


def check_output(path: str, overwrite: bool) -> None:
    """Refuse an existing ``path`` (unless ``overwrite``) or a directory, before any work is done."""
    if os.path.isdir(path):
        raise PicPacValueError(f"{path}: is a directory; name the database file to create, e.g. {path}/data.picpac")
    if os.path.lexists(path) and not overwrite:
        raise PathExistsError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it")


def check_positive(name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise PicPacValueError(f"{name} must be an int {bounds}, got {value!r}")
    return value


def output_metadata(reader: Reader, tool: str, key: str, **settings: Any) -> dict[str, Any]:
    """The source's dataset metadata for a database derived by `picpac TOOL` (not its fields, arrays or
    creation), plus ``{key: {"from": source, **settings}}``."""
    if reader.arrays:
        raise PicPacValueError(f"{reader.path}: stores fixed-shape arrays ({', '.join(reader.arrays)}), not encoded "
                               f"images; `picpac {tool}` works on encoded images (a stream's keys resize arrays)")
    metadata = {k: v for k, v in reader.metadata.items() if k not in ("fields", "arrays", "created")}
    metadata[key] = {"from": reader.path, **settings}
    return metadata


def decode_field(reader: Reader, index: int, name: str, data: Any, max_pixels: int | None,
                 flags: int | None = None) -> np.ndarray:
    """Record ``index``'s field ``name`` decoded, under ``max_pixels``; an error naming the record and the fix."""
    try:
        pixels = image.decode(data, flags, max_pixels=max_pixels)
    except ImageTooLargeError as exc:
        raise PicPacValueError(f"{reader.path}: record {index} has a {name!r} {exc.advice('--max-pixels')}") from None
    if pixels is None:
        raise PicPacValueError(f"{reader.path}: record {index} cannot decode its {name!r} field; run `picpac verify "
                               f"--decode {reader.path}` to list such records, and drop or re-import them")
    return pixels


def mask_fields(record: Any, image_field: str) -> list[str]:
    """The fields of ``record`` that hold a mask image: ``mask``, and ``annotation`` when it is an image."""
    return [name for name in ("mask", "annotation")
            if name != image_field and name in record.fields and image_extension(record.fields[name]) is not None]


def encode_like(pixels: np.ndarray, source: Any, *, lossless: bool = False, quality: int = 95) -> bytes:
    """``pixels`` encoded in the format of the encoded image ``source`` (PNG where OpenCV cannot write it)."""
    return image.encode(pixels, "." + (image_extension(source) or "png"), lossless=lossless, quality=quality)


@contextmanager
def bar_of(progress: Progress | None, total: int) -> Iterator[Any]:
    """The progress bar ``progress(total)`` gives, closed at the end; None without one."""
    bar = progress(total) if progress is not None else None
    try:
        yield bar
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()


def threads_of(threads: int | None) -> int:
    return check_positive("threads", (os.cpu_count() or 1) if threads is None else threads)


def downsize(db: str | os.PathLike, out: str | os.PathLike, max_size: int, *, quality: int = 95,
             image_field: str = "image", overwrite: bool = False, max_pixels: int | None = image.MAX_PIXELS,
             threads: int | None = None, progress: Progress | None = None) -> DownsizeReport:
    """Write ``out``: ``db`` with every image whose longer side exceeds ``max_size`` shrunk to it.

    JPEG and WebP are re-encoded at ``quality``; PNG and the other formats losslessly. ``out`` is written
    through a temporary file and appears only when complete; an existing one is replaced only with
    ``overwrite``. Images (and masks) whose header declares more than ``max_pixels`` pixels are refused.
    """
    start = time.perf_counter()
    db, out = os.fspath(db), os.fspath(out)
    check_positive("max_size", max_size, 1, MAX_SIDE)
    check_positive("quality", quality, 0, 100)
    threads = threads_of(threads)
    check_output(out, overwrite)
    resized = masks = 0
    with Reader(db) as reader:
        if image_field not in reader.fields and len(reader):
            raise PicPacValueError(f"{db}: has no field {image_field!r} (its fields: {reader.fields}); name the "
                                   "field of the images with --image-field")
        metadata = output_metadata(reader, "downsize", "downsized", max_size=max_size)

        def work(index: int) -> tuple[Any, dict[str, Any], dict[str, Any], int]:
            return _downsized(reader, index, max_size, quality, image_field, max_pixels)

        with (output_errors(out), Writer(out, overwrite=overwrite, metadata=metadata) as writer,
              bar_of(progress, len(reader)) as bar,
              closing(ordered_map(work, range(len(reader)), threads, 4 * threads, name="picpac-downsize")) as results):
            for _, outcome in results:
                record, fields, meta, shrunk = outcome.get()
                writer.append(fields, label=record.label, group=record.group, meta=meta or None)
                resized += shrunk > 0
                masks += max(0, shrunk - 1)
                if bar is not None:
                    bar.update(1)
            count = len(writer)
    return DownsizeReport(db, out, max_size, count, resized, masks, os.path.getsize(db), os.path.getsize(out),
                          time.perf_counter() - start)


def _downsized(reader: Reader, index: int, max_size: int, quality: int, image_field: str,
               max_pixels: int | None) -> tuple[Any, dict[str, Any], dict[str, Any], int]:
    """(record, its fields, its meta, 0 if unchanged else 1 + the masks shrunk) for record ``index``."""
    record = reader[index]
    fields: dict[str, Any] = dict(record.fields)
    meta = record.meta
    data = fields.get(image_field)
    if data is None:
        return record, fields, meta, 0
    size = image.image_size(data)
    if size is not None:
        try:
            image.check_pixels(*size, max_pixels)
        except ImageTooLargeError as exc:
            raise PicPacValueError(f"{reader.path}: record {index} has a {image_field!r} "
                                   f"{exc.advice('--max-pixels')}") from None
        if max(size) <= max_size:
            return record, fields, meta, 0
    pixels = decode_field(reader, index, image_field, data, max_pixels)
    small = image.shrink(pixels, max_size)
    if small is None:
        return record, fields, meta, 0
    fields[image_field] = encode_like(small, data, quality=quality)
    height, width = small.shape[:2]
    for name in mask_fields(record, image_field):
        mask = decode_field(reader, index, name, fields[name], max_pixels, cv2.IMREAD_UNCHANGED)
        if mask.shape[:2] != pixels.shape[:2]:
            raise PicPacValueError(f"{reader.path}: record {index} has a {mask.shape[1]}x{mask.shape[0]} {name!r} "
                                   f"mask for a {pixels.shape[1]}x{pixels.shape[0]} image; a mask must match its "
                                   "image (fix or drop the record)")
        shrunk = cv2.resize(mask, (width, height), interpolation=cv2.INTER_NEAREST)
        fields[name] = encode_like(shrunk, fields[name], lossless=True)
    if isinstance(meta, dict) and "width" in meta and "height" in meta:
        meta = {**meta, "width": width, "height": height}
    return record, fields, meta, 1 + len(mask_fields(record, image_field))
