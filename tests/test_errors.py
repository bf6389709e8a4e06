"""picpac.errors: one base class, the built-in exception each error also is (so a plain ``except
FileNotFoundError`` keeps working), the messages that name the thing and the fix, and errors that cross
a process boundary (pickled by a worker) arriving whole."""
from __future__ import annotations

import errno
import inspect
import pickle

import pytest

from picpac import errors
from picpac.errors import (CorruptError, CorruptRecordError, FileIOError, FormatError, ImageTooLargeError,
                           MissingPathError, PathExistsError, PicPacError, PicPacTypeError, PicPacValueError,
                           RemoteReadError, RemoteTimeoutError, SampleError, VersionError, WorkerError,
                           WorkerTimeoutError)


def test_every_error_derives_from_picpac_error():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert {c.__name__ for c in classes} >= {"PicPacError", "ImageTooLargeError", "CorruptRecordError", "SampleError",
                                            "WorkerTimeoutError", "RemoteTimeoutError", "ImportFailedError"}
    assert [c.__name__ for c in classes if not issubclass(c, PicPacError)] == []


@pytest.mark.parametrize("error, builtins", [
    (PicPacTypeError, (TypeError,)),
    (PicPacValueError, (ValueError,)),
    (ImageTooLargeError, (PicPacValueError, ValueError)),
    (MissingPathError, (FileNotFoundError, OSError)),
    (PathExistsError, (FileExistsError, PicPacValueError, ValueError)),
    (VersionError, (FormatError,)),
    (CorruptRecordError, (CorruptError, FormatError)),
    (WorkerTimeoutError, (WorkerError, TimeoutError)),
    (FileIOError, (OSError,)),
    (RemoteReadError, (OSError,)),
    (RemoteTimeoutError, (RemoteReadError, TimeoutError, OSError)),
])
def test_each_error_is_also_the_builtin_it_stands_for(error, builtins):
    assert issubclass(error, PicPacError)
    for builtin in builtins:
        assert issubclass(error, builtin), f"{error.__name__} is no {builtin.__name__}"


def test_os_errors_keep_the_systems_errno():
    error = FileIOError(errno.ENOSPC, "no space left on device", "/data/db.picpac")
    assert (error.errno, error.filename) == (errno.ENOSPC, "/data/db.picpac")
    assert isinstance(MissingPathError(errno.ENOENT, "gone", "x.jpg"), FileNotFoundError)


def test_image_too_large_names_the_size_the_limit_the_fix_and_where():
    error = ImageTooLargeError(65500, 65500, 100_000_000, "db.picpac: record 3")
    assert str(error) == ("db.picpac: record 3: image of 65500x65500 = 4,290,250,000 pixels, over the limit "
                          "max_pixels=100000000 (a decompression bomb?); raise max_pixels (0: no limit) if it is genuine")
    assert (error.width, error.height, error.limit, error.where) == (65500, 65500, 100_000_000, "db.picpac: record 3")
    assert str(ImageTooLargeError(3, 2, 5)).startswith("image of 3x2 = 6 pixels, over the limit max_pixels=5 ")


def test_image_too_large_advice_names_the_knob_asked_for():
    advice = ImageTooLargeError(300, 200, 1000).advice("--max-pixels")
    assert advice == ("300x200 = 60,000 pixels, over the limit max_pixels=1000 (a decompression bomb?); "
                      "raise --max-pixels (0: no limit) if it is genuine")


def test_corrupt_record_names_the_file_the_record_and_the_command_that_lists_them_all():
    error = CorruptRecordError("/d/db.picpac", 7, "fails its checksum")
    assert str(error) == ("/d/db.picpac: record 7 fails its checksum; run `picpac verify /d/db.picpac` to list "
                          "every damaged record")
    assert (error.path, error.index, error.reason) == ("/d/db.picpac", 7, "fails its checksum")


def test_sample_error_names_the_file_and_the_record():
    error = SampleError("db.picpac", 12, "does not decode as an image")
    assert str(error) == "db.picpac: record 12 does not decode as an image"
    assert (error.path, error.index, error.reason) == ("db.picpac", 12, "does not decode as an image")


@pytest.mark.parametrize("error", [
    ImageTooLargeError(65500, 2, 1000, "a.jpg"),
    CorruptRecordError("db.picpac", 3, "is cut short"),
    SampleError("db.picpac", 4, "does not decode"),
    WorkerTimeoutError("worker 2 (pid 99) sent nothing for 5 s; raise timeout"),
    RemoteTimeoutError("s3://b/k: no answer within timeout=3"),
], ids=lambda e: type(e).__name__)
def test_errors_cross_a_process_boundary_whole(error):
    """A worker pickles the error it raised; the one the caller gets has the same type, message and fields."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
