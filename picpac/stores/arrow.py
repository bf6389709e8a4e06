"""Arrow folders as Hugging Face's ``Dataset.save_to_disk`` writes them: ``state.json`` (the data files, in order),
``dataset_info.json`` (the features) and ``data-*.arrow`` files in Arrow's IPC stream format (needs ``pyarrow``:
``pip install picpac[parquet]``). The files are memory-mapped, as ``datasets`` maps them: their record batches
are views of the map, so reading costs no copy of the file and no memory beyond the page cache."""
from __future__ import annotations

import bisect
import os
from typing import Any

from ..errors import FormatError, SourceError
from ..file.inputs import read_text
from ..file.layout import load_json
from ..file.reader import Record
from . import hf
from .base import StoreReader, TableReader, check_regular


def _json_file(path: str, what: str) -> Any:
    return load_json(read_text(path, what).encode(), lambda why: FormatError(f"{path}: not JSON ({why})"))


def arrow_files(path: str) -> tuple[list[str], dict[str, Any] | None]:
    """The data files of a ``save_to_disk`` folder (as its ``state.json`` lists them) and the features of its
    ``dataset_info.json`` (None without one); a single ``.arrow`` file is itself."""
    if not os.path.isdir(path):
        check_regular(path, "arrow")
        return [path], None
    state = os.path.join(path, "state.json")
    if os.path.isfile(state):
        listed = _json_file(state, "state.json files").get("_data_files")
        if not isinstance(listed, list) or not all(isinstance(f, dict) and isinstance(f.get("filename"), str)
                                                   for f in listed):
            raise FormatError(f"{state}: no `_data_files` list of {{\"filename\": ...}}; not a save_to_disk folder")
        files = [os.path.join(path, f["filename"]) for f in listed]
        for name in files:
            if os.path.dirname(os.path.normpath(name)) != os.path.normpath(path):
                raise FormatError(f"{state}: data file {name!r} lies outside the folder")
    else:
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".arrow"))
    if not files:
        raise SourceError(f"{path}: no .arrow files (nor a state.json naming them); pass a folder that "
                          "Dataset.save_to_disk wrote")
    info = os.path.join(path, "dataset_info.json")
    features = _json_file(info, "dataset_info.json files").get("features") if os.path.isfile(info) else None
    return files, features if isinstance(features, dict) else None


class ArrowReader(TableReader):
    """Reads a ``Dataset.save_to_disk`` folder (or one ``.arrow`` file) by its features, as :class:`ParquetReader`
    reads Parquet; records are views of the memory-mapped files, in order, and ``r[i]`` is direct."""

    kind = "arrow"

    def _open(self) -> None:
        pa = hf.pyarrow()
        self._damage = (*StoreReader._damage, pa.lib.ArrowException)
        self._files, features = arrow_files(self.path)
        self._maps, self._batches, self._starts = [], [], [0]
        schema = None
        for name in self._files:
            check_regular(name, self.kind)
            source = pa.memory_map(name)
            self._maps.append(source)
            try:
                reader = pa.ipc.open_stream(source)
            except pa.lib.ArrowInvalid:  # an IPC file (with a footer), as pyarrow's new_file writes
                reader = pa.ipc.open_file(source)
                batches = [reader.get_batch(b) for b in range(reader.num_record_batches)]
            else:
                batches = list(reader)
            if schema is None:
                schema = reader.schema
            elif reader.schema.names != schema.names or reader.schema.types != schema.types:
                raise FormatError(f"{name}: its columns differ from {self._files[0]}'s")
            for batch in batches:
                self._batches.append((name, batch))
                self._starts.append(self._starts[-1] + batch.num_rows)
        where = self._files[0]
        self.table = hf.layout(schema, features or hf.schema_features(schema, where), where, self.image_column,
                               self.label_column)
        if self.table.image is None and not self.table.fields:
            raise SourceError(f"{where}: no column of images (an Image feature, or binary); columns: "
                              f"{', '.join(schema.names)}; name it with --image-column")
        self._count = self._starts[-1]
        image = [self.table.image_field] if self.table.image else []
        self.metadata = {**self.table.metadata, "fields": [*image, *self.table.fields]}
        self._file_starts = [self._starts[b] for b, (name, _) in enumerate(self._batches)
                             if b == 0 or self._batches[b - 1][0] != name]

    def where(self, i: int) -> str:
        """``file: row r`` of record ``i``."""
        k = bisect.bisect_right(self._file_starts, i) - 1
        name = self._batches[bisect.bisect_right(self._starts, i) - 1][0]
        return f"{name}: row {i - self._file_starts[k]}"

    def _read(self, i: int) -> Record:
        b = bisect.bisect_right(self._starts, i) - 1
        row = self._batches[b][1].slice(i - self._starts[b], 1)
        return self._record(i, *next(hf.batch_rows(row, self.table)))

    def _close(self) -> None:
        self._batches = []
        for source in getattr(self, "_maps", ()):
            source.close()
        self._maps = []

