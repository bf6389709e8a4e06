"""CSV sources (picpac/sources/csv.py) that are not what they should be: NUL bytes, other encodings."""
from __future__ import annotations

import re

import pytest

from picpac import SourceError
from picpac.sources import scan


@pytest.mark.parametrize("data, message", [
    (b"path,label\na.jpg,1\nb\0.jpg,2\n", "{src}:3: holds a NUL byte; CSV files are text without NUL bytes"),
    ("path,label\n\xe9.jpg,1\n".encode("latin-1"), "{src}: not UTF-8 text (invalid continuation byte at byte 11); "
                                                   "CSV files must be UTF-8"),
    ("path,label\na.jpg,1\n".encode("utf-16"), "{src}: not UTF-8 text (invalid start byte at byte 0)"),
    (b"path,label\n" + b"a" * 200_000 + b",1\n", "{src}: malformed CSV (field larger than field limit (131072))"),
])
def test_malformed_csv_names_the_file(tmp_path, data, message):
    src = tmp_path / "list.csv"
    src.write_bytes(data)
    with pytest.raises(SourceError, match=re.escape(message.format(src=src))):
        scan(src)


def test_a_csv_label_column_mixing_numbers_and_names_is_refused(tmp_path):
    src = tmp_path / "data.csv"
    src.write_text("path,label\na.jpg,dog\nb.jpg,cat\nc.jpg,7\n")
    with pytest.raises(SourceError, match=re.escape(f"{src}:4: label '7' is a number, but the other 2 labels are "
                                                    "class names; a label column holds numbers or class names, never "
                                                    "both: fix the line(s), or pass --label-kind names")):
        scan(src)
    found = scan(src, label_kind="names")
    assert found.classes == ["7", "cat", "dog"] and [item.label for item in found.items] == [2.0, 1.0, 0.0]


def test_csv_label_and_class_name_columns_by_name_or_number(tmp_path):
    src = tmp_path / "data.csv"
    src.write_text("path,class_index,class_name\na.jpg,2,cat\nb.jpg,0,dog\n")
    assert [item.label for item in scan(src).items] == [0.0, 0.0] and scan(src).classes is None  # no 'label' column
    for label, name in (("class_index", "class_name"), ("2", "3"), ("Class Index", "CLASS_NAME")):
        found = scan(src, label_column=label, class_name_column=name)
        assert [item.label for item in found.items] == [2.0, 0.0] and found.classes == ["dog", "", "cat"]
    with pytest.raises(SourceError, match=re.escape(f"{src}: class name column 'names' (--class-name-column) is not "
                                                    "in the header (path, class_index, class_name)")):
        scan(src, label_column="class_index", class_name_column="names")
    with pytest.raises(SourceError, match=re.escape(f"{src}:1: the CSV header has no 'label' column")):
        scan(src, label_kind="numbers")
