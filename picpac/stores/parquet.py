"""Parquet, as Hugging Face's ``datasets`` writes and reads it (needs ``pyarrow``: ``pip install picpac[parquet]``).

Reading takes a file, a folder (every ``*.parquet`` under it, in sorted order) or a glob, whose columns are
read as their features say (:mod:`.hf`): the images' bytes as they are, ClassLabel ids as labels and their
names as the classes, scalar columns as meta. Iteration streams record batches of a few rows, so memory stays
bounded however large the files; ``r[i]`` reads the row group that holds record i (random access costs a row
group, as Parquet has no index of rows). Writing makes what ``datasets.load_dataset("parquet", ...)`` loads
with an Image and a ClassLabel feature, plus picpac's own schema metadata, so that picpac -> parquet -> picpac
keeps every record.
"""
from __future__ import annotations

import bisect
import glob
import importlib
import itertools
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, MissingPathError, PicPacValueError, SourceError
from ..file.reader import Record
from ..file.sizes import parse_size
from . import hf
from .base import StoreReader, StoreWriter, TableReader, check_regular

ROW_GROUP_ROWS = 100
"""Rows per row group written: what ``datasets`` writes for image datasets."""
BATCH_ROWS = 16
"""Rows per record batch read while iterating: a few MB of images in memory at a time."""
_BUFFER = 1 << 20
"""pyarrow reads column chunks through a buffer of this size, page by page, not a whole chunk at once; and it
reads no row group ahead (``pre_buffer=False``: with it pyarrow fetches every row group of the file at once)."""


def _parquet_module() -> Any:
    hf.pyarrow()
    return importlib.import_module("pyarrow.parquet")


def table_files(path: str, suffix: str, kind: str) -> list[str]:
    """The files of a table: ``path`` itself, every ``*suffix`` under the folder ``path`` (sorted), or a glob's."""
    if os.path.isdir(path):
        found = sorted(os.path.join(root, name) for root, dirs, names in os.walk(path) for name in names
                       if name.endswith(suffix) and not name.startswith("."))
        if not found:
            raise SourceError(f"{path}: a folder without {suffix} files; pass a {kind} file, a folder of them or a "
                              "glob")
        return found
    if os.path.exists(path) or not glob.has_magic(path):
        if not os.path.exists(path):
            raise MissingPathError(f"{path}: no such {kind} file or folder")
        check_regular(path, kind)
        return [path]
    found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
    if not found:
        raise MissingPathError(f"{path}: no {kind} file matches this pattern")
    return found


