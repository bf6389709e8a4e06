"""Reading the files an import names (picpac/sources/base.py): regular files only, never blocking on a FIFO
nor reading a device, at most MAX_FILE_BYTES; text without NUL bytes."""
from __future__ import annotations

import os
import socket
import time

import pytest

from picpac import SourceError
from picpac.sources.base import MAX_FILE_BYTES, data_lines, read_file, read_text


def special_files(folder) -> dict[str, str]:
    """name -> the reason read_file gives for it."""
    folder.mkdir(exist_ok=True)
    os.mkfifo(folder / "fifo.jpg")
    os.symlink("/dev/zero", folder / "zero.jpg")
    os.mkdir(folder / "dir.jpg")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.jpg"))
    server.close()  # the socket file stays
    with open(folder / "huge.jpg", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk used
    return {"fifo.jpg": "a FIFO, not a regular file", "zero.jpg": "a character device, not a regular file",
            "dir.jpg": "a directory, not a regular file", "sock.jpg": "a socket, not a regular file",
            "huge.jpg": "1,073,741,825 bytes, over the 1,073,741,824-byte limit of a file an import reads",
            "missing.jpg": "missing file"}


@pytest.mark.timeout(60)
def test_only_regular_files_are_read(tmp_path):
    reasons = special_files(tmp_path)
    start = time.monotonic()
    for name, reason in reasons.items():
        path = str(tmp_path / name)
        with pytest.raises(SourceError) as caught:
            read_file(path)
        assert (str(caught.value), caught.value.path, caught.value.reason) == (f"{path}: {reason}", path, reason)
    assert time.monotonic() - start < 5
    (tmp_path / "ok.jpg").write_bytes(b"\xff\xd8 data")
    os.symlink(tmp_path / "ok.jpg", tmp_path / "link.jpg")  # a link to a regular file is read
    assert read_file(str(tmp_path / "link.jpg")) == b"\xff\xd8 data" == read_file(str(tmp_path / "ok.jpg"))
    with pytest.raises(SourceError, match="over the 3-byte limit"):
        read_file(str(tmp_path / "ok.jpg"), limit=3)
    with pytest.raises(SourceError, match="the path holds a NUL byte"):
        read_file(str(tmp_path / "a\0.jpg"))


def test_text_files_are_utf8_without_nul_bytes(tmp_path):
    (tmp_path / "nul.txt").write_bytes(b"a.jpg\t1\nb\0.jpg\t2\n")
    with pytest.raises(SourceError, match=rf"^{tmp_path / 'nul.txt'}:2: holds a NUL byte; list files are text"):
        list(data_lines(str(tmp_path / "nul.txt")))
    (tmp_path / "utf16.txt").write_bytes("a.jpg\t1\n".encode("utf-16"))
    with pytest.raises(SourceError, match=rf"^{tmp_path / 'utf16.txt'}: not UTF-8 text .*; CSV files must be UTF-8"):
        read_text(str(tmp_path / "utf16.txt"), "CSV files")
    (tmp_path / "ok.txt").write_bytes(b"\xef\xbb\xbfa.jpg\t1\r\n# comment\n\nb.jpg\t2\rc.jpg 3")
    assert list(data_lines(str(tmp_path / "ok.txt"))) == [(1, "a.jpg\t1"), (4, "b.jpg\t2"), (5, "c.jpg 3")]
