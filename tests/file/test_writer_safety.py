"""Writer safety (picpac/file/writer.py): an existing database is replaced only when asked (overwrite=True or
PicPac's picpac.OVERWRITE), and a Writer dropped without close() says so, visibly, and commits nothing."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import picpac

from helpers import payload


def write_db(path, n: int, start: int = 0, **kwargs) -> None:
    with picpac.Writer(path, **kwargs) as w:
        for i in range(start, start + n):
            w.append(image=payload(i), label=i)


def images(path) -> list[bytes]:
    with picpac.Reader(path) as r:
        return [bytes(rec["image"]) for rec in r]


def test_an_existing_database_is_refused_by_default_naming_the_path_and_the_fix(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 3)
    before = path.read_bytes()
    with pytest.raises(picpac.PathExistsError) as caught:
        picpac.Writer(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: already exists;")
    assert "overwrite=True" in message and "picpac.OVERWRITE" in message and "append=True" in message
    # a picpac error, a bad value, and the built-in of an existing file: generic handlers work
    assert isinstance(caught.value, picpac.PicPacValueError) and isinstance(caught.value, FileExistsError)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["db.picpac"]
    # anything at the path counts, not only a database
    other = tmp_path / "notes.txt"
    other.write_text("precious")
    with pytest.raises(picpac.PathExistsError):
        picpac.Writer(other)
    assert other.read_text() == "precious"


def test_overwrite_by_keyword_or_by_picpac_s_flag(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 3)
    write_db(path, 2, start=10, overwrite=True)
    assert images(path) == [payload(10), payload(11)]
    with picpac.Writer(path, picpac.OVERWRITE) as w:  # PicPac: picpac.Writer(path, picpac.OVERWRITE)
        w.append(image=b"flag")
    assert images(path) == [b"flag"]
    with picpac.Writer(path, picpac.OVERWRITE | picpac.COMPACT) as w:  # COMPACT: accepted, changes nothing
        w.append(image=b"compact")
    with picpac.Writer(path, picpac.APPEND) as w:
        w.append(image=b"appended")
    assert images(path) == [b"compact", b"appended"]
    assert (picpac.OVERWRITE, picpac.COMPACT) == (4, 2)  # PicPac's values
    # overwrite=True on a missing path simply creates it
    write_db(tmp_path / "new.picpac", 1, overwrite=True)
    assert images(tmp_path / "new.picpac") == [payload(0)]


@pytest.mark.parametrize("flags, error, match", [
    (True, picpac.PicPacTypeError, "pass append=True or overwrite=True by keyword"),
    ("overwrite", picpac.PicPacTypeError, "Writer flags must be an int"),
    (1, picpac.PicPacValueError, "INDEX_LABEL2"),
    (16, picpac.PicPacValueError, "unknown Writer flags 0x10"),
    (-1, picpac.PicPacValueError, "unknown Writer flags"),
    (picpac.APPEND | picpac.OVERWRITE, picpac.PicPacValueError, "append and overwrite exclude each other"),
])
def test_bad_flags_are_refused_before_anything_is_written(tmp_path, flags, error, match):
    with pytest.raises(error, match=match):
        picpac.Writer(tmp_path / "db.picpac", flags)
    assert os.listdir(tmp_path) == []


def test_append_and_overwrite_keywords_exclude_each_other(tmp_path):
    with pytest.raises(picpac.PicPacValueError, match="exclude each other"):
        picpac.Writer(tmp_path / "db.picpac", append=True, overwrite=True)
    with pytest.raises(picpac.PicPacValueError, match="exclude each other"):
        picpac.Writer(tmp_path / "db.picpac", picpac.APPEND, overwrite=True)


def test_a_file_made_at_the_path_while_writing_is_not_replaced(tmp_path):
    path = tmp_path / "db.picpac"
    w = picpac.Writer(path)
    w.append(image=b"mine")
    path.write_bytes(b"someone else's")
    with pytest.raises(picpac.PathExistsError, match="already exists"):
        w.commit()
    assert path.read_bytes() == b"someone else's"
    with pytest.raises(picpac.PathExistsError):
        w.close()  # close commits, fails the same way, and discards the Writer's temporary file
    assert w.closed and path.read_bytes() == b"someone else's" and os.listdir(tmp_path) == ["db.picpac"]


def test_after_its_first_commit_a_writer_keeps_committing_to_its_own_database(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"0")
        w.commit()  # the database is at path now, and it is this Writer's
        w.append(image=b"1")
    assert images(path) == [b"0", b"1"]


def test_symbolic_links_and_directories(tmp_path):
    target = tmp_path / "real.picpac"
    link = tmp_path / "link.picpac"
    link.symlink_to(target)
    write_db(link, 1)  # a dangling link: its target is created
    assert images(link) == [payload(0)] and link.is_symlink()
    with pytest.raises(picpac.PathExistsError):
        picpac.Writer(link)  # its target exists now
    write_db(link, 1, start=5, overwrite=True)
    assert images(target) == [payload(5)] and link.is_symlink()
    (tmp_path / "folder").mkdir()
    for overwrite in (False, True):
        with pytest.raises(picpac.PicPacValueError, match="is a directory"):
            picpac.Writer(tmp_path / "folder", overwrite=overwrite)


def test_write_arrays_refuses_an_existing_path_unless_overwrite(tmp_path):
    path = tmp_path / "arrays.picpac"
    picpac.write_arrays(path, np.zeros((2, 4, 4), np.uint8))
    with pytest.raises(picpac.PathExistsError):
        picpac.write_arrays(path, np.ones((3, 4, 4), np.uint8))
    assert picpac.write_arrays(path, np.ones((3, 4, 4), np.uint8), overwrite=True) == 3
    with picpac.Reader(path) as r:
        assert len(r) == 3


# -- dropped without close() ----------------------------------------------------------------------------
def drop(writer) -> None:
    del writer
    gc.collect()


def test_a_new_writer_dropped_without_close_warns_and_creates_nothing(tmp_path):
    path = tmp_path / "db.picpac"
    w = picpac.Writer(path)
    for i in range(3):
        w.append(image=payload(i))
    with pytest.warns(picpac.UnclosedWriterWarning) as caught:
        w = drop(w)
    assert len(caught) == 1
    assert str(caught[0].message) == (
        f"picpac.Writer({str(path)!r}) was dropped without close(): 3 record(s) appended since the last commit "
        f"were not committed and {path} was not written; call close() (or use `with picpac.Writer(...) as w:`) "
        "to commit them")
    assert issubclass(picpac.UnclosedWriterWarning, UserWarning)  # shown by Python's default filters
    assert os.listdir(tmp_path) == []  # no database, no temporary file


def test_a_dropped_replacement_leaves_the_old_database(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 2)
    w = picpac.Writer(path, overwrite=True)
    w.append(image=b"half")
    with pytest.warns(picpac.UnclosedWriterWarning, match=r"1 record\(s\) appended .* was not written"):
        w = drop(w)
    assert images(path) == [payload(0), payload(1)] and os.listdir(tmp_path) == ["db.picpac"]


def test_a_dropped_appender_keeps_the_last_commit(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 2)
    w = picpac.Writer(path, append=True)
    w.append(image=b"committed")
    w.commit()
    w.append(image=b"lost 1")
    w.append(image=b"lost 2")
    with pytest.warns(picpac.UnclosedWriterWarning, match=r"2 record\(s\) appended .* keeps its last commit"):
        w = drop(w)
    assert images(path) == [payload(0), payload(1), b"committed"]
    with picpac.Writer(path, append=True) as again:  # the lock went with the dropped Writer
        again.append(image=b"after")
    assert images(path)[-1] == b"after"


def test_a_dropped_append_to_a_new_path_removes_the_empty_database(tmp_path):
    path = tmp_path / "db.picpac"
    w = picpac.Writer(path, append=True)
    w.append(image=b"x")
    with pytest.warns(picpac.UnclosedWriterWarning, match="the empty database it created at .* was removed"):
        w = drop(w)
    assert os.listdir(tmp_path) == []


def test_closed_writers_and_with_blocks_never_warn(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with picpac.Writer(tmp_path / "a.picpac") as w:
            w.append(image=b"x")
        w = picpac.Writer(tmp_path / "b.picpac")
        w.append(image=b"y")
        w.close()
        w = drop(w)
        with pytest.raises(RuntimeError):
            with picpac.Writer(tmp_path / "c.picpac") as w:
                w.append(image=b"z")
                raise RuntimeError("boom")
        w = drop(w)
    assert sorted(os.listdir(tmp_path)) == ["a.picpac", "b.picpac"]


def test_the_warning_is_visible_in_a_plain_script_even_at_exit(tmp_path):
    """Python's default warning filters show it on stderr: here the Writer is still referenced by a global
    when the script ends, so it is dropped at interpreter exit."""
    script = textwrap.dedent("""
        import sys
        import picpac
        w = picpac.Writer(sys.argv[1])
        for i in range(5):
            w.append(image=b"x")
        print("appended", flush=True)
    """)
    path = tmp_path / "db.picpac"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "appended\n", done.stderr
    assert "UnclosedWriterWarning" in done.stderr
    assert f"picpac.Writer({str(path)!r}) was dropped without close(): 5 record(s)" in done.stderr
    assert os.listdir(tmp_path) == []