class ParquetReader(TableReader):
    """Reads Parquet files as Hugging Face's ``datasets`` writes them (:mod:`picpac.stores.hf`); ``image_column``
    and ``label_column`` name the columns where the features say nothing (or name others)."""

    kind = "parquet"

    def __init__(self, path: str | os.PathLike, *, check: bool = True, image_column: str | None = None,
                 label_column: str | None = None):
        given = os.fspath(path)
        self._files = table_files(given, ".parquet", self.kind)
        super().__init__(given if os.path.exists(given) else os.path.dirname(self._files[0]) or ".", check=check,
                         image_column=image_column, label_column=label_column)
        self.path = given

    def _open(self) -> None:
        pq = _parquet_module()
        self._damage = (*StoreReader._damage, hf.pyarrow().lib.ArrowException)
        self._metas = [pq.read_metadata(f) for f in self._files]
        schema = self._metas[0].schema.to_arrow_schema()
        for name, meta in zip(self._files[1:], self._metas[1:]):
            other = meta.schema.to_arrow_schema()
            if other.names != schema.names or other.types != schema.types:
                raise FormatError(f"{name}: its columns differ from {self._files[0]}'s; a dataset's files share "
                                  "one schema (import them one by one)")
        self.table = hf.layout(schema, hf.schema_features(schema, self._files[0]), self._files[0],
                               self.image_column, self.label_column)
        if self.table.image is None and not self.table.fields:
            raise SourceError(f"{self._files[0]}: no column of images (an Image feature, or binary); columns: "
                              f"{', '.join(schema.names)}; name it with --image-column")
        self._starts = [0]
        self._groups: list[list[int]] = []
        for meta in self._metas:
            rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            self._groups.append(list(itertools.accumulate(rows, initial=self._starts[-1])))
            self._starts.append(self._starts[-1] + meta.num_rows)
        self._count = self._starts[-1]
        image = [self.table.image_field] if self.table.image else []
        self.metadata = {**self.table.metadata, "fields": [*image, *self.table.fields]}
        self._cached: tuple[tuple[int, int], Any] | None = None

    def where(self, i: int) -> str:
        """``file: row r`` of record ``i``."""
        k = bisect.bisect_right(self._starts, i) - 1
        return f"{self._files[k]}: row {i - self._starts[k]}"

    def _read(self, i: int) -> Record:
        k = bisect.bisect_right(self._starts, i) - 1
        g = bisect.bisect_right(self._groups[k], i) - 1
        if self._cached is None or self._cached[0] != (k, g):
            with _parquet_module().ParquetFile(self._files[k], buffer_size=_BUFFER, pre_buffer=False) as f:
                self._cached = (k, g), f.read_row_group(g, columns=self.table.columns, use_threads=False)
        rows = self._cached[1].slice(i - self._groups[k][g], 1).to_batches()
        return self._record(i, *next(hf.batch_rows(rows[0], self.table)))

    def __iter__(self) -> Iterator[Record]:
        """Every record in order, read a batch of :data:`BATCH_ROWS` rows at a time."""
        index = 0
        pq = _parquet_module()
        for name in self._files:
            with pq.ParquetFile(name, buffer_size=_BUFFER, pre_buffer=False) as f:
                batches = f.iter_batches(batch_size=BATCH_ROWS, columns=self.table.columns, use_threads=False)
                while (rows := self._next(batches, index)) is not None:
                    for row in rows:
                        yield self._record(index, *row)
                        index += 1

    def _next(self, batches: Iterator[Any], index: int) -> list[tuple] | None:
        """The rows of the next batch (None after the last), a damaged one a CorruptError naming record ``index``."""
        try:
            batch = next(batches, None)
            return None if batch is None else list(hf.batch_rows(batch, self.table))
        except self._damage as exc:
            raise self._error(exc, index) from None

    def _after_fork(self) -> None:
        self._cached = None

    def _close(self) -> None:
        self._cached = None


# -- writing ----------------------------------------------------------------------------------------------
@dataclass
class TablePlan:
    """The columns a picpac dataset becomes: its fields, the label's type, a group column, a column per meta key
    (``bool``, ``int64``, ``float64``, ``string``, or ``json``: JSON text of values of no one scalar type)."""

    fields: list[str]
    label: str = "float64"
    group: bool = False
    meta: dict[str, str] = field(default_factory=dict)


def _meta_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if -2**63 <= value < 2**63 else "json"
    if isinstance(value, float):
        return "float64"
    return "string" if isinstance(value, str) else "json"


def _whole(label: float) -> bool:
    return label.is_integer() and -2**63 <= label < 2**63 and math.copysign(1, label) > 0


def plan_table(records: Iterable[Record], fields: list[str], classes: list[str]) -> TablePlan:
    """The columns of ``records`` (read once): ClassLabel ids when every label is a whole id of ``classes``,
    int64 when every label is whole, else float64; each meta key's type."""
    plan = TablePlan(list(fields))
    whole, ids = True, bool(classes)
    for record in records:
        label = record.label
        whole = whole and _whole(label)
        ids = ids and whole and label < len(classes)
        plan.group = plan.group or record.group is not None
        for name in record.fields:
            if name not in plan.fields:
                plan.fields.append(name)
        for key, value in record.meta.items():
            kind = _meta_type(value)
            plan.meta[key] = kind if plan.meta.get(key, kind) == kind else "json"
    plan.label = "class" if ids else "int64" if whole else "float64"
    return plan


