"""`picpac dump`: what a stream config makes of a database, as PNGs and an HTML page (PicPac's picpac-stream).

The samples come from an :class:`~picpac.stream.image_stream.ImageStream` with the given config, so their
pixels are the stream's. A last transform, :func:`keep_annotations`, passes each sample's record, label
and shapes (in output pixels, after every augmentation) to the batch as one more dense target; they are
drawn over the image (outlines of boxes, polygons, ellipses and points, with their labels), a segmentation
mask is blended in, and the record's label is written in the corner. ``index.html`` shows every PNG.
The folder is built under a temporary name and renamed into place when complete.
"""
from __future__ import annotations

import html
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import yaml

from ..errors import PathExistsError, PicPacValueError
from ..file import durable
from ..file.shards import open_database
from ..image.shapes import KINDS, Shapes
from ..image.transforms import Sample
from ..stores.base import output_errors
from ..stream.config import GROUP_OF, StreamConfig
from ..stream.processor import Processor
from ..stream.image_stream import ImageStream
from .bench import parse_settings
from .downsize import Progress, bar_of, check_positive
from .drawing import WHITE, blend_mask, caption, class_name, draw_boxes, draw_shapes
from .info import what_classes_name

DENSE_KEY = "picpac.dump"
"""The name of the dense target :func:`keep_annotations` adds."""
_OWN_FILES = "index.html"


@dataclass
class DumpReport:
    """What :func:`dump` wrote."""

    db: str
    out: str
    samples: int
    seconds: float

    def summary(self) -> str:
        """One line."""
        return (f"dumped {self.samples} samples of {self.db} as PNGs into {self.out} "
                f"(index.html shows them) in {self.seconds:.1f} s")


def load_config(items: Sequence[str]) -> dict[str, Any]:
    """Stream keys from YAML or JSON files and ``key=value`` pairs, later ones overriding earlier ones."""
    config: dict[str, Any] = {}
    for item in items:
        if "=" in item and not os.path.isfile(item):
            config.update(parse_settings([item]))
            continue
        try:
            with open(item, encoding="utf-8") as file:
                loaded = yaml.safe_load(file)
        except OSError as exc:
            raise PicPacValueError(f"{item}: cannot read the config file ({exc.strerror}); give a YAML or JSON "
                                   "file of stream keys, or key=value pairs") from None
        except yaml.YAMLError as exc:
            raise PicPacValueError(f"{item}: is not valid YAML or JSON ({exc})") from None
        if not isinstance(loaded, Mapping):
            raise PicPacValueError(f"{item}: must hold a mapping of stream keys (`batch: 8`), not "
                                   f"{type(loaded).__name__}; see `picpac docs stream` for the keys")
        config.update(loaded)
    return config


def keep_annotations(sample: Sample, rng: Any) -> Sample:
    """A transform that adds the table :data:`DENSE_KEY` to the sample's dense targets: a first row
    ``record, label, has shapes, 0, 0, 0``, then one row ``shape, part, kind, label, x, y`` per point of
    its shapes, in output pixels. It reads nothing else and draws no random numbers."""
    shapes = sample.shapes
    rows = [np.array([[sample.record, sample.label, shapes is not None, 0, 0, 0]], np.float64)]
    if shapes is not None and len(shapes.points):
        counts = np.diff(shapes.starts)
        parts = np.repeat(np.arange(len(counts)), counts)
        owner = shapes.owner[parts]
        kinds = np.array([KINDS.index(kind) for kind in shapes.kinds], np.float64)[owner]
        rows.append(np.column_stack([owner, parts, kinds, shapes.labels[owner], shapes.points]))
    dense = {**sample.extra.get("dense", {}), DENSE_KEY: np.concatenate(rows)}
    sample.extra = {**sample.extra, "dense": dense}  # (a new dict: a cached sample's is shared)
    return sample


def names_annotations(config: Mapping[str, Any]) -> bool:
    """Whether a config itself says which annotations to read (``annotate`` or ``annotation_field``)."""
    return bool({"annotate", "annotation_field"} & set(config))


def annotated_config(config: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``config`` that reads a database's annotations (``annotate='any'`` when it names none and ``fields`` has
    ``annotation`` or ``mask``; no fields: none added) and ends with :func:`keep_annotations`, for
    :func:`drawn_samples`. The images it makes are ``config``'s, pixel for pixel."""
    config = dict(config)
    if not names_annotations(config) and {"annotation", "mask"} & set(fields):
        config["annotate"] = "any"
    transforms = StreamConfig.from_dict({"transforms": config.get("transforms", ())}).augment.transforms
    config["transforms"] = [*transforms, keep_annotations]
    return config


