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


# -- labels: headers, extra columns, numbers or class names (never mixed, never joined) ------------------
def labelled(listing) -> list[tuple[str, float]]:
    return [(os.path.basename(item.path), item.label) for item in listing.items]


def refused(src, text: str, message: str, **options) -> SourceError:
    """The error scanning ``src`` holding ``text`` raises; ``message`` (``{src}`` for the path) is in it."""
    src.write_text(text)
    with pytest.raises(SourceError, match=re.escape(message.format(src=src))) as error:
        scan(src, **options)
    return error.value


def test_plain_two_column_lists_read_as_before(tmp_path):
    src = tmp_path / "list.txt"
    src.write_text("# comment\na.jpg\t3\nmy b.jpg 1.5\nc.jpg   -2  \n\nd.jpg\t7\t\n")
    found = scan(src)
    assert found.source == f"list {src}" and found.classes is None
    assert labelled(found) == [("a.jpg", 3.0), ("my b.jpg", 1.5), ("c.jpg", -2.0), ("d.jpg", 7.0)]
    src.write_text("a.jpg\tcat\nb c.jpg dog\n")
    found = scan(src, "list")
    assert found.classes == ["cat", "dog"] and labelled(found) == [("a.jpg", 0.0), ("b c.jpg", 1.0)]


def test_a_header_naming_index_and_name_columns_maps_ids_to_names(tmp_path):
    src = tmp_path / "labels.tsv"
    src.write_text("file\tclass_index\tclass_name\na.jpg\t4\tcat\nb.jpg\t0\tdog\nc.jpg\t4\tcat\nd.jpg\t2\tdog\n")
    found = scan(src)
    assert found.source == f"list {src}"
    assert labelled(found) == [("a.jpg", 4.0), ("b.jpg", 0.0), ("c.jpg", 4.0), ("d.jpg", 2.0)]
    assert found.classes == ["dog", "", "dog", "", "cat"]  # indexed by id; one name may name two ids
    assert [item.line for item in found.items] == [f"{src}:{n}" for n in (2, 3, 4, 5)]


@pytest.mark.parametrize("header, rows, labels, classes", [
    ("path\tlabel", "a.jpg\t1\nb.jpg\t0\n", [1.0, 0.0], None),
    ("Image Label", "a.jpg 1\nb.jpg 0\n", [1.0, 0.0], None),
    ("file\tclass_name", "a.jpg\tdog\nb.jpg\tcat\n", [1.0, 0.0], ["cat", "dog"]),
    ("file class name", "a.jpg 1 dog\nb.jpg 0 cat\n", [1.0, 0.0], ["cat", "dog"]),
    ("class_name\tfile", "dog\ta.jpg\ncat\tb.jpg\n", [1.0, 0.0], ["cat", "dog"]),
])
def test_known_header_words_pick_the_columns(tmp_path, header, rows, labels, classes):
    src = tmp_path / "list.txt"
    src.write_text(f"{header}\n{rows}")
    found = scan(src, "list")
    assert labelled(found) == list(zip(["a.jpg", "b.jpg"], labels)) and found.classes == classes


@pytest.mark.parametrize("text, message", [
    ("img\tcls\na.jpg\t1\nb.jpg\t2\n", "{src}:1: looks like a header ('img', 'cls'): its label column is not a "
     "number while every other line's is, but picpac does not know the column name(s) 'img', 'cls'"),
    ("file\tlabel\tsynset\na.jpg\t1\tn01\n", "{src}:1: looks like a header ('file', 'label', 'synset'), but picpac "
     "does not know the column name(s) 'synset'"),
    ("file\tlabel\tclass\na.jpg\t1\t2\n", "{src}:1: the header names two label columns ('label', 'class')"),
])
def test_an_unknown_header_is_refused_naming_line_1(tmp_path, text, message):
    assert "--label-column" in str(refused(tmp_path / "list.txt", text, message))


def test_extra_columns_without_a_header_are_refused_never_joined(tmp_path):
    src = tmp_path / "list.txt"
    src.write_text("a.jpg\t0\ttench\nb.jpg\t4\thammerhead\n")
    with pytest.raises(SourceError, match=re.escape(f"{src}:1: 3 columns, but no header line names them")):
        scan(src)
    found = scan(src, label_column="2", class_name_column="3")
    assert labelled(found) == [("a.jpg", 0.0), ("b.jpg", 4.0)]
    assert found.classes == ["tench", "", "", "", "hammerhead"]
    found = scan(src, label_column="3")  # column 3 as the labels: class names, column 2 ignored
    assert labelled(found) == [("a.jpg", 1.0), ("b.jpg", 0.0)] and found.classes == ["hammerhead", "tench"]


