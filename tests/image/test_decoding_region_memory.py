"""A region too large to allocate is a clean MemoryError from the extension, and the input's buffer
is released.

CPython 3.11's PyByteArray_FromStringAndSize(NULL, n) frees the new bytearray with its export count
unset when the n bytes cannot be allocated: with whatever a freed object left in that memory, the
MemoryError came with "SystemError: deallocated bytearray object has exported buffers" printed. The
child below leaves such memory behind (freed 56-byte objects full of 0x01) before each decode."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import picpac
from picpac.image import decoding

CHILD = textwrap.dedent("""
    import resource, sys
    sys.path[:0] = sys.argv[1:3]  # the parent's picpac and helpers
    from helpers import jpeg_bomb
    from picpac.image import decoding
    data = bytearray(jpeg_bomb(65500, 65500))  # a real baseline JPEG declaring 65500 x 65500: 12.9 GB as BGR
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    calls = [lambda: decoding._jpeg.decode(data, 1, 0, 0, 65500, 65500, 1, 0),  # (0: no pixel limit)
             lambda: decoding.decode_channels(data, 3, True, 1, (0, 0, 65500, 65500), max_pixels=None),
             lambda: decoding.decode_channels(bytes(data), 1, False, 1, (0, 0, 65500, 65500), max_pixels=None)]
    for call in calls * 3:
        junk = [bytes([1]) * 23 for _ in range(10000)]  # 56-byte objects, as a bytearray's
        del junk
        try:
            call()
            print("decoded")
        except MemoryError:
            print("MemoryError")
    data.append(0)  # BufferError if the extension still held the input's buffer
    data.pop()
    print("released")
""")


@pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built")
def test_a_region_too_large_to_allocate_is_a_memory_error(tmp_path):
    package, tests = Path(picpac.__file__).resolve().parents[1], Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", CHILD, str(package), str(tests)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["MemoryError"] * 9 + ["released"], proc.stdout
    assert "SystemError" not in proc.stderr and "exported buffers" not in proc.stderr, proc.stderr[-2000:]
