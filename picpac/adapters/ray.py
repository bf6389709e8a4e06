"""Ray Data adapter (``pip install 'picpac[ray]'``; `picpac docs adapters`, "Ray Data").

* :func:`read_picpac`: a picpac dataset (a file, a list, a glob or a ``.shards`` index) as a
  ``ray.data.Dataset`` of its records, read by :class:`PicpacDatasource`: one read task per range of
  records, at least one per shard.
* :func:`write_picpac`: a Dataset of records written as picpac shards and their ``.shards`` index by
  :class:`PicpacDatasink`, one shard per write task.
* :class:`StreamTransform`: an ImageStream config's decoding and augmentation as a ``map_batches`` function.
* :func:`import_images`: ``picpac import`` of a folder of images (or a list or CSV of them) on the cluster.

A record is a row: a bytes column per field (``image``, ...), ``label`` (float64), ``group`` (int64, null
for none), ``meta`` (the record's meta as compact JSON text, ``""`` for none: JSON text, not a struct,
because records' metas need not share keys) and, from :func:`read_picpac`, ``index`` (the record's
position in the dataset, its shards taken in order). ``picpac.ray`` is this module. Importing it imports
Ray; ``import picpac`` does not.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import image
from ..errors import ImportFailedError, PathExistsError, PicPacTypeError, PicPacValueError, SourceError
from ..file.layout import NO_GROUP
from ..file.remote import RemoteOptions
from ..file.shards import INDEX_SUFFIX, is_index, open_file, resolve, write_index
from ..file.writer import Writer
from ..sources import scan
from ..stream.config import StreamConfig
from ..stream.processor import LazyRng, Processor
from . import require

ray_core = require("ray", "ray")
ray_data = require("ray.data", "ray")
pa = require("pyarrow", "ray")
# base classes (the checker sees ray.data as a module object, its classes as values)
_Datasource: Any = ray_data.Datasource
_Datasink: Any = ray_data.Datasink

__all__ = ["read_picpac", "write_picpac", "import_images", "PicpacDatasource", "PicpacDatasink", "StreamTransform",
           "Written", "RESERVED"]

RESERVED = ("label", "group", "meta", "index")
"""The columns that are no fields; every other column of a record's row is a field of bytes."""
BLOCK_BYTES = 64 << 20
"""A read task yields blocks of about this many bytes of fields (Ray's blocks stay well under its 128 MiB)."""
TASK_BYTES = 16 << 20
"""A shard is split into read tasks of at least this many bytes of records, unless override_num_blocks asks for
more tasks: Ray's default asks for tasks of 1 MiB, and each task costs tens of milliseconds to start."""
TASK_COLUMNS = {"classify": ("label",), "segment": ("mask",), "detect": ("boxes", "counts"),
                "keypoints": ("points", "counts")}
""":class:`StreamTransform`'s columns after ``image``, per task: the stream's batch arrays after the images."""
logger = logging.getLogger(__name__)


# -- reading ---------------------------------------------------------------------------------------------
def _schema(fields: Sequence[str]) -> Any:
    return pa.schema([*((name, pa.binary()) for name in fields), ("label", pa.float64()), ("group", pa.int64()),
                      ("meta", pa.string()), ("index", pa.int64())])


def _meta_text(meta: dict) -> str:
    return json.dumps(meta, separators=(",", ":")) if meta else ""  # the Writer's encoding


def _read_range(path: str, start: int, stop: int, offset: int, fields: tuple[str, ...],
                remote: RemoteOptions | None = None) -> Iterator[Any]:
    """Records ``[start, stop)`` of the shard ``path`` (CRC checked) as tables of about BLOCK_BYTES of fields;
    ``offset``: the dataset position of the shard's first record; ``remote``: how a URL is read."""
    schema = _schema(fields)
    with open_file(path, check=True, remote=remote) as reader:
        begin = start
        while begin < stop:
            columns: dict[str, list] = {name: [] for name in (*fields, "meta")}
            size, end = 0, begin
            while end < stop and (end == begin or size < BLOCK_BYTES):
                record = reader[end]
                for name in fields:
                    value = record.fields.get(name)
                    columns[name].append(None if value is None else bytes(value))
                    size += 0 if value is None else value.nbytes
                columns["meta"].append(_meta_text(record.meta))
                end += 1
            groups = reader.groups[begin:end]
            yield pa.table({**columns, "label": reader.labels[begin:end],
                            "group": pa.array(groups, pa.int64(), mask=groups == NO_GROUP),
                            "index": np.arange(offset + begin, offset + end, dtype=np.int64)}, schema=schema)
            begin = end


