"""The SQLite store (picpac/stores/sqlite.py) on files that are not picpac's: not a database, another
schema, damaged metadata, values of the wrong SQLite type; each a PicPacError naming the file."""
from __future__ import annotations

import re
import sqlite3

import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError


@pytest.fixture
def store(tmp_path) -> str:
    path = str(tmp_path / "s.sqlite")
    with stores.open_writer(path, "sqlite", metadata={"classes": ["a"]}) as w:
        w.append(image=b"\xff\xd8 one", label=1, group=3, meta={"i": 0})
        w.append(image=b"\xff\xd8 two", label=0)
    return path


def edit(path: str, *statements: str) -> None:
    with sqlite3.connect(path) as con:
        for statement in statements:
            con.execute(statement)


def test_not_a_picpac_sqlite_store(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite? no. " * 100)
    with pytest.raises(FormatError, match=re.escape(f"{junk}: not a picpac SQLite store (file is not a database)")):
        stores.open_reader(junk, "sqlite")
    other = str(tmp_path / "other.sqlite")
    edit(other, "CREATE TABLE t (x)")
    with pytest.raises(FormatError, match=re.escape(f"{other}: not a picpac SQLite store (no such table: picpac)")):
        stores.open_reader(other, "sqlite")


@pytest.mark.parametrize("statements, message", [
    (["ALTER TABLE records RENAME COLUMN image TO picture"], "the records table has no column 'image'"),
    (["UPDATE picpac SET value = '[' WHERE key = 'metadata'"], "damaged dataset metadata (Expecting value"),
    (["UPDATE picpac SET value = '" + "[" * 100_000 + "' WHERE key = 'metadata'"],
     "damaged dataset metadata (nested too deeply)"),
    (["UPDATE picpac SET value = '{\"fields\": [1]}' WHERE key = 'metadata'"],
     "the dataset metadata's 'fields' is not a list of strings"),
    (["UPDATE picpac SET value = 'many' WHERE key = 'count'"], "damaged picpac SQLite store (invalid literal"),
    (["DELETE FROM picpac WHERE key = 'count'"], "damaged picpac SQLite store ('count')"),
])
def test_damaged_stores_are_corrupt_errors_at_open(store, statements, message):
    edit(store, *statements)
    with pytest.raises(CorruptError, match=re.escape(f"{store}: {message}")):
        stores.open_reader(store, "sqlite")


@pytest.mark.parametrize("statement, message", [
    ("UPDATE records SET label = 'one' WHERE id = 1", "record 1 has a label of type str, not a number"),
    ("UPDATE records SET label = x'00' WHERE id = 1", "record 1 has a label of type bytes, not a number"),
    ('UPDATE records SET "group" = 2.5 WHERE id = 1', "record 1 has group 2.5, not an int64 above"),
    ("UPDATE records SET image = 'text' WHERE id = 1", "record 1 field 'image' holds TEXT, not a BLOB"),
    ("UPDATE records SET image = 7 WHERE id = 1", "record 1 field 'image' holds an INTEGER, not a BLOB"),
    ("UPDATE records SET meta = x'ff' WHERE id = 1", "record 1 has meta that is not valid JSON"),
])
def test_values_of_the_wrong_type_name_the_record(store, tmp_path, statement, message):
    edit(store, statement)
    with stores.open_reader(store, "sqlite") as r:
        assert bytes(r[0]["image"]) == b"\xff\xd8 one"
        with pytest.raises(CorruptError, match=re.escape(f"{store}: {message}")):
            r[1].meta
    with pytest.raises(CorruptError, match=re.escape(f"{store}: {message}")):
        stores.import_store(store, tmp_path / "db", "sqlite")


def test_meta_that_is_no_json_object_is_not_imported(store, tmp_path):
    edit(store, "UPDATE records SET meta = 5 WHERE id = 1")  # (TEXT affinity: stored as '5', JSON for 5)
    with pytest.raises(CorruptError, match=re.escape(f"{store}: record 1 has meta that is a JSON int, not an object")):
        stores.import_store(store, tmp_path / "db", "sqlite")
    assert not (tmp_path / "db").exists()
