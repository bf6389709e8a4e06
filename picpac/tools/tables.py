"""``picpac import --from parquet|arrow|mds``: the rows of a table (Hugging Face's Parquet and Arrow, MosaicML's MDS)
as records, every image checked on worker threads as ``picpac import`` checks image files, detection columns as
shapes. The records stream from the table a batch at a time, so memory stays bounded however large it is."""
from __future__ import annotations

import math
import os
import time
from contextlib import closing
from functools import partial
from typing import Any

from tqdm import tqdm

from .. import image
from ..engine.threads import ordered_map
from ..errors import ImportFailedError, PicPacValueError, SourceError
from ..file.reader import Record
from ..file.shards import INDEX_SUFFIX
from ..file.sizes import parse_size
from ..sources.base import annotation_json, rect_json, shape_json
from ..stores import TABLE_KINDS, open_reader
from ..stores.base import output_errors
from ..stores.hf import BBOX_FORMATS, boxes
from .ingest import _WINDOW_PER_THREAD, ImportReport, _check_positive, _check_target, _checked_image, _Skip, _writer


def import_table(src: str | os.PathLike, db: str | os.PathLike, kind: str, *, image_column: str | None = None,
                 label_column: str | None = None, bbox_format: str = "xywh", threads: int | None = None,
                 strict: bool = False, max_pixels: int | None = image.MAX_PIXELS, keep_damaged: bool = False,
                 overwrite: bool = False, progress: bool | None = None,
                 shard_size: int | str | None = None) -> ImportReport:
    """Import the rows of the ``kind`` table ``src`` (one of ``TABLE_KINDS``: a Parquet file, folder or glob; a
    ``save_to_disk`` folder; an MDS folder) into database ``db``.

    ``image_column`` and ``label_column`` name the columns [default: what the features say: the first Image,
    the first ClassLabel]; ClassLabel names become the classes, scalar columns the meta, and a detection column
    (``objects`` with ``bbox`` and ``category`` lists) an ``annotation`` of ``rect`` shapes, its boxes in pixels
    as ``bbox_format`` says (``xywh`` or ``xyxy``). The image bytes are stored as they are. A row whose image is
    null, does not decode, is damaged (unless ``keep_damaged``) or declares more than ``max_pixels``, or whose
    label is null, is skipped and listed in the report (``strict``: the import fails, writing nothing).
    ``threads``, ``overwrite``, ``progress`` and ``shard_size`` are :func:`picpac.ingest.import_dataset`'s."""
    start = time.perf_counter()
    src, db = os.fspath(src), os.fspath(db)
    if kind not in TABLE_KINDS:
        raise PicPacValueError(f"{src}: {kind!r} is no table format; one of {', '.join(TABLE_KINDS)}")
    if bbox_format not in BBOX_FORMATS:
        raise PicPacValueError(f"bbox_format (--bbox-format) must be one of {', '.join(BBOX_FORMATS)}, "
                               f"got {bbox_format!r}")
    threads = _check_positive("threads", (os.cpu_count() or 1) if threads is None else threads)
    limit = None if shard_size is None else parse_size(shard_size, "shard size")
    if limit is not None and not db.endswith(INDEX_SUFFIX):
        db = (db[:-len(".picpac")] if db.endswith(".picpac") else db) + INDEX_SUFFIX
    _check_target(db, overwrite)
    with open_reader(src, kind, image_column=image_column, label_column=label_column) as reader:
        table = getattr(reader, "table", None)
        objects = table.objects if table is not None else None
        field = table.image_field if table is not None else reader.fields[0]
        source = f"{kind} {os.path.abspath(src)}"
        metadata = {**{k: v for k, v in reader.metadata.items() if k != "fields"}, "source": source}
        check = partial(_check, field=field, objects=objects, bbox_format=bbox_format, max_pixels=max_pixels,
                        keep_damaged=keep_damaged)
        skipped: list[tuple[str, str]] = []
        damaged: list[tuple[str, str]] = []
        source_bytes = 0
        with (output_errors(db), _writer(db, limit, overwrite, metadata) as writer,
              tqdm(total=len(reader), unit="row", disable=None if progress is None else not progress) as bar,
              closing(ordered_map(check, reader, threads, _WINDOW_PER_THREAD * threads,
                                  name="picpac-import")) as results):
            for record, result in results:
                outcome = result.get()
                bar.update()
                if isinstance(outcome, str):
                    entry = (reader.where(record.index), outcome)
                    if strict:
                        raise ImportFailedError(f"{entry[0]}: {entry[1]}; nothing was written. Fix or remove the "
                                                "row, or import without --strict (strict=False) to skip it")
                    skipped.append(entry)
                    continue
                fields, meta, damage = outcome
                writer.append(fields, label=record.label, group=record.group, meta=meta or None)
                source_bytes += sum(len(v) for v in fields.values())
                if damage:
                    damaged.append((reader.where(record.index), damage))
            count = len(writer)
            if not count:
                first = f"; first problem: {skipped[0][0]}: {skipped[0][1]}" if skipped else ""
                raise ImportFailedError(f"{src}: none of its {len(skipped)} rows could be imported, nothing "
                                        f"was written{first}")
    classes = metadata.get("classes")
    paths = list(writer.paths) if limit is not None else None
    return ImportReport(db, count, skipped, sum(os.path.getsize(p) for p in paths) if paths else os.path.getsize(db),
                        source_bytes, time.perf_counter() - start, source, shards=paths, classes=classes,
                        damaged=damaged)


def _check(record: Record, field: str, objects: str | None, bbox_format: str, max_pixels: int | None,
           keep_damaged: bool) -> tuple[dict[str, bytes], dict[str, Any], str | None] | str:
    """On a worker thread: the record's fields and meta to write (its detection column made an annotation) and
    what libjpeg said of a damaged image, or why the row is skipped."""
    if field not in record.fields:
        return f"no image (null in the image column {field!r})"
    if math.isnan(record.label):
        return "its label is null"
    damage: list[str] = []
    try:
        img = _checked_image(bytes(record.fields[field]), f"row {record.index}", "", max_pixels, damage,
                             keep_damaged)
    except _Skip as skip:
        return str(skip)
    fields = {name: bytes(value) for name, value in record.fields.items()}
    meta = dict(record.meta)
    if objects is not None:
        width, height, _ = image.shape_of(img)
        try:
            found = boxes(meta.pop(objects, None) or [], f"column {objects!r}", bbox_format)
        except SourceError as exc:
            return str(exc)
        fields["annotation"] = annotation_json([
            shape_json("rect", rect_json(x / width, y / height, w / width, h / height), label)
            for x, y, w, h, label in found])
    return fields, meta, "; ".join(damage) or None

