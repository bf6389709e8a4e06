"""The importer: validate the images of a source on worker threads and write them to a database."""
from __future__ import annotations

import os
import time
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import image
from ..engine.threads import ordered_map
from ..errors import ImportFailedError, PathExistsError, PicPacValueError, SourceError
from ..file.inputs import read_file
from ..file.layout import load_json
from ..file.shards import INDEX_SUFFIX, write_index
from ..file.sizes import parse_size
from ..file.writer import Writer
from ..image.decoding import checked_image
from ..sources import SourceItem, centres_to_continuous, scan
from ..stores.base import output_errors

_WINDOW_PER_THREAD = 4
"""Items in flight per worker thread: enough to keep the workers busy, few enough to bound memory."""
_CLASSES_SHOWN = 5
"""Class names the summary line shows: enough to see at once whether the labels are mapped right."""


@dataclass
class ImportReport:
    """What :func:`import_dataset` did."""

    db: str
    count: int
    skipped: list[tuple[str, str]]
    """(image path, reason) for every item left out."""
    bytes: int
    """Size of the database file."""
    source_bytes: int
    """Bytes of the image and mask files that were imported."""
    seconds: float
    source: str
    """The format and path of the source, e.g. "list /data/train.txt"."""
    shards: list[str] | None = None
    """With ``shard_size``: the shard files, in order (``db`` is then their index file)."""
    asked: str | None = None
    """With ``shard_size``: the database path given, when the index took another name (``.shards``)."""
    classes: list[str] | None = None
    """The class names written (metadata ``classes``, indexed by class id, "" for unnamed ids)."""
    damaged: list[tuple[str, str]] = field(default_factory=list)
    """(image path, what libjpeg said) for every damaged JPEG imported (``keep_damaged``)."""

    def summary(self) -> str:
        """Multi-line report: what was imported with the classes, then every skipped file and why."""
        rate = self.count / self.seconds if self.seconds > 0 else 0.0
        lines = [f"imported {self.count} records from {self.source} into {self.db} "
                 f"({self.bytes / 1e6:.1f} MB" + (f" in {len(self.shards)} shards" if self.shards else "")
                 + f") in {self.seconds:.1f} s, {rate:.0f} img/s; {_classes_line(self.classes)}"]
        if self.asked:
            lines.append(f"the shards' index is {self.db}, not {self.asked} (a shard index is no database file): "
                         f"open {self.db} (ImageStream, picpac info, verify, merge, split)")
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)}:")
            lines += [f"  {path}: {reason}" for path, reason in self.skipped]
        if self.damaged:
            lines.append(f"imported {len(self.damaged)} damaged (--keep-damaged), served as libjpeg fills them in:")
            lines += [f"  {path}: {reason}" for path, reason in self.damaged]
        return "\n".join(lines)


def _classes_line(classes: list[str] | None) -> str:
    """``3 classes: cat, dog, bird``, the first few only; with unnamed ids (gaps) each name with its id."""
    named = [(i, name) for i, name in enumerate(classes or ()) if name]
    if not named:
        return "no class names"
    if len(named) == len(classes):
        head, what = [name for _, name in named[:_CLASSES_SHOWN]], f"{len(named)} classes"
    else:
        head = [f"{i} {name}" for i, name in named[:_CLASSES_SHOWN]]
        what = f"{len(named)} classes (ids {named[0][0]}-{named[-1][0]})"
    return f"{what}: {', '.join(head)}" + (", ..." if len(named) > _CLASSES_SHOWN else "")


@dataclass
class _Record:
    fields: dict[str, bytes]
    meta: dict[str, Any]
    source_bytes: int
    damage: str | None = None
    """What libjpeg said of the image or mask (kept with ``keep_damaged``)."""


class _Skip(Exception):
    """An item is left out; the message says why."""