def dump(db: str | os.PathLike, out: str | os.PathLike, config: Mapping[str, Any] | None = None, *, count: int = 16,
         seed: int | None = None, annotations: bool = True, overwrite: bool = False,
         progress: Progress | None = None) -> DumpReport:
    """Stream ``count`` samples of ``db`` with ``config`` (stream keys) and write them to the folder ``out``.

    With ``annotations``, the database's annotations are read (``annotate='any'`` unless the config says
    otherwise) and drawn; without, every PNG holds exactly the stream's pixels. ``seed`` overrides the
    config's. An existing ``out`` is replaced only with ``overwrite``, and only when it is an earlier dump.
    """
    start = time.perf_counter()
    db, out = os.fspath(db), os.fspath(out)
    check_positive("count", count)
    config = dict(config or {})
    config.pop("db", None)
    if seed is not None:
        config["seed"] = seed
    remote = StreamConfig.from_dict({k: v for k, v in config.items()
                                     if GROUP_OF.get(k) == "remote" or k == "timeout"}).remote_options()
    with open_database(db, check=False, remote=remote) as reader:  # a file, a URL or shards, as the stream takes
        fields, classes, classes_of = reader.fields, reader.classes, what_classes_name(reader.metadata.get("source"))
    shape_masks = names_annotations(config)
    config = annotated_config(config, fields if annotations else ())
    _check_out(out, overwrite)
    temp = durable.temp_path(durable.target(out))
    with output_errors(out):
        durable.remove_stale_temps(durable.target(out))
        os.mkdir(temp)
        lock = durable.lock(temp)
        try:
            entries = _write(db, temp, config, count, annotations, shape_masks, classes, classes_of, progress)
            _write_index(temp, db, entries)
            _replace(temp, out)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        finally:
            if lock is not None:
                os.close(lock)
    return DumpReport(db, out, len(entries), time.perf_counter() - start)


def _check_out(out: str, overwrite: bool) -> None:
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise PathExistsError(f"{out}: already exists; pass --overwrite (overwrite=True) to replace it")
    if not os.path.isdir(out) or os.path.islink(out) or not all(
            name == _OWN_FILES or name.endswith(".png") for name in os.listdir(out)):
        raise PicPacValueError(f"{out}: is not a folder that `picpac dump` wrote (PNGs and index.html); not "
                               "replacing it: name a new folder")


def _replace(temp: str, out: str) -> None:
    """Move the finished folder ``temp`` to ``out``; an earlier dump there is renamed aside, then removed."""
    durable.fsync_path(temp)
    aside = None
    if os.path.isdir(out):
        aside = durable.temp_path(durable.target(out))
        os.replace(out, aside)
    os.replace(temp, out)
    durable.fsync_directory(os.path.dirname(os.path.abspath(out)))
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _write(db: str, folder: str, config: dict[str, Any], count: int, annotations: bool, shape_masks: bool,
           classes: list[str], classes_of: str, progress: Progress | None) -> list[tuple[str, int, float]]:
    """Stream and write the PNGs; (name, record, label) of each."""
    entries: list[tuple[str, int, float]] = []
    with ImageStream(db, **config) as stream, bar_of(progress, count) as bar:
        processor = Processor.of(stream.config)
        while len(entries) < count:
            try:
                batch = next(stream)
            except StopIteration:  # loop=False: one pass
                break
            for picture, record, label in drawn_samples(batch, stream.config, classes, classes_of, annotations,
                                                        shape_masks, processor):
                if len(entries) == count:
                    break
                name = f"{len(entries):05d}.png"
                ok, encoded = cv2.imencode(".png", picture)
                if not ok:
                    raise PicPacValueError(f"OpenCV could not encode sample {len(entries)} of shape {picture.shape}")
                with open(os.path.join(folder, name), "wb") as file:
                    file.write(encoded.tobytes())
                entries.append((name, record, label))
                if bar is not None:
                    bar.update(1)
    if not entries:
        raise PicPacValueError(f"{db}: the stream gave no samples; check the config (split, split_fold, ...)")
    return entries


