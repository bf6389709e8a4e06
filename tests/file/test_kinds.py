"""picpac.file.kinds: what a path is, in words, from its st_mode, for the messages that refuse it."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from picpac.file.kinds import file_kind


def test_each_kind_of_file_is_named(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        kinds = {name: file_kind(os.stat(tmp_path / name).st_mode) for name in ("file", "fifo", "dir", "sock")}
    assert kinds == {"file": "a regular file", "fifo": "a FIFO", "dir": "a directory", "sock": "a socket"}
    assert file_kind(os.stat("/dev/null").st_mode) == "a character device"


def test_a_block_device_is_named():
    assert file_kind(stat.S_IFBLK | 0o660) == "a block device"


def test_a_link_itself_or_an_unknown_mode_is_not_a_regular_file(tmp_path):
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert file_kind(os.lstat(tmp_path / "link").st_mode) == "not a regular file"
    assert file_kind(os.stat(tmp_path / "link").st_mode) == "a regular file"  # followed: what it points to
    assert file_kind(0) == "not a regular file"


@pytest.mark.parametrize("kind", [stat.S_IFREG, stat.S_IFDIR, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK])
def test_permission_bits_do_not_change_the_kind(kind):
    assert file_kind(kind) == file_kind(kind | 0o7777)