def test_column_options_name_header_columns(tmp_path):
    src = tmp_path / "list.txt"
    src.write_text("img\tidx\tword\na.jpg\t1\tcat\nb.jpg\t0\tdog\n")
    found = scan(src, label_column="idx", class_name_column="word")
    assert labelled(found) == [("a.jpg", 1.0), ("b.jpg", 0.0)] and found.classes == ["dog", "cat"]
    with pytest.raises(SourceError, match=re.escape(f"{src}: label column 'index' (--label-column) is not in the "
                                                    "header (img, idx, word)")):
        scan(src, label_column="index")
    with pytest.raises(SourceError, match=re.escape(f"{src}: label column 4 (--label-column) is not one of the "
                                                    "columns 1-3")):
        scan(src, label_column="4")
    with pytest.raises(SourceError, match=re.escape(f"{src}: the label and class-name columns are the same column "
                                                    "(3)")):
        scan(src, label_column="word", class_name_column="3")


def test_the_headers_class_name_column_picked_as_the_label_gives_names_as_labels(tmp_path):
    src = tmp_path / "list.txt"
    src.write_text("file\tclass_index\tclass_name\na.jpg\t4\ttench\nb.jpg\t0\thammerhead\n")
    found = scan(src, label_column="class_name")
    assert labelled(found) == [("a.jpg", 1.0), ("b.jpg", 0.0)] and found.classes == ["hammerhead", "tench"]


def test_a_line_with_another_column_count_is_named(tmp_path):
    refused(tmp_path / "list.txt", "file\tlabel\tclass_name\na.jpg\t0\tcat\nb.jpg\t1\n",
            "{src}:3: 2 columns, but the list has 3 (line 1)")


@pytest.mark.parametrize("text, line, message", [
    ("a.jpg\t9\nb.jpg\t1O\nc.jpg\t10\n", 2, "label '1O' is a class name, but the other 2 labels are numbers"),
    ("file\tclass_index\tclass_name\na.jpg\t9\tnine\nb.jpg\t1O\tten\nc.jpg\t10\tten\n", 3,
     "label '1O' is a class name, but the other 2 labels are numbers"),
    ("a.jpg\tcat\nb.jpg\t3\nc.jpg\tdog\nd.jpg\tcow\n", 2, "label '3' is a number, but the other 3 labels are class "
     "names"),
])
def test_a_label_column_mixing_numbers_and_names_is_refused_naming_the_lines(tmp_path, text, line, message):
    assert "--label-kind names" in str(refused(tmp_path / "list.txt", text, f"{{src}}:{line}: {message}"))


def test_label_kind_names_and_numbers(tmp_path):
    src = tmp_path / "list.txt"
    src.write_text("a.jpg\t9\nb.jpg\t1O\nc.jpg\t10\n")
    found = scan(src, label_kind="names")
    assert found.classes == ["10", "1O", "9"] and labelled(found) == [("a.jpg", 2.0), ("b.jpg", 1.0), ("c.jpg", 0.0)]
    with pytest.raises(SourceError, match=re.escape(f"{src}:2: label '1O' is not a number (--label-kind numbers)")):
        scan(src, label_kind="numbers")
    src.write_text("a.jpg\t9\nb.jpg\t10\n")
    assert labelled(scan(src, label_kind="numbers")) == [("a.jpg", 9.0), ("b.jpg", 10.0)]


@pytest.mark.parametrize("text, message", [
    ("file\tlabel\tname\na.jpg\t1\tcat\nb.jpg\t1\tdog\n",
     "{src}:3: class 1 is named 'dog', but {src}:2 names it 'cat'"),
    ("file\tlabel\tname\na.jpg\t1.5\tcat\n", "{src}:2: label '1.5' is not a class id (an integer 0..1048575)"),
    ("file\tlabel\tname\na.jpg\t1\t \n", "{src}:2: empty class name"),
])
def test_class_name_columns_name_integer_ids_consistently(tmp_path, text, message):
    refused(tmp_path / "list.txt", text, message)


def test_label_options_only_for_lists_and_csv(tmp_path):
    (tmp_path / "images").mkdir()
    for options in ({"label_kind": "names"}, {"label_column": "2"}, {"class_name_column": "3"}):
        with pytest.raises(SourceError, match=r"\(--label-kind, --label-column, --class-name-column\) apply to the "
                                              r"formats list, csv, not to 'dir'"):
            scan(tmp_path / "images", "dir", **options)
    with pytest.raises(SourceError, match=r"label_kind \(--label-kind\) must be one of auto, numbers, names, "
                                          r"got 'name'"):
        scan(tmp_path / "images", "dir", label_kind="name")
