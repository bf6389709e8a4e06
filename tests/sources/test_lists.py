"""PicPac's list files (picpac/sources/lists.py) that are not what they should be: NUL bytes, other
encodings, a FIFO or a device in place of the file."""
from __future__ import annotations

import os
import re

import pytest

from picpac import SourceError
from picpac.sources import scan


@pytest.mark.parametrize("fmt", ["list", "annolist", "masklist", "auto"])
def test_nul_bytes_name_the_file_and_line(tmp_path, fmt):
    src = tmp_path / "list.txt"
    second = {"list": b"b\0.jpg\t2", "annolist": b'b.jpg\t{"shapes":[]}\0', "masklist": b"b.jpg\tm\0.png",
              "auto": b"b\0.jpg\t2"}[fmt]
    src.write_bytes(b"a.jpg\t1\n" + second + b"\n")
    with pytest.raises(SourceError, match=re.escape(f"{src}:2: holds a NUL byte; list files are text without NUL "
                                                    "bytes (is it a binary file?)")):
        scan(src, fmt)


def test_other_encodings_name_the_file(tmp_path):
    src = tmp_path / "list.txt"
    src.write_bytes("caf\xe9.jpg\t1\n".encode("latin-1"))
    with pytest.raises(SourceError, match=re.escape(f"{src}: not UTF-8 text (invalid continuation byte at byte 3); "
                                                    "list files must be UTF-8")):
        scan(src, "list")


@pytest.mark.timeout(60)
def test_a_fifo_or_a_device_as_the_list_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.txt")  # opened for reading, it would wait for a writer forever
    os.symlink("/dev/zero", tmp_path / "zero.txt")  # read as text, one endless line
    for name, what in (("fifo.txt", "a FIFO"), ("zero.txt", "a character device")):
        with pytest.raises(SourceError, match=re.escape(f"{tmp_path / name}: {what}, not a regular file")):
            scan(tmp_path / name, "list")
