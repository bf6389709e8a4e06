"""picpac.sources.folders: a plain folder (dir), numbered class folders (classdirs) and named ones (imagefolder),
auto-detected or named: which files are items, their labels, the class names and the refusals."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from picpac.errors import SourceError
from picpac.sources.folders import scan_folder


def touch(root: Path, *names: str) -> Path:
    """Empty files at ``names`` under ``root`` (the scan reads names, never bytes)."""
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")
    return root


def listed(listing) -> list[tuple[str, float]]:
    return [(os.path.relpath(item.path, listing.root), item.label) for item in listing.items]


def test_dir_lists_every_image_below_sorted_with_label_zero(tmp_path):
    touch(tmp_path, "b.png", "a.JPG", "sub/c.webp", "sub/deeper/d.tiff", "notes.txt", "e.jpeg.bak")
    listing = scan_folder(str(tmp_path), "dir")
    assert listed(listing) == [("a.JPG", 0.0), ("b.png", 0.0), ("sub/c.webp", 0.0), ("sub/deeper/d.tiff", 0.0)]
    assert listing.classes is None and listing.source == f"dir {tmp_path}" and listing.root == str(tmp_path)
    assert all(item.group is None and item.annotation is None and item.line is None for item in listing.items)


def test_hidden_files_and_folders_are_skipped(tmp_path):
    touch(tmp_path, ".hidden.png", ".cache/a.png", "cls/.b.png", "cls/c.png")
    assert listed(scan_folder(str(tmp_path), "dir")) == [("cls/c.png", 0.0)]


def test_classdirs_labels_are_the_folder_numbers(tmp_path):
    touch(tmp_path, "0/a.png", "2/b.png", "2/c.png", "10/d.png", "10/sub/e.png")
    listing = scan_folder(str(tmp_path), "classdirs")
    assert listed(listing) == [("0/a.png", 0.0), ("10/d.png", 10.0), ("10/sub/e.png", 10.0), ("2/b.png", 2.0),
                               ("2/c.png", 2.0)]
    assert listing.classes is None and listing.source == f"classdirs {tmp_path}"


def test_imagefolder_numbers_the_class_names_in_sorted_order(tmp_path):
    touch(tmp_path, "dog/1.png", "cat/2.png", "bird/3.png", "bird/4.png", "Zebra/5.png")
    listing = scan_folder(str(tmp_path), "imagefolder")
    assert listing.classes == ["Zebra", "bird", "cat", "dog"]
    assert listed(listing) == [("Zebra/5.png", 0.0), ("bird/3.png", 1.0), ("bird/4.png", 1.0), ("cat/2.png", 2.0),
                               ("dog/1.png", 3.0)]


def test_a_folder_without_images_is_no_class(tmp_path):
    touch(tmp_path, "a/1.png", "empty/readme.txt", "c/2.png")
    (tmp_path / "none").mkdir()
    assert scan_folder(str(tmp_path), "imagefolder").classes == ["a", "c"]


def test_class_layouts_leave_out_images_lying_at_the_top(tmp_path):
    touch(tmp_path, "top.png", "0/a.png", "1/b.png")
    assert listed(scan_folder(str(tmp_path), "classdirs")) == [("0/a.png", 0.0), ("1/b.png", 1.0)]
    assert listed(scan_folder(str(tmp_path), "imagefolder")) == [("0/a.png", 0.0), ("1/b.png", 1.0)]


@pytest.mark.parametrize("names, format", [
    (["0/a.png", "1/b.png"], "classdirs"),
    (["cat/a.png", "dog/b.png"], "imagefolder"),
    (["0/a.png", "dog/b.png"], "imagefolder"),  # one name that is no number: names
    (["\u0663/a.png", "1/b.png"], "imagefolder"),  # an Arabic-Indic three is a digit, not a class number
    (["top.png", "0/a.png", "1/b.png"], "dir"),  # images at the top: no class layout
    (["a.png", "b.png"], "dir"),
    ([], "dir"),
])
def test_auto_detects_the_layout(tmp_path, names, format):
    touch(tmp_path, *names)
    listing = scan_folder(str(tmp_path), "auto")
    assert listing.source == f"{format} {tmp_path}"
    assert listing == scan_folder(str(tmp_path), format)


def test_classdirs_refuses_a_folder_name_that_is_no_number(tmp_path):
    touch(tmp_path, "0/a.png", "bird/b.png", "cat/c.png")
    with pytest.raises(SourceError) as caught:
        scan_folder(str(tmp_path / "."), "classdirs")
    assert str(caught.value) == (f"{tmp_path / '.'}: format classdirs needs subfolders named 0..N-1, found 'bird'; "
                                 "use -f imagefolder for class names")


def test_a_relative_source_is_listed_from_its_absolute_path(tmp_path, monkeypatch):
    touch(tmp_path, "data/x/a.png")
    monkeypatch.chdir(tmp_path)
    listing = scan_folder("data", "auto")
    assert listing.root == str(tmp_path / "data") and listing.source == f"imagefolder {tmp_path / 'data'}"
    assert [item.path for item in listing.items] == [str(tmp_path / "data" / "x" / "a.png")]


def test_real_imagenet_files_as_a_plain_folder_and_as_class_folders(shared_data, tmp_path):
    imagenet = shared_data / "imagenet-250"
    with open(imagenet / "labels.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    listing = scan_folder(str(imagenet), "auto")
    assert listing.source == f"dir {imagenet}" and len(listing.items) == len(rows) == 250
    assert [Path(item.path).name for item in listing.items] == sorted(row["file"] for row in rows)
    for row in rows[:12]:  # the same files, linked into one folder per class name
        (tmp_path / row["class_name"]).mkdir(exist_ok=True)
        (tmp_path / row["class_name"] / row["file"]).symlink_to(imagenet / row["file"])
    listing = scan_folder(str(tmp_path), "auto")
    names = sorted({row["class_name"] for row in rows[:12]})
    assert listing.classes == names and listing.source == f"imagefolder {tmp_path}"
    want = sorted((f"{row['class_name']}/{row['file']}", float(names.index(row["class_name"]))) for row in rows[:12])
    assert listed(listing) == want
