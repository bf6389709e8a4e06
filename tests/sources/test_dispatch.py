"""scan() (picpac/sources/dispatch.py): which options each format takes, a file or a folder."""
from __future__ import annotations

import pytest

from picpac import MissingPathError, SourceError
from picpac.sources import scan

from source_helpers import touch_images, write_text


def test_labels_and_classes_options_only_where_they_apply(tmp_path):
    images = touch_images(tmp_path / "images", "a.jpg")
    names = write_text(tmp_path / "names.txt", "cat\n")
    with pytest.raises(SourceError, match=r"labels \(--labels\) applies to the formats yolo, yolo-seg, "
                                          r"maskdir, not to 'dir'"):
        scan(images, "dir", labels=tmp_path)
    with pytest.raises(SourceError, match=r"classes \(--classes\) applies to .*not to 'auto'"):
        scan(images, classes=names)
    with pytest.raises(SourceError, match=r"classes \(--classes\) applies to .*not to 'coco'"):
        scan(write_text(tmp_path / "coco.json", "{}"), "coco", classes=names)
    with pytest.raises(MissingPathError, match=r"labels: no such folder; YOLO label files are looked for"):
        scan(images, "yolo")
    with pytest.raises(MissingPathError, match=r"nowhere: labels folder does not exist"):
        scan(images, "yolo-seg", labels=tmp_path / "nowhere")
    with pytest.raises(MissingPathError, match=r"none.txt: classes file does not exist"):
        scan(images, "yolo", labels=tmp_path, classes=tmp_path / "none.txt")
    with pytest.raises(SourceError, match=r"format maskdir needs the folder of masks; pass it as labels"):
        scan(images, "maskdir")
    with pytest.raises(SourceError, match=r"root \(--root\) applies to list, CSV and COCO sources"):
        scan(images, "yolo", root=tmp_path)
    with pytest.raises(SourceError, match=r"coco.json: is a file, but format 'yolo' reads a folder"):
        scan(tmp_path / "coco.json", "yolo", labels=tmp_path)


@pytest.mark.parametrize("line", ["a.jpg\tcat", "a.jpg cat", "a.jpg   cat", "a.jpg\tmask"])
def test_a_second_column_naming_a_class_is_a_list(tmp_path, line):
    listing = tmp_path / "list.txt"
    listing.write_text(f"# images\n{line}\nb.jpg\tdog\n")
    found = scan(listing)
    assert found.source == f"list {listing}"
    assert found.classes == sorted({line.split()[-1], "dog"})


@pytest.mark.parametrize("second", ["a-mask.png", "masks/a.PNG", "existing"])
def test_a_second_column_naming_a_mask_file_is_a_mask_list(tmp_path, second):
    (tmp_path / "existing").write_bytes(b"")
    listing = tmp_path / "list.txt"
    listing.write_text(f"a.jpg\t{second}\n")
    found = scan(listing)
    assert found.source == f"masklist {listing}"
    assert found.items[0].mask_path == str(tmp_path / second)


@pytest.mark.parametrize("number, name", [(0, "dir"), ("1", "list"), (2, "classdirs"), ("3", "annolist"),
                                          (4, "masklist")])
def test_scan_takes_picpac_numbers(tmp_path, number, name):
    from picpac.sources.base import format_name
    assert format_name(number) == name