def import_dataset(src: str | os.PathLike, db: str | os.PathLike, *, format: str = "auto",
                   root: str | os.PathLike | None = None, threads: int | None = None, strict: bool = False,
                   max_size: int | None = None, max_pixels: int | None = image.MAX_PIXELS,
                   overwrite: bool = False, progress: bool | None = None,
                   labels: str | os.PathLike | None = None,
                   classes: str | os.PathLike | None = None,
                   shard_size: int | str | None = None, label_kind: str = "auto",
                   label_column: str | int | None = None,
                   class_name_column: str | int | None = None, keep_damaged: bool = False) -> ImportReport:
    """Import the images of ``src`` (laid out as ``format``, a name or PicPac's number; `picpac docs import`) into database ``db``.

    Every image (and mask) is decoded once on ``threads`` threads to check it; missing or
    undecodable files are skipped and listed in the report, or with ``strict`` fail the import; so are
    damaged JPEGs (libjpeg warns: "Corrupt JPEG data ..."; its warning is the reason), which ``keep_damaged``
    imports instead, listing them in the report's ``damaged``; so are
    images (and masks) whose header declares more than ``max_pixels`` pixels (None or 0: no limit),
    refused before they are decoded, and files that are no regular files (a FIFO, a device, a
    directory) or hold more than ``MAX_FILE_BYTES``, refused unread. A write that fails (a full disk)
    is a FileIOError naming ``db``.
    Original bytes are stored unchanged unless ``max_size`` makes an image's longer side shrink.
    ``db`` is written only when the import succeeds. ``progress`` shows a progress bar (default:
    when stderr is a terminal). ``labels`` (the folder of YOLO label files or masks) and ``classes``
    (a YOLO dataset YAML or a text file of class names) apply to the formats yolo, yolo-seg and maskdir;
    ``label_kind`` (auto, numbers, names: what the label column holds; auto refuses a column mixing the two),
    ``label_column`` and ``class_name_column`` (a column's number or header name) to list and csv.
    With ``shard_size`` (bytes, or a size such as "500MB", "1GB", "1GiB") the records go to shards beside
    ``db`` and ``db`` names their index file: ``db`` itself when it ends in ``.shards``, else ``db`` with
    ``.shards`` for ``.picpac`` (or added; the report says so), so that no tool takes the index for a
    database. The shards are ``{stem}-00000.picpac``, ... (``stem``: the index's name), a new one begun when
    the current one holds ``shard_size`` bytes of records; each shard is written crash-safely and the index
    last, so a failed import leaves no index (and removes the shards it wrote).
    """
    start = time.perf_counter()
    src, db = os.fspath(src), os.fspath(db)
    threads = _check_positive("threads", (os.cpu_count() or 1) if threads is None else threads)
    if max_size is not None:
        _check_positive("max_size", max_size)
    if max_pixels:
        _check_positive("max_pixels", max_pixels)
    limit = None if shard_size is None else parse_size(shard_size, "shard size")
    asked = db
    if limit is not None and not db.endswith(INDEX_SUFFIX):
        db = (db[:-len(".picpac")] if db.endswith(".picpac") else db) + INDEX_SUFFIX
    _check_target(db, overwrite)
    listing = scan(src, format, None if root is None else os.fspath(root), labels=labels, classes=classes,
                   label_kind=label_kind, label_column=label_column, class_name_column=class_name_column)
    if not listing.items:
        raise SourceError(f"{src}: no images found ({listing.source}); see `picpac docs import` for the layouts")
    metadata: dict[str, Any] = {"source": listing.source}
    if listing.classes:
        metadata["classes"] = listing.classes
    load = partial(_load, root=listing.root, max_size=max_size, max_pixels=max_pixels, keep_damaged=keep_damaged)
    skipped: list[tuple[str, str]] = []
    damaged: list[tuple[str, str]] = []
    source_bytes = 0
    with (output_errors(db),
          _writer(db, limit, overwrite, metadata) as writer,
          tqdm(total=len(listing.items), unit="img", disable=None if progress is None else not progress) as bar,
          closing(ordered_map(load, listing.items, threads, _WINDOW_PER_THREAD * threads,
                              name="picpac-import")) as results):
        for item, result in results:
            outcome = result.get()
            bar.update()
            if isinstance(outcome, str):
                entry = (_shown(item.path, listing.root), f"{outcome} ({item.line})" if item.line else outcome)
                if strict:
                    raise ImportFailedError(f"{entry[0]}: {entry[1]}; nothing was written. Fix or remove the "
                                            "file, or import without --strict (strict=False) to skip it")
                skipped.append(entry)
                continue
            writer.append(outcome.fields, label=item.label, group=item.group, meta=outcome.meta)
            source_bytes += outcome.source_bytes
            if outcome.damage is not None:
                damaged.append((outcome.meta["path"], outcome.damage))
        count = len(writer)
        if not count:
            raise ImportFailedError(f"{src}: none of its {len(skipped)} images could be imported, nothing "
                                    f"was written; first problem: {skipped[0][0]}: {skipped[0][1]}")
    if limit is None:
        return ImportReport(db, count, skipped, os.path.getsize(db), source_bytes, time.perf_counter() - start,
                            listing.source, classes=listing.classes, damaged=damaged)
    return ImportReport(db, count, skipped, sum(os.path.getsize(p) for p in writer.paths), source_bytes,
                        time.perf_counter() - start, listing.source, shards=list(writer.paths),
                        asked=None if asked == db else asked, classes=listing.classes, damaged=damaged)