def _ranges(counts: Sequence[int], sizes: Sequence[int], parallelism: int, task_bytes: int
            ) -> list[tuple[int, int, int]]:
    """``(shard, start, stop)``: each non-empty shard split into its share of ``parallelism`` ranges (at least one,
    at most one per record or per ``task_bytes`` of its ``sizes``)."""
    total = sum(counts)
    out = []
    for shard, (n, size) in enumerate(zip(counts, sizes)):
        if n:
            k = min(n, max(1, size // task_bytes), max(1, round(parallelism * n / total)))
            out += [(shard, n * j // k, n * (j + 1) // k) for j in range(k)]
    return out


class PicpacDatasource(_Datasource):
    """The records of a picpac dataset (one file, a list, a glob or a ``.shards`` index) for
    ``ray.data.read_datasource``; ``fields``: the field columns (default: every field of the dataset);
    ``task_bytes``: the least bytes of records per read task (but one task per shard at least); ``remote``:
    how shards on object storage (URLs) are read (docs/stream.md, "Object storage")."""

    def __init__(self, paths: Any, *, fields: Sequence[str] | None = None, task_bytes: int = TASK_BYTES,
                 remote: RemoteOptions | None = None):
        super().__init__()
        self.remote = remote
        self.paths = resolve(paths, remote)
        self.task_bytes = max(1, task_bytes)
        self.counts: list[int] = []
        self.sizes: list[int] = []  # each shard's bytes of records
        found: list[str] = []
        for path in self.paths:
            with open_file(path, check=False, remote=remote) as reader:
                self.counts.append(len(reader))
                self.sizes.append(int(reader.index["size"].sum()))
                found += [f for f in reader.fields if f not in found]
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(int).tolist()
        self.fields = tuple(found if fields is None else fields)
        missing = [f for f in self.fields if f not in found]
        if missing:
            raise PicPacValueError(f"{self.paths[0]}: the dataset has no field {missing[0]!r} (its fields: {found}); "
                                   "name fields it has, or fields=None for all")
        clash = [f for f in self.fields if f in RESERVED]
        if clash:
            raise PicPacValueError(f"{self.paths[0]}: field {clash[0]!r} has the name of a column of every row "
                                   f"{RESERVED}; leave it out with fields=[...]")

    def estimate_inmemory_data_size(self) -> int:
        return sum(self.sizes)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[Any]:
        tasks = []
        for shard, start, stop in _ranges(self.counts, self.sizes, max(1, parallelism), self.task_bytes):
            path = self.paths[shard]
            size = self.sizes[shard] * (stop - start) // self.counts[shard]
            read = functools.partial(_read_range, path, start, stop, self.offsets[shard], self.fields, self.remote)
            metadata = ray_data.block.BlockMetadata(num_rows=stop - start, size_bytes=size, exec_stats=None,
                                                    input_files=(path,))
            tasks.append(ray_data.ReadTask(read, metadata, schema=_schema(self.fields),
                                           per_task_row_limit=per_task_row_limit))
        return tasks


def read_picpac(paths: Any, *, fields: Sequence[str] | None = None, override_num_blocks: int | None = None,
                remote: RemoteOptions | None = None, **read_args: Any) -> Any:
    """A ``ray.data.Dataset`` of the records of ``paths`` (a picpac file, a list, a glob or a ``.shards``
    index), one row each (see the module's docstring); ``override_num_blocks``: the number of read tasks to
    aim at (at least one per shard); by default, Ray's number (from the data's size and the cluster's CPUs),
    but no task of less than TASK_BYTES unless its shard is smaller. Other keywords go to
    ``ray.data.read_datasource`` (``concurrency``, ``ray_remote_args``, ...). URLs (``s3://...``) are read
    with ``remote``'s options, in every read task (each task's cache is ``remote.cache_dir`` on its node)."""
    source = PicpacDatasource(paths, fields=fields, task_bytes=1 if override_num_blocks else TASK_BYTES,
                              remote=remote)
    return ray_data.read_datasource(source, override_num_blocks=override_num_blocks, **read_args)


# -- writing ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Written:
    """What :func:`write_picpac` (or :func:`import_images`) wrote: the index file, its shards in order,
    each shard's records, and (import_images) the images skipped."""

    index: str
    shards: list[str]
    counts: list[int]
    skipped: int = 0

    @property
    def records(self) -> int:
        return sum(self.counts)


def _check_schema(schema: Any, path: str) -> None:
    """The columns of the rows written to ``path``: field columns of bytes (at least one), a numeric label, an
    integer group, meta as JSON text or a struct."""
    kinds = {"label": (pa.types.is_integer, pa.types.is_floating), "group": (pa.types.is_integer,),
             "meta": (pa.types.is_string, pa.types.is_large_string, pa.types.is_struct),
             "index": (pa.types.is_integer,)}
    fields = [f for f in schema.names if f not in RESERVED]
    if not fields:
        raise PicPacValueError(f"{path}: the dataset's columns {schema.names} hold no field: a record needs a "
                               "column of bytes, e.g. 'image' with encoded images")
    for column in schema:
        ok = kinds.get(column.name, (pa.types.is_binary, pa.types.is_large_binary))
        if not pa.types.is_null(column.type) and not any(test(column.type) for test in ok):
            field = column.name not in RESERVED
            fix = "encode images first (picpac.image.encode, cv2.imencode) or drop the column (ds.drop_columns)" \
                if field else "see `picpac docs adapters`, \"Ray Data\", for what each column holds"
            raise PicPacTypeError(f"{path}: column {column.name!r} holds {column.type}, which picpac cannot write "
                                  f"as a record's {'field' if field else column.name}; {fix}")


def _record(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The Writer's arguments for one row; ``where`` names the row in errors."""
    fields = {name: value for name, value in row.items() if name not in RESERVED and value is not None}
    if not fields:
        raise PicPacValueError(f"{where}: every field column is null; a record needs at least one field")
    bad = next((name for name, value in fields.items() if not isinstance(value, bytes)), None)
    if bad is not None:
        raise PicPacTypeError(f"{where}: column {bad!r} holds {type(fields[bad]).__name__}, not bytes; encode it "
                              "first or drop the column (ds.drop_columns)")
    meta = row.get("meta")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta else None
        except json.JSONDecodeError as exc:
            raise PicPacValueError(f"{where}: its meta is not valid JSON ({exc}); give a JSON object's text, "
                                   "a dict, or '' for none") from None
    label = row.get("label")
    return {"fields": fields, "label": 0.0 if label is None else label, "group": row.get("group"),
            "meta": meta or None}


class PicpacDatasink(_Datasink):
    """Writes a Dataset of records (see the module's docstring) as picpac shards and their index, for
    ``dataset.write_datasink``.

    ``path``: the index file (a name ending in ``.shards``; its shards ``{stem}-{task:05d}.picpac`` beside it),
    or a folder (made if missing; index ``{prefix}.shards``, shards ``{prefix}-{task:05d}.picpac``). Each write
    task writes one shard with the :class:`Writer` (a temp file renamed when complete, ``metadata`` its dataset
    metadata, e.g. ``{"classes": [...]}``); the index, naming the shards in task order, is written once every
    task is done. ``rows_per_shard``: the rows Ray gathers for each write task (default: a task per block;
    ``dataset.repartition(n)`` makes n). A failed job writes no index (and removes an old one that
    ``overwrite`` replaces); the shards of the tasks that finished stay, complete. ``written``: the
    :class:`Written` after a successful job.
    """

    def __init__(self, path: str | os.PathLike, *, prefix: str = "part", metadata: Mapping[str, Any] | None = None,
                 rows_per_shard: int | None = None, overwrite: bool = False):
        path = os.fspath(path)
        if is_index(path):
            folder, stem = os.path.dirname(path), os.path.basename(path)[:-len(INDEX_SUFFIX)]
        else:
            folder, stem = path, prefix
        self.index = os.path.join(folder, stem + INDEX_SUFFIX)
        self.pattern = os.path.join(folder, stem + "-{:05d}.picpac")
        self.metadata = dict(metadata or {})
        self.overwrite = overwrite
        self.rows_per_shard = rows_per_shard
        self.written: Written | None = None

    @property
    def min_rows_per_write(self) -> int | None:
        return self.rows_per_shard

    def on_write_start(self, schema: Any = None) -> None:
        # (not the schema given: it is the input's of any map fused into the write tasks; write checks each block's)
        if os.path.lexists(self.index):
            if not self.overwrite:
                raise PathExistsError(f"{self.index}: already exists; pass overwrite=True to replace it and its shards")
            os.remove(self.index)  # a failed job leaves no index naming the old shards or the new
        os.makedirs(os.path.dirname(self.index) or ".", exist_ok=True)

    def write(self, blocks: Any, ctx: Any) -> list[tuple[int, str, int]]:
        """One task's rows as the shard ``pattern.format(task)``: ``[(task, path, records)]``, or ``[]`` for no rows."""
        path = self.pattern.format(ctx.task_idx)
        writer = None
        try:
            for block in blocks:
                table = ray_data.block.BlockAccessor.for_block(block).to_arrow()
                _check_schema(table.schema, path)
                for row in table.to_pylist():
                    if writer is None:
                        writer = Writer(path, overwrite=self.overwrite, metadata=self.metadata)
                    where = f"{path}: row {len(writer)}" + \
                        (f" (dataset index {row['index']})" if row.get("index") is not None else "")
                    arguments = _record(row, where)
                    try:
                        writer.append(arguments.pop("fields"), **arguments)
                    except (PicPacTypeError, PicPacValueError) as exc:
                        raise type(exc)(f"{where}: {exc}") from None
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is None:
            return []
        writer.close()
        return [(ctx.task_idx, path, len(writer))]

    def on_write_complete(self, write_result: Any) -> None:
        written = sorted(entry for entries in write_result.write_returns for entry in entries)
        if not written:
            raise PicPacValueError(f"{self.index}: the dataset has no rows; nothing was written")
        write_index(self.index, [path for _, path, _ in written])
        self.written = Written(self.index, [path for _, path, _ in written], [count for _, _, count in written])


def write_picpac(dataset: Any, path: str | os.PathLike, *, prefix: str = "part",
                 metadata: Mapping[str, Any] | None = None, rows_per_shard: int | None = None,
                 overwrite: bool = False, **write_args: Any) -> Written:
    """Write ``dataset``'s rows as picpac shards and their ``.shards`` index (:class:`PicpacDatasink`); other
    keywords go to ``dataset.write_datasink`` (``concurrency``, ``ray_remote_args``)."""
    sink = PicpacDatasink(path, prefix=prefix, metadata=metadata, rows_per_shard=rows_per_shard, overwrite=overwrite)
    dataset.write_datasink(sink, **write_args)
    assert sink.written is not None  # on_write_complete ran: write_datasink returns after it
    return sink.written


# -- decoding and augmenting -----------------------------------------------------------------------------
class _NoIndex:
    """The RNG of a row without an ``index`` column: a random step that draws from it is an error."""

    def __getattr__(self, name: str) -> Any:
        raise PicPacValueError("this config has random steps, seeded per row by its 'index' column, and the rows "
                               "have none: read them with read_picpac, or add a column 'index' of distinct ints")


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """One array of equal-shaped arrays, else an object array of them (Ray's variable-shaped tensors)."""
    if len({a.shape for a in arrays}) <= 1:
        return np.stack(arrays)
    out = np.empty(len(arrays), object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out


class StreamTransform:
    """``dataset.map_batches(StreamTransform(config), batch_format="numpy")``: each row decoded and augmented as
    an ImageStream with the same config makes its sample (its Processor: the same keys, the same pixels).

    Rows are records (see the module's docstring); the output is the stream's batch arrays: ``image`` (stacked,
    or an object array when sizes differ), then ``label`` (classify), ``mask`` (segment), ``boxes`` and ``counts``
    (detect), ``points`` and ``counts`` (keypoints), then the transforms' dense targets ``dense0``, ... and the
    ``index`` column when the rows have it. Random steps draw from the stream's RNG of the row's ``index``
    (``seed``, ``epoch``): the augmentation ImageStream gives that record in that epoch. Stream-only keys
    (``batch``, ``loop``, ``shuffle``, ...) are accepted and ignored.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, epoch: int = 0, **keys: Any):
        given = {**(config.given if isinstance(config, StreamConfig) else config or {}), **keys}
        given.pop("db", None)
        self.config = StreamConfig.from_dict(given)
        self.epoch = epoch
        self._processor: Processor | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_processor": None}  # each worker builds its own

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._processor is None:
            self._processor = Processor.of(self.config)
        processor, seed = self._processor, self.config.order.seed
        names = [name for name in batch if name not in RESERVED]
        count = len(next(iter(batch.values()))) if batch else 0
        labels = np.asarray(batch["label"], np.float64) if "label" in batch else np.zeros(count)
        indexes = batch.get("index")
        records = [int(i) for i in indexes] if indexes is not None else list(range(count))
        images, targets, dense = [], [], []
        for i, record in enumerate(records):
            fields = {name: batch[name][i] for name in names if batch[name][i] is not None}
            rng = LazyRng(seed, self.epoch, 0, record) if indexes is not None else _NoIndex()
            pixels, target, extra = processor.sample(fields, float(labels[i]), record, "Ray Data rows", None, rng)
            images.append(pixels)
            targets.append(target)
            dense.append(extra)
        arrays = processor.targets(targets, labels, records, dense)
        task = self.config.output.task
        assert task is not None, "StreamConfig.from_dict resolves it"
        names = [*TASK_COLUMNS[task]]
        names += [f"dense{k}" for k in range(len(arrays) - len(names))]
        out = {"image": _stacked(images)}
        out.update((name, np.asarray(a, object) if isinstance(a, list) else a) for name, a in zip(names, arrays))
        if indexes is not None:
            out["index"] = indexes
        return out


# -- importing -------------------------------------------------------------------------------------------
def _validated(batch: Any, root: str, max_pixels: int | None, strict: bool) -> Any:
    """The records of the items (path, label, group) in ``batch`` whose image reads and decodes, checked as
    ``picpac import`` checks them; the others are skipped (a warning in the worker's log) or, with ``strict``,
    an ImportFailedError."""
    columns: dict[str, list] = {"image": [], "label": [], "group": [], "meta": []}
    for item in batch.to_pylist():
        shown = os.path.relpath(item["path"], root)
        try:
            data, pixels = image.read_image(item["path"], max_pixels=max_pixels)
        except SourceError as exc:
            if strict:
                raise ImportFailedError(f"{shown}: {exc.reason}; no index was written. Fix or remove the file, or "
                                        "import with strict=False to skip it") from None
            logger.warning("%s: skipped: %s", shown, exc.reason)
            continue
        width, height, channels = image.shape_of(pixels)
        columns["image"].append(data)
        columns["label"].append(item["label"])
        columns["group"].append(item["group"])
        columns["meta"].append(_meta_text({"path": shown, "width": width, "height": height, "channels": channels}))
    return pa.table(columns, pa.schema([("image", pa.binary()), ("label", pa.float64()), ("group", pa.int64()),
                                        ("meta", pa.string())]))


def import_images(src: str | os.PathLike, path: str | os.PathLike, *, format: str = "auto",
                  root: str | os.PathLike | None = None, max_pixels: int | None = image.MAX_PIXELS,
                  strict: bool = False, images_per_shard: int = 1000, overwrite: bool = False) -> Written:
    """``picpac import`` on the cluster: the images ``src`` lists (a folder, class folders, a list or CSV file;
    ``format`` and ``root`` as for `picpac import`) read and validated in Ray tasks, and written by
    :func:`write_picpac` to ``path`` (an index file or a folder) with the source and classes as metadata.

    One task per shard: shards of at most ``images_per_shard`` images, and at least as many as the cluster has
    CPUs. The workers read the image files, so ``src`` must be on storage every node sees. Images that do not
    read or decode, or declare more than ``max_pixels`` pixels, are skipped (``Written.skipped`` counts them,
    the workers' logs name them) or, with ``strict``, fail the import. Sources with annotations or masks (COCO,
    YOLO, annolist, masklist, maskdir) are for `picpac import`.
    """
    if isinstance(images_per_shard, bool) or not isinstance(images_per_shard, int) or images_per_shard < 1:
        raise PicPacValueError(f"images_per_shard must be a positive int, got {images_per_shard!r}")
    listing = scan(src, format, root)
    if not listing.items:
        raise SourceError(f"{src}: no images found ({listing.source}); see `picpac docs import` for the layouts")
    if any(item.annotation is not None or item.mask_path is not None for item in listing.items):
        raise PicPacValueError(f"{src}: {listing.source} has annotations or masks, which import_images does not "
                               "read; import it with `picpac import` (picpac.ingest.import_dataset)")
    items = [{"path": item.path, "label": item.label, "group": item.group} for item in listing.items]
    if not ray_core.is_initialized():
        ray_core.init()  # as Ray Data does on first use; the cluster's CPUs count here
    cpus = int(ray_core.cluster_resources().get("CPU", 1))
    shards = min(len(items), max(-(-len(items) // images_per_shard), cpus))
    dataset = ray_data.from_items(items, override_num_blocks=shards).map_batches(
        functools.partial(_validated, root=listing.root, max_pixels=max_pixels, strict=strict),
        batch_size=None, batch_format="pyarrow")
    metadata: dict[str, Any] = {"source": listing.source}
    if listing.classes:
        metadata["classes"] = listing.classes
    written = write_picpac(dataset, path, metadata=metadata, overwrite=overwrite)
    return replace(written, skipped=len(items) - written.records)
