"""Reading the files picpac takes in whole (picpac/file/inputs.py): regular files only, never blocking on a FIFO
nor reading a device, at most MAX_FILE_BYTES."""
from __future__ import annotations

import os
import socket
import time

import pytest

from picpac import SourceError
from picpac.file.inputs import MAX_FILE_BYTES, read_file


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