def _writer(db: str, limit: int | None, overwrite: bool, metadata: dict[str, Any]) -> Any:
    return Writer(db, overwrite=overwrite, metadata=metadata) if limit is None else \
        _ShardWriter(db, limit, overwrite, metadata)


class _ShardWriter:
    """A Writer that rolls over to a new shard ``{stem}-{k:05d}.picpac`` beside the index ``{stem}.shards`` once
    the current one holds ``limit`` bytes of records; on a clean exit the index is written, on a failure the
    shards written are removed (and the current one aborted), so no index names a missing shard."""

    def __init__(self, db: str, limit: int, overwrite: bool, metadata: dict[str, Any]):
        self.db, self.limit, self.overwrite, self.metadata = db, limit, overwrite, metadata
        stem = os.path.basename(db)[:-len(INDEX_SUFFIX)]
        self.pattern = os.path.join(os.path.dirname(db), f"{stem}-{{:05d}}.picpac")
        self.paths: list[str] = []
        self.current: Writer | None = None
        self.bytes = self.count = 0

    def __enter__(self) -> _ShardWriter:
        if self.overwrite and os.path.lexists(self.db):
            # the new shards replace the old ones as they go: an old index left after a failure would name
            # shards that are gone or are the new import's
            os.remove(self.db)
        return self

    def append(self, fields: dict[str, bytes], **keys: Any) -> None:
        size = sum(len(v) for v in fields.values()) + len(str(keys.get("meta"))) + 16
        if self.current is None or (len(self.current) and self.bytes + size > self.limit):
            if self.current is not None:
                self.current.close()
            self.paths.append(self.pattern.format(len(self.paths)))
            self.current, self.bytes = Writer(self.paths[-1], overwrite=self.overwrite, metadata=self.metadata), 0
        self.current.append(fields, **keys)
        self.bytes += size
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None and self.count:
                self.current.close()
                write_index(self.db, self.paths)
                return
        except BaseException:
            self._discard()
            raise
        self._discard()

    def _discard(self) -> None:
        if self.current is not None and not self.current.closed:
            self.current.abort()
        for path in self.paths:
            if os.path.exists(path):
                os.unlink(path)


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PicPacValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_target(db: str, overwrite: bool) -> None:
    if os.path.isdir(db):
        raise PicPacValueError(f"{db}: is a directory; name the database file to create, e.g. {db}/data.picpac")
    if os.path.exists(db) and not overwrite:
        raise PathExistsError(f"{db}: already exists; pass --overwrite (overwrite=True) to replace it")


