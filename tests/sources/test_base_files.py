"""The data lines of the text files an import reads (picpac/sources/base.py), on file/inputs.py's read_text:
UTF-8 without NUL bytes, blank lines and comments skipped."""
from __future__ import annotations

import pytest

from picpac import SourceError
from picpac.file.inputs import read_text
from picpac.sources.base import data_lines


def test_text_files_are_utf8_without_nul_bytes(tmp_path):
    (tmp_path / "nul.txt").write_bytes(b"a.jpg\t1\nb\0.jpg\t2\n")
    with pytest.raises(SourceError, match=rf"^{tmp_path / 'nul.txt'}:2: holds a NUL byte; list files are text"):
        list(data_lines(str(tmp_path / "nul.txt")))
    (tmp_path / "utf16.txt").write_bytes("a.jpg\t1\n".encode("utf-16"))
    with pytest.raises(SourceError, match=rf"^{tmp_path / 'utf16.txt'}: not UTF-8 text .*; CSV files must be UTF-8"):
        read_text(str(tmp_path / "utf16.txt"), "CSV files")
    (tmp_path / "ok.txt").write_bytes(b"\xef\xbb\xbfa.jpg\t1\r\n# comment\n\nb.jpg\t2\rc.jpg 3")
    assert list(data_lines(str(tmp_path / "ok.txt"))) == [(1, "a.jpg\t1"), (4, "b.jpg\t2"), (5, "c.jpg 3")]