def drawn_samples(batch: tuple, c: StreamConfig, classes: list[str], classes_of: str,
                  annotations: bool = True, shape_masks: bool = False,
                  processor: Processor | None = None) -> list[tuple[np.ndarray, int, float]]:
    """(picture, record, label) of each sample of ``batch`` (padding left out), from a stream of config ``c`` whose
    last transform is :func:`keep_annotations`: the picture in OpenCV's BGR, with the mask blended in, the shapes'
    outlines and classes (named by ``classes`` where ``classes_of`` is "shapes") and the record's label drawn over
    it when ``annotations``; with ``task='detect'``, the boxes the batch holds too (where the shapes were turned,
    the boxes around them). A segmentation mask of shapes is blended in only with ``shape_masks`` (when the config
    itself asked for them: else the outlines say the same), a mask image always. ``processor``: ``c``'s, made once
    by a caller that draws many batches."""
    processor = processor or Processor.of(c)
    table = batch[len(batch) - 2 - len(c.decode.raw)]
    pixels = _as_bgr(np.asarray(batch[0]), processor)
    mask = batch[1] if c.output.task == "segment" and c.decode.annotate != "auto" and annotations else None
    samples = []
    for i in range(len(pixels) - batch[-1]):
        record, label, has_shapes = table[i, 0, :3].tolist()
        picture = pixels[i]
        if annotations:
            picture = _drawn(picture, table[i, 1:], None if mask is None or has_shapes and not shape_masks else
                             _plane(mask[i], processor), label, classes, classes_of)
            if c.output.task == "detect":
                draw_boxes(picture, batch[1][i, :batch[2][i]])
        samples.append((picture, int(record), label))
    return samples


def shape_labels(rows: np.ndarray) -> np.ndarray:
    """The label of each shape in a sample's rows of :func:`keep_annotations` (its first row left out)."""
    rows = rows[rows[:, 0] >= 0]  # (padding rows of the batch's table: -1)
    return rows[np.unique(rows[:, 0], return_index=True)[1], 3]


def _as_bgr(images: np.ndarray, p: Processor) -> np.ndarray:
    """The batch's images as uint8 (B, H, W, C) in OpenCV's BGR order: the processor's mean and std undone,
    rounded, clipped."""
    hwc = images.transpose(0, 2, 3, 1) if p.channel_first else images
    if hwc.dtype != np.uint8:
        values = hwc.astype(np.float64)
        if p.std is not None:
            values = values * p.std.astype(np.float64)
        if p.mean is not None:
            values = values + p.mean.astype(np.float64)
        hwc = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    if hwc.shape[3] == 3 and p.rgb:
        hwc = hwc[..., ::-1]
    if hwc.shape[3] == 4 and p.rgb:
        hwc = hwc[..., [2, 1, 0, 3]]
    return np.ascontiguousarray(hwc)


def _plane(mask: np.ndarray, p: Processor) -> np.ndarray:
    """A segmentation target as one (H, W) plane of class ids (one-hot: the argmax)."""
    hwc = mask.transpose(1, 2, 0) if p.channel_first else mask
    return hwc.argmax(2) if p.outputs.onehot else hwc[:, :, 0]


def _drawn(picture: np.ndarray, rows: np.ndarray, mask: np.ndarray | None, label: float, classes: list[str],
           classes_of: str) -> np.ndarray:
    """``picture`` (BGR) with the mask blended in, the shapes' outlines and labels, and the record's label."""
    canvas = cv2.cvtColor(picture, cv2.COLOR_GRAY2BGR) if picture.shape[2] == 1 else picture[:, :, :3].copy()
    if mask is not None:
        blend_mask(canvas, mask)
    rows = rows[rows[:, 0] >= 0]  # (padding rows of the batch's table: -1)
    if len(rows):
        draw_shapes(canvas, _shapes(rows), classes if classes_of == "shapes" else [])
    caption(canvas, class_name(label, classes if classes_of == "labels" else []), (2, 12), WHITE)
    return canvas


def _shapes(rows: np.ndarray) -> Shapes:
    """The shapes of :func:`keep_annotations`' rows (draw_shapes colours them)."""
    starts = np.unique(rows[:, 1], return_index=True)[1]  # (the rows run part by part, shape by shape)
    owner = rows[starts, 0].astype(np.int64)
    order = np.unique(owner, return_index=True)[1]
    labels = rows[starts[order], 3]
    kinds = [KINDS[int(code)] for code in rows[starts[order], 2]]
    bounds = np.append(starts, len(rows))
    return Shapes(rows[:, 4:6].copy(), bounds, owner, kinds, labels, [(0.0,)] * len(kinds), np.full(len(kinds), np.nan))


def _write_index(folder: str, db: str, entries: list[tuple[str, int, float]]) -> None:
    """index.html: a grid of the PNGs, each with its sample number, record and label."""
    figures = "\n".join(
        f'<figure><a href="{html.escape(name)}"><img src="{html.escape(name)}" alt="sample {k}"></a>'
        f"<figcaption>#{k} record {record} label {html.escape(f'{label:g}')}</figcaption></figure>"
        for k, (name, record, label) in enumerate(entries))
    title = html.escape(f"picpac dump of {db}")
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title><style>"
            "body{font-family:sans-serif}figure{display:inline-block;margin:4px;text-align:center}"
            "img{max-width:256px;max-height:256px;image-rendering:pixelated}</style></head>\n"
            f"<body><h1>{title}</h1>\n{figures}\n</body></html>\n")
    with open(os.path.join(folder, "index.html"), "w", encoding="utf-8") as file:
        file.write(page)
