"""PPR1: one record as a self-describing byte string (LMDB values, binary data files)."""
from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

from ..file.layout import NO_GROUP
from ..file.writer import _as_bytes
from .base import corrupt_error


PPR_MAGIC = b"PPR1"
# magic, CRC32 of bytes 8.., number of fields, reserved (0), meta size, label, group (NO_GROUP: none)
_PPR_HEAD = struct.Struct("<4sIHHIdq")
_PPR_FIELD = 10  # per field: u16 name size, u64 data size


def _ppr_table(n: int) -> struct.Struct:
    return struct.Struct("<" + "HQ" * n)


def encode_record(fields: Mapping[str, Any], label: float = 0.0, group: int | None = None,
                  meta: bytes = b"") -> bytes:
    """One record as PPR1 bytes (docs/stores.md): a 32-byte head (magic ``PPR1``, CRC32 of the rest,
    field count, meta size, label, group), a (name size, data size) entry per field, the names, the
    meta JSON and the fields' bytes, all little-endian. :func:`decode_record` reads it back."""
    return b"".join(record_parts(fields, label, group, meta))


def record_parts(fields: Mapping[str, Any], label: float = 0.0, group: int | None = None, meta: bytes = b"",
                 checksum: bool = True) -> list:
    """The pieces that :func:`encode_record` joins (the fields' as views, not copies), to be written one
    after the other; without ``checksum`` the CRC32 is left 0 (for bytes that a checksum guards already)."""
    names = [name.encode() for name in fields]
    views = [_as_bytes(name, value) for name, value in fields.items()]
    table = _ppr_table(len(views)).pack(*[x for name, view in zip(names, views) for x in (len(name), view.nbytes)])
    body = struct.pack("<HHIdq", len(views), 0, len(meta), float(label), NO_GROUP if group is None else group)
    rest = [body, table, *names, meta, *views]
    crc = 0
    if checksum:
        for part in rest:
            crc = zlib.crc32(part, crc)
    return [PPR_MAGIC + struct.pack("<I", crc), *rest]


def decode_record(data: Any, path: str = "<record>", index: int = 0, check: bool = True
                  ) -> tuple[dict[str, memoryview], float, int | None, memoryview]:
    """(fields, label, group, meta JSON bytes) of PPR1 ``data``; fields are zero-copy views of it.
    A wrong magic, CRC or layout raises CorruptError naming ``path`` and ``index``."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    if len(view) < _PPR_HEAD.size:
        raise corrupt_error(path, index,
                            f"is truncated ({len(view)} bytes, a PPR1 record has at least {_PPR_HEAD.size})")
    magic, crc, n, _, meta_size, label, group = _PPR_HEAD.unpack_from(view)
    if magic != PPR_MAGIC:
        raise corrupt_error(path, index, f"is not a PPR1 record (starts with {bytes(magic)!r})")
    if check and zlib.crc32(view[8:]) != crc:
        raise corrupt_error(path, index, "fails its CRC32 (damaged bytes)")
    if _PPR_HEAD.size + _PPR_FIELD * n > len(view):  # before a struct of n entries is built
        raise corrupt_error(path, index, f"has a damaged PPR1 layout ({n} fields in {len(view)} bytes)")
    try:
        table = _ppr_table(n).unpack_from(view, _PPR_HEAD.size)
        pos = _PPR_HEAD.size + _PPR_FIELD * n
        names = []
        for k in range(0, 2 * n, 2):
            names.append(bytes(view[pos:pos + table[k]]).decode())
            pos += table[k]
        meta = view[pos:pos + meta_size]
        pos += meta_size
        fields = {}
        for k, name in enumerate(names):
            end = pos + table[2 * k + 1]
            fields[name] = view[pos:end]
            pos = end
    except (struct.error, UnicodeDecodeError) as exc:
        raise corrupt_error(path, index, f"has a damaged PPR1 layout ({exc})") from None
    if pos != len(view):
        raise corrupt_error(path, index, f"has a damaged PPR1 layout (fields end at {pos}, record size {len(view)})")
    return fields, label, None if group == NO_GROUP else group, meta