def _load(item: SourceItem, root: str, max_size: int | None, max_pixels: int | None,
          keep_damaged: bool = False) -> _Record | str:
    """Read and check one item (on a worker thread): the record to write, or why it is skipped."""
    damage: list[str] = []
    try:
        data, img = _read_image(item.path, "", max_pixels, damage, keep_damaged)
        fields = {"image": data}
        if item.annotation is not None:
            fields["annotation"] = _checked_json(item.annotation)
            if item.pixel_centres:
                fields["annotation"] = centres_to_continuous(fields["annotation"], img.shape[1], img.shape[0])
        if item.mask_path is not None:
            what = f"mask {_shown(item.mask_path, root)}: "
            mask_data, mask = _read_image(item.mask_path, what, max_pixels, damage, keep_damaged)
            if mask.shape[:2] != img.shape[:2]:
                raise _Skip(f"{what}{_size(mask)} but the image is {_size(img)}; a mask must match its image")
            fields["mask"] = mask_data
    except _Skip as skip:
        return str(skip)
    source_bytes = len(data) + len(fields.get("mask", b""))
    if max_size is not None:
        fields["image"], img = _fit(data, img, item.path, max_size, nearest=False)
        if item.mask_path is not None:
            fields["mask"], _ = _fit(fields["mask"], mask, item.mask_path, max_size, nearest=True)
    width, height, channels = image.shape_of(img)
    meta = {"path": _shown(item.path, root), "width": width, "height": height, "channels": channels}
    return _Record(fields, meta, source_bytes, "; ".join(damage) or None)


def _read_image(path: str, what: str, max_pixels: int | None, damage: list[str],
                keep_damaged: bool) -> tuple[bytes, np.ndarray]:
    """The bytes of an image file and the image they decode to (:func:`_checked_image`); ``what`` prefixes skip
    reasons. A file that is not a regular one (a FIFO, a device, a directory) or too large is skipped unread."""
    try:
        data = read_file(path)
    except SourceError as exc:
        raise _Skip(f"{what}{exc.reason}") from None
    return data, _checked_image(data, path, what, max_pixels, damage, keep_damaged)


def _checked_image(data: bytes, where: str, what: str, max_pixels: int | None, damage: list[str],
                   keep_damaged: bool) -> np.ndarray:
    """The image ``data`` (from ``where``) decodes to, checked as import checks every image, else a _Skip whose
    reason ``what`` prefixes: a damaged JPEG is skipped, or with ``keep_damaged`` kept, libjpeg's warning added to
    ``damage``."""
    warned: list[str] = []
    try:
        img = checked_image(data, where, max_pixels=max_pixels, option="--max-pixels (max_pixels=)",
                            on_damage=warned.append)
    except SourceError as exc:
        raise _Skip(f"{what}{exc.reason}") from None
    if warned and not keep_damaged:
        raise _Skip(f"{what}damaged JPEG (libjpeg: {warned[0]}); --keep-damaged (keep_damaged=True) imports it as "
                    "libjpeg fills it in")
    damage += [f"{what}{warning}" for warning in warned]
    return img


def _checked_json(annotation: bytes) -> bytes:
    load_json(annotation, lambda why: _Skip(f"annotation is not valid JSON ({why})"))
    return annotation


def _fit(data: bytes, img: np.ndarray, path: str, max_size: int, nearest: bool) -> tuple[bytes, np.ndarray]:
    """``data`` and ``img`` shrunk and re-encoded when the longer side exceeds ``max_size``."""
    small = image.shrink(img, max_size, nearest=nearest)
    if small is None:
        return data, img
    return image.encode(small, os.path.splitext(path)[1], lossless=nearest), small


def _size(img: np.ndarray) -> str:
    width, height, _ = image.shape_of(img)
    return f"{width}x{height}"


def _shown(path: str, root: str) -> str:
    """``path`` relative to ``root``, or absolute when it lies outside ``root``."""
    rel = os.path.relpath(path, root)
    return path if rel.split(os.sep)[0] == os.pardir else rel