def _free(name: str, used: set[str]) -> str:
    while name in used:
        name += "_"
    used.add(name)
    return name


class ParquetWriter(StoreWriter):
    """Writes a dataset as Parquet that ``datasets.load_dataset("parquet", data_files=...)`` loads: the field
    ``image`` an Image feature (``struct<bytes, path>``), other fields binary columns, labels a ClassLabel of the
    dataset's ``classes`` (or int64, float64 values), ``group``, a column per meta key; rows in record order,
    :data:`ROW_GROUP_ROWS` to a row group. ``plan`` (:func:`plan_table`) gives the columns; without it the first
    record sets them. With ``shard_size`` (bytes, or "500MB", "1GB") ``path`` is a folder of files
    ``data-00000-of-0000N.parquet``, a new one begun once a file holds that many bytes of fields (a row group
    ends there too)."""

    kind = "parquet"

    def __init__(self, path: str | os.PathLike, *, metadata: Mapping[str, Any] | None = None, sync: bool = True,
                 plan: TablePlan | None = None, shard_size: int | str | None = None):
        self._plan = plan
        self._limit = None if shard_size is None else parse_size(shard_size, "shard size")
        self.directory = self._limit is not None
        super().__init__(path, metadata=metadata, sync=sync)

    def _check_target(self) -> None:
        if self.directory and os.path.isdir(self._target) and not os.path.islink(self._target) and \
                not all(name.endswith(".parquet") for name in os.listdir(self._target)):
            raise PicPacValueError(f"{self.path}: is a folder that holds other files than .parquet ones; not "
                                   "replacing it")
        if not self.directory:
            super()._check_target()

    def _start(self) -> None:
        self._pq = _parquet_module()
        self._pa = hf.pyarrow()
        if self.directory:
            os.mkdir(self._temp)
        self._files: list[str] = []
        self._file = None
        self._file_bytes = self._pending = 0
        self._rows: list[tuple[dict[str, memoryview], float, int | None, dict[str, Any]]] = []
        self._schema = None
        if self._plan is not None:
            self._columns(self._plan)

    def _columns(self, plan: TablePlan) -> None:
        """The schema, its features and picpac's key, from ``plan``."""
        pa, classes = self._pa, self._metadata.get("classes") or []
        used: set[str] = set(plan.fields)
        columns, features = [], {}
        for name in plan.fields:
            if name == "image":
                columns.append(pa.field(name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
                features[name] = {"_type": "Image"}
            else:
                columns.append(pa.field(name, pa.binary()))
                features[name] = {"dtype": "binary", "_type": "Value"}
        self._label = _free("label", used)
        columns.append(pa.field(self._label, pa.float64() if plan.label == "float64" else pa.int64()))
        features[self._label] = {"names": list(classes), "_type": "ClassLabel"} if plan.label == "class" else \
            {"dtype": "float64" if plan.label == "float64" else "int64", "_type": "Value"}
        self._group = _free("group", used) if plan.group else None
        if self._group:
            columns.append(pa.field(self._group, pa.int64()))
            features[self._group] = {"dtype": "int64", "_type": "Value"}
        types = {"bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
                 "json": pa.string()}
        self._meta_columns = {key: _free(key, used) for key in plan.meta}
        for key, column in self._meta_columns.items():
            columns.append(pa.field(column, types[plan.meta[key]]))
            features[column] = {"dtype": "string" if plan.meta[key] == "json" else plan.meta[key], "_type": "Value"}
        own = {"store": "picpac-parquet", "version": 1, "metadata": self._metadata,
               "image": "image" if "image" in plan.fields else None, "label": self._label, "group": self._group,
               "json_meta": [self._meta_columns[k] for k, t in plan.meta.items() if t == "json"],
               "meta_keys": {c: k for k, c in self._meta_columns.items() if c != k}}
        self._plan = plan
        self._schema = pa.schema(columns, metadata={hf.HF_KEY: hf.features_json(features),
                                                    hf.PICPAC_KEY: json.dumps(own).encode()})

    def _write(self, index, fields, label, group, meta) -> None:
        info = json.loads(bytes(meta)) if len(meta) else {}
        if self._schema is None:
            self._columns(plan_table([Record(index, label, group, fields, memoryview(meta))], list(fields), []))
        plan = self._plan
        unknown = [n for n in fields if n not in plan.fields] + [k for k in info if k not in plan.meta]
        if unknown or (group is not None and not plan.group) or not self._fits(label, info):
            what = f"field or meta key {unknown[0]!r}" if unknown else "its label, group or meta values"
            raise PicPacValueError(f"{self.path}: record {index}'s {what} do not fit the table's columns, which "
                                   "were set before it; export_store(db, dst, 'parquet') plans them from every record")
        self._rows.append((fields, label, group, info))
        self._pending += sum(len(v) for v in fields.values())
        if len(self._rows) >= ROW_GROUP_ROWS or (self._limit is not None and
                                                 self._file_bytes + self._pending >= self._limit):
            self._flush()

    def _fits(self, label: float, info: dict[str, Any]) -> bool:
        plan = self._plan
        if plan.label != "float64" and not (_whole(label) and (plan.label != "class" or
                                                               label < len(self._metadata.get("classes") or []))):
            return False
        return all(plan.meta[k] in ("json", _meta_type(v)) for k, v in info.items())

    def _flush(self) -> None:
        if not self._rows:
            return
        pa, plan, rows = self._pa, self._plan, self._rows
        arrays = []
        for name in plan.fields:
            values = pa.array([r[0].get(name) for r in rows], pa.binary())
            if name == "image":  # an Image's storage: the bytes, no path; null where the record has no image
                values = pa.StructArray.from_arrays([values, pa.nulls(len(rows), pa.string())], ["bytes", "path"],
                                                    mask=values.is_null())
            arrays.append(values)
        labels = [r[1] for r in rows] if plan.label == "float64" else [int(r[1]) for r in rows]
        arrays.append(pa.array(labels, self._schema.field(self._label).type))
        if self._group:
            arrays.append(pa.array([r[2] for r in rows], pa.int64()))
        for key, column in self._meta_columns.items():
            values = [r[3].get(key) for r in rows]
            if plan.meta[key] == "json":
                values = [None if key not in r[3] else json.dumps(r[3][key], separators=(",", ":")) for r in rows]
            arrays.append(pa.array(values, self._schema.field(column).type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        if self._file is None:
            name = os.path.join(self._temp, f"part-{len(self._files)}") if self.directory else self._temp
            self._files.append(name)
            self._file = self._pq.ParquetWriter(name, self._schema, compression="none", use_dictionary=False,
                                                write_statistics=False)
            self._file_bytes = 0
        self._file.write_batch(batch)
        self._file_bytes += self._pending
        self._rows, self._pending = [], 0
        if self._limit is not None and self._file_bytes >= self._limit:
            self._file.close()
            self._file = None

    def _finish(self) -> None:
        if self._schema is None:
            self._columns(TablePlan(["image"]))
        self._flush()
        if self._file is None and not self._files:  # no records: one file of the schema
            self._files.append(os.path.join(self._temp, "part-0") if self.directory else self._temp)
            self._file = self._pq.ParquetWriter(self._files[0], self._schema)
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.directory:
            for k, name in enumerate(self._files):
                os.replace(name, os.path.join(self._temp, f"data-{k:05d}-of-{len(self._files):05d}.parquet"))

    def _release(self) -> None:
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None
