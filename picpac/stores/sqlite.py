"""SQLite: one table, one BLOB column per field, the record number as primary key."""
from __future__ import annotations

import json
import os
import sqlite3

from ..errors import CorruptError, FormatError, PicPacValueError
from ..file.layout import load_json
from ..file.reader import Record
from .base import StoreReader, StoreWriter, corrupt_error


_SQL_RESERVED = frozenset({"id", "label", "group", "meta"})
_SQL_TYPES = {int: "an INTEGER", float: "a REAL", str: "TEXT"}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteWriter(StoreWriter):
    """SQLite database: table ``records(id INTEGER PRIMARY KEY, label, "group" INTEGER, meta TEXT,
    "<field>" BLOB ...)`` (NULL: no such field / no group / no meta; ``label`` has no declared type, so a
    float is kept as stored, where a REAL column would turn -0.0 into 0), table ``picpac(key, value)``
    with the store's description and the dataset metadata."""

    kind = "sqlite"

    def _check_name(self, name: str) -> None:
        lower = {n.lower() for n in self._fields}
        if name.lower() in _SQL_RESERVED or name.lower() in lower or "\x00" in name:
            raise PicPacValueError(f"{self.path}: field name {name!r} clashes with a column of the sqlite store "
                                   "(id, label, group, meta, or another field differing only in case); "
                                   "rename the field")

    def _start(self) -> None:
        self._db = sqlite3.connect(self._temp, isolation_level=None)
        self._db.executescript("""
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            CREATE TABLE picpac (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE records (id INTEGER PRIMARY KEY, label NOT NULL, "group" INTEGER, meta TEXT);
            BEGIN;
        """)
        self._columns: list[str] = []
        self._statements: dict[tuple[str, ...], str] = {}

    def _write(self, index, fields, label, group, meta) -> None:
        for name in fields:
            if name not in self._columns:
                self._db.execute(f"ALTER TABLE records ADD COLUMN {_quote(name)} BLOB")
                self._columns.append(name)
        names = tuple(fields)
        statement = self._statements.get(names)
        if statement is None:
            columns = ", ".join(['id', 'label', '"group"', 'meta', *map(_quote, names)])
            statement = self._statements[names] = \
                f"INSERT INTO records ({columns}) VALUES ({', '.join('?' * (4 + len(names)))})"
        self._db.execute(statement, (index, label, group, meta.decode() if meta else None, *fields.values()))

    def _finish(self) -> None:
        info = {"store": "picpac-sqlite 1", "count": str(self._count), "metadata": json.dumps(self.metadata)}
        self._db.executemany("INSERT INTO picpac VALUES (?, ?)", info.items())
        self._db.execute("COMMIT")
        self._db.close()

    def _release(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()


class SqliteReader(StoreReader):
    """Reads a picpac SQLite store; values of the wrong SQLite type (TEXT where a BLOB belongs, ...) are
    CorruptErrors naming the record."""

    kind = "sqlite"
    _damage = (*StoreReader._damage, sqlite3.Error)

    def _open(self) -> None:
        if os.path.isdir(self.path):
            raise FormatError(f"{self.path}: is a directory, not an SQLite file")
        try:
            self._db = sqlite3.connect(f"file:{_uri_path(self.path)}?mode=ro&immutable=1", uri=True,
                                       check_same_thread=False)
            info = dict(self._db.execute("SELECT key, value FROM picpac"))
        except sqlite3.DatabaseError as exc:
            if "malformed" in str(exc):
                raise CorruptError(f"{self.path}: damaged or truncated SQLite file ({exc})") from None
            raise FormatError(f"{self.path}: not a picpac SQLite store ({exc})") from None
        try:
            metadata = info["metadata"]
            self.metadata = load_json(metadata.encode() if isinstance(metadata, str) else metadata,
                                      lambda why: CorruptError(f"{self.path}: damaged dataset metadata ({why})"))
            self._count = int(info["count"])
            self._check_metadata()
            last = self._db.execute("SELECT max(id) FROM records").fetchone()[0]
            # (a missing column named in double quotes would be read as a string literal: check them all)
            missing = {"label", "group", "meta", *self.metadata["fields"]} - {
                row[1] for row in self._db.execute("PRAGMA table_info(records)")}
            columns = ", ".join(['label', '"group"', 'meta', *map(_quote, self.metadata["fields"])])
            self._select = f"SELECT {columns} FROM records WHERE id = ?"
        except (KeyError, ValueError, TypeError, OverflowError, sqlite3.DatabaseError) as exc:
            raise CorruptError(f"{self.path}: damaged picpac SQLite store ({exc})") from None
        if missing:
            raise CorruptError(f"{self.path}: the records table has no column {sorted(missing)[0]!r}")
        if (last if last is not None else -1) != self._count - 1:
            raise CorruptError(f"{self.path}: {self._count} records recorded, the last id is {last}")

    def _read(self, i: int) -> Record:
        try:
            row = self._db.execute(self._select, (i,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise corrupt_error(self.path, i, f"cannot be read ({exc})") from None
        if row is None:
            raise corrupt_error(self.path, i, "is missing")
        label, group, meta = row[:3]
        fields = {}
        for name, value in zip(self.metadata["fields"], row[3:]):
            if value is None:
                continue
            if not isinstance(value, bytes):
                raise corrupt_error(self.path, i, f"field {name!r} holds {_SQL_TYPES.get(type(value), 'a value')}, "
                                                  "not a BLOB")
            fields[name] = memoryview(value)
        return self._record(i, fields, label, group, (meta.encode() if isinstance(meta, str) else meta) or b"")

    def _after_fork(self) -> None:
        self._inherited.append(self._db)  # SQLite connections must not cross a fork: a new one
        self._open()

    def _close(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None and self._pid == os.getpid():
            db.close()


def _uri_path(path: str) -> str:
    from urllib.parse import quote
    return quote(os.path.abspath(path))
