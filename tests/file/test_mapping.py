"""picpac.file.mapping: read-only mappings that hold no file descriptor, live as long as a view of them,
and take madvise hints."""
from __future__ import annotations

import errno
import gc
import mmap
import os

import numpy as np
import pytest

from picpac.file.mapping import advise, map_file

PAGE = mmap.PAGESIZE


def write(path, size: int) -> bytes:
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    path.write_bytes(data)
    return data


def mapped(path) -> list[dict[str, int]]:
    """The mappings of ``path`` in this process (from /proc/self/smaps): each one's size and resident kB."""
    found, current = [], None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                current = {} if fields[-1] == str(path) else None
                if current is not None:
                    found.append(current)
            elif current is not None and fields[0] in ("Size:", "Rss:"):
                current[fields[0][:-1]] = int(fields[1])
    return found


def map_path(path, size: int) -> np.ndarray:
    fd = os.open(path, os.O_RDONLY)
    try:
        return map_file(fd, size)
    finally:
        os.close(fd)


def test_the_bytes_are_the_files_as_a_read_only_uint8_array(tmp_path):
    data = write(tmp_path / "f", 3 * PAGE + 5)
    array = map_path(tmp_path / "f", len(data))
    assert array.dtype == np.uint8 and array.shape == (len(data),) and array.tobytes() == data
    assert not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        array[0] = 1


def test_size_maps_the_first_bytes_only(tmp_path):
    data = write(tmp_path / "f", 2 * PAGE)
    array = map_path(tmp_path / "f", 100)
    assert array.shape == (100,) and array.tobytes() == data[:100]


def test_the_mapping_holds_no_descriptor(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    arrays = []
    for i in range(40):
        write(tmp_path / f"f{i}", 10 + i)
        arrays.append(map_path(tmp_path / f"f{i}", 10 + i))
    assert len(os.listdir("/proc/self/fd")) == before
    assert [len(a) for a in arrays] == [10 + i for i in range(40)]


def test_it_is_shared_so_the_files_changes_show(tmp_path):
    write(tmp_path / "f", PAGE)
    array = map_path(tmp_path / "f", PAGE)
    with open(tmp_path / "f", "r+b") as f:
        f.write(b"changed")
    assert array[:7].tobytes() == b"changed"


def test_the_mapping_lives_as_long_as_its_last_view(tmp_path):
    data = write(tmp_path / "f", 2 * PAGE)
    path = (tmp_path / "f").resolve()
    array = map_path(path, len(data))
    view = memoryview(array[PAGE:])
    del array
    gc.collect()
    assert len(mapped(path)) == 1  # the view keeps it
    assert bytes(view) == data[PAGE:]
    del view
    gc.collect()
    assert mapped(path) == []


@pytest.mark.parametrize("size, flags, code", [
    (10, os.O_WRONLY, errno.EACCES),  # a shared read mapping needs the file open for reading
    (0, os.O_RDONLY, errno.EINVAL),
])
def test_a_file_that_cannot_be_mapped_is_an_os_error(tmp_path, size, flags, code):
    write(tmp_path / "f", PAGE)
    fd = os.open(tmp_path / "f", flags)
    try:
        with pytest.raises(OSError) as caught:
            map_file(fd, size)
    finally:
        os.close(fd)
    assert caught.value.errno == code and caught.value.strerror == os.strerror(code)


def test_a_closed_descriptor_is_an_os_error():
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError) as caught:
        map_file(fd, 10)
    assert caught.value.errno == errno.EBADF


def test_dontneed_drops_the_pages_of_the_range_asked_and_they_read_again(tmp_path):
    data = write(tmp_path / "f", 8 * PAGE)
    path = (tmp_path / "f").resolve()
    array = map_path(path, len(data))
    assert int(array.astype(np.int64).sum()) == sum(data)  # every page touched
    [mapping] = mapped(path)
    assert mapping == {"Size": 8 * PAGE // 1024, "Rss": 8 * PAGE // 1024}
    advise(array, mmap.MADV_DONTNEED, 2 * PAGE, 3 * PAGE)
    assert mapped(path) == [{"Size": 8 * PAGE // 1024, "Rss": 5 * PAGE // 1024}]
    advise(array, mmap.MADV_DONTNEED, 6 * PAGE)  # to the end
    assert mapped(path)[0]["Rss"] == 3 * PAGE // 1024
    assert array.tobytes() == data


def test_advice_is_a_hint_whose_errors_are_ignored(tmp_path):
    data = write(tmp_path / "f", 2 * PAGE)
    array = map_path(tmp_path / "f", len(data))
    advise(array, mmap.MADV_WILLNEED)
    advise(array, mmap.MADV_DONTNEED, 1)  # not page-aligned: EINVAL from the kernel, ignored
    advise(array, 12345)  # no such advice
    assert array.tobytes() == data
