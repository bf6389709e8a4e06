"""WebDataset-style tar: members ``%06d.<field>`` (the image as ``.jpg``, ``.png``, ... by its bytes' type),
``.cls`` label, ``.json`` meta."""
from __future__ import annotations

import io
import json
import math
import re
import tarfile
from typing import Any

from ..errors import CorruptError, FormatError, PicPacTypeError, PicPacValueError
from ..file.layout import load_json
from ..file.reader import Record
from .base import StoreWriter, corrupt_error, MappedReader


_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET = "cls", "group", "json", "picpac.json"
_TAR_FLOAT_LABEL = "picpac.label"
"""A label that is not a whole number (WebDataset decodes ``.cls`` with ``int()``): its float as text."""
_TAR_NAME = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset: key, then everything after the first dot
_IMAGE = "image"

_IMAGE_TYPES = (
    (b"\xff\xd8\xff", "jpg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"P1", "pbm"), (b"P4", "pbm"),
    (b"P2", "pgm"), (b"P5", "pgm"),
    (b"P3", "ppm"), (b"P6", "ppm"),
)
"""Leading bytes of the image types WebDataset's image decoder (PIL) opens, and the extension it expects."""
IMAGE_EXTENSIONS = frozenset({"jpg", "png", "gif", "bmp", "tiff", "pbm", "pgm", "ppm", "webp"})
"""The extensions the tar writer gives the ``image`` field (:func:`image_extension`)."""


def image_extension(data: Any) -> str | None:
    """The file extension of encoded image bytes (``jpg``, ``png``, ``webp``, ...), None for other bytes."""
    head = bytes(memoryview(data)[:14])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:2] == b"BM" and len(head) == 14 and head[6:10] == bytes(4):  # (its reserved bytes are zeros)
        return "bmp"
    for magic, extension in _IMAGE_TYPES:
        if head.startswith(magic):
            if extension in ("pbm", "pgm", "ppm") and head[2:3] not in (b" ", b"\t", b"\n", b"\r", b"#"):
                continue  # a Netpbm header is "P5" then whitespace or a comment; other bytes merely start so
            return extension
    return None


def _whole(label: float) -> bool:
    """A label that ``.cls`` holds: a whole number (not -0.0, whose sign int() would lose)."""
    return label.is_integer() and not (label == 0 and math.copysign(1.0, label) < 0)


class TarWriter(StoreWriter):
    """Uncompressed tar, WebDataset style: record i's members ``%06d.<field>``, ``%06d.cls`` (the label as
    an integer) or ``%06d.picpac.label`` (a label that is not a whole number, as text), ``%06d.group`` (when
    it has one), ``%06d.json`` (its meta, when it has one); the last record also has ``%06d.picpac.json``
    (the dataset metadata), a store without records a lone ``picpac.json``.

    The ``image`` field is written as ``%06d.jpg``, ``.png``, ``.webp``, ... by its bytes' type (as
    WebDataset's decoders expect), unless its bytes are of no known image type or the dataset has a field
    of that name: then ``%06d.image``. ``fields`` declares the dataset's field names up front (an export
    knows them all); a field first seen after the image was written under its name is refused.
    """

    kind = "tar"
    reserved = frozenset({_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET, _TAR_FLOAT_LABEL})

    def __init__(self, path, *, metadata=None, sync: bool = True, fields=()):
        self._image_extensions: set[str] = set()  # the extensions the image field was written under
        super().__init__(path, metadata=metadata, sync=sync)
        try:
            for name in fields:
                if not isinstance(name, str) or not name:
                    raise PicPacTypeError(f"field names must be non-empty str, got {name!r}")
                if name not in self._fields:
                    self._check_name(name)
                    self._fields.append(name)
        except BaseException:
            self.abort()
            raise

    def _check_name(self, name: str) -> None:
        super()._check_name(name)
        if "/" in name:
            raise PicPacValueError(f"{self.path}: field name {name!r}: a '/' would break the tar member names; "
                                   "rename the field")
        if name in self._image_extensions:
            raise PicPacValueError(f"{self.path}: field name {name!r}: earlier records' 'image' fields were written "
                                   f"as .{name} members (their type), so a field of that name would be mistaken for "
                                   "them; declare the fields up front (TarWriter(..., fields=[...])) or rename it")

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
            if name == _IMAGE:
                extension = image_extension(view)
                if extension is not None and extension not in self._fields:
                    self._image_extensions.add(extension)
                    name = extension
            self._add(f"{key}.{name}", view)
        if _whole(label):
            self._add(f"{key}.{_TAR_LABEL}", str(int(label)).encode())
        else:
            self._add(f"{key}.{_TAR_FLOAT_LABEL}", repr(label).encode())
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
    of its last part), records in the order keys first appear. ``.cls`` (or ``.picpac.label``) is the label,
    ``.group`` the group, ``.json`` the meta (when it holds a JSON object), every other member a field named
    by its extension (a WebDataset tar's ``.jpg`` is the field ``jpg``). In a tar whose dataset metadata
    lists an ``image`` field (one picpac wrote), a member whose extension is an image type
    (:data:`IMAGE_EXTENSIONS`) and not one of the dataset's fields is the ``image`` field."""

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
        fields = self.metadata.get("fields") if isinstance(self.metadata, dict) else None
        known = fields if isinstance(fields, list) and _IMAGE in fields else ()
        self._image_extensions = IMAGE_EXTENSIONS.difference(known) if known else frozenset()

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
                if suffix in (_TAR_LABEL, _TAR_FLOAT_LABEL):
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
            if suffix in self._image_extensions and _IMAGE not in fields:
                suffix = _IMAGE
            fields[suffix] = data
        return self._record(i, self._ordered(fields), label, group, meta)
