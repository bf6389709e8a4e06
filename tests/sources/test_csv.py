"""CSV sources (picpac/sources/csv.py) that are not what they should be: NUL bytes, other encodings."""
from __future__ import annotations

import re

import pytest

from picpac import SourceError
from picpac.sources import scan


@pytest.mark.parametrize("data, message", [
    (b"path,label\na.jpg,1\nb\0.jpg,2\n", "{src}:3: holds a NUL byte; CSV files are text without NUL bytes"),
    ("path,label\n\xe9.jpg,1\n".encode("latin-1"), "{src}: not UTF-8 text (invalid continuation byte at byte 11); "
                                                   "CSV files must be UTF-8"),
    ("path,label\na.jpg,1\n".encode("utf-16"), "{src}: not UTF-8 text (invalid start byte at byte 0)"),
    (b"path,label\n" + b"a" * 200_000 + b",1\n", "{src}: malformed CSV (field larger than field limit (131072))"),
])
def test_malformed_csv_names_the_file(tmp_path, data, message):
    src = tmp_path / "list.csv"
    src.write_bytes(data)
    with pytest.raises(SourceError, match=re.escape(message.format(src=src))):
        scan(src)
