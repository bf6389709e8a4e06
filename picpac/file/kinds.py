"""What a path is, in words, for the messages of readers that accept regular files only."""
from __future__ import annotations

import stat


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is: 'a directory', 'a FIFO', 'a socket', ... or 'a regular file'."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"
