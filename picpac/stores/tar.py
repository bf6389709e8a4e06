"""WebDataset-style tar: members ``%06d.<field>``, ``.cls`` label, ``.json`` meta."""
from __future__ import annotations

import io
import json
import math
import re
import tarfile
from typing import Any

from ..errors import CorruptError, FormatError, PicPacValueError
from ..file.layout import load_json
from ..file.reader import Record
from .base import StoreWriter, corrupt_error, MappedReader


_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET = "cls", "group", "json", "picpac.json"
_TAR_NAME = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset: key, then everything after the first dot


def _label_text(label: float) -> bytes:
    if label.is_integer() and math.copysign(1.0, label) > 0:
        return str(int(label)).encode()
    return repr(label).encode()


class TarWriter(StoreWriter):
    """Uncompressed tar, WebDataset style: record i's members ``%06d.<field>``, ``%06d.cls`` (the label as
    text), ``%06d.group`` (when it has one), ``%06d.json`` (its meta, when it has one); the last record
    also has ``%06d.picpac.json`` (the dataset metadata), a store without records a lone ``picpac.json``."""

    kind = "tar"
    reserved = frozenset({_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET})

    def _check_name(self, name: str) -> None:
        super()._check_name(name)
        if "/" in name:
            raise PicPacValueError(f"{self.path}: field name {name!r}: a '/' would break the tar member names; "
                                   "rename the field")

    def _start(self) -> None:
        self._tar = tarfile.open(self._temp, mode="w", format=tarfile.PAX_FORMAT)

    def _add(self, name: str, data: Any) -> None:
        data = memoryview(data)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = data.nbytes, 0o444, 0
        self._tar.addfile(info, io.BytesIO(data))

    def _write(self, index, fields, label, group, meta) -> None:
        key = "%06d" % index
        for name, view in fields.items():
            self._add(f"{key}.{name}", view)
        self._add(f"{key}.{_TAR_LABEL}", _label_text(label))
        if group is not None:
            self._add(f"{key}.{_TAR_GROUP}", str(group).encode())
        if meta:
            self._add(f"{key}.{_TAR_META}", meta)

    def _finish(self) -> None:
        name = _TAR_DATASET if not self._count else "%06d.%s" % (self._count - 1, _TAR_DATASET)
        self._add(name, json.dumps(self.metadata).encode())
        self._tar.close()

    def _release(self) -> None:
        tar = getattr(self, "_tar", None)
        if tar is not None:
            tar.close()


class TarReader(MappedReader):
    """Reads an uncompressed tar, WebDataset style: members grouped by key (the name up to the first dot
    of its last part), records in the order keys first appear. ``.cls`` is the label, ``.group`` the
    group, ``.json`` the meta (when it holds a JSON object), every other member a field."""

    kind = "tar"
    _damage = (*MappedReader._damage, tarfile.TarError)

    def _open(self) -> None:
        view = self._map(self.path)
        try:
            with tarfile.open(self.path, "r:") as tar:
                members = tar.getmembers()
        except tarfile.ReadError as exc:
            reason = str(exc)
            if "truncated" in reason or "unexpected end" in reason:
                raise CorruptError(f"{self.path}: truncated tar ({reason})") from None
            raise FormatError(f"{self.path}: not an uncompressed tar file ({reason})") from None
        except (tarfile.TarError, *MappedReader._damage) as exc:  # a damaged header past the first
            raise CorruptError(f"{self.path}: truncated or damaged tar ({type(exc).__name__}: {exc})") from None
        keys: dict[str, dict[str, tuple[int, int]]] = {}
        for member in members:
            if not member.isreg():
                continue
            if member.name == _TAR_DATASET:
                self.metadata = self._json(member.offset_data, member.size, _TAR_DATASET)
                continue
            match = _TAR_NAME.match(member.name)
            if match is None:
                continue  # no extension: not part of a sample
            if member.offset_data + member.size > len(view):
                raise CorruptError(f"{self.path}: member {member.name} runs past the end of the file (truncated)")
            keys.setdefault(match.group(1), {})[match.group(2)] = (member.offset_data, member.size)
        self._samples = list(keys.items())
        if self._samples and _TAR_DATASET in self._samples[-1][1]:
            self.metadata = self._json(*self._samples[-1][1][_TAR_DATASET], _TAR_DATASET)
        self._count = len(self._samples)

    def _json(self, offset: int, size: int, what: str) -> Any:
        return load_json(self._view[offset:offset + size],
                         lambda why: CorruptError(f"{self.path}: damaged {what} member ({why})"))

    def _read(self, i: int) -> Record:
        key, members = self._samples[i]
        view = self._view
        label, group, meta, fields = 0.0, None, b"", {}
        for suffix, (offset, size) in members.items():
            data = view[offset:offset + size]
            if suffix == _TAR_DATASET:
                continue
            try:
                if suffix == _TAR_LABEL:
                    label = float(bytes(data))
                    continue
                if suffix == _TAR_GROUP:
                    group = int(bytes(data))
                    continue
            except ValueError:
                raise corrupt_error(self.path, i, f"({key}.{suffix}) does not hold a number") from None
            if suffix == _TAR_META and data[:1] == b"{":
                meta = data
                continue
            fields[suffix] = data
        return self._record(i, self._ordered(fields), label, group, meta)
