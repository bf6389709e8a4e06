"""The importer (picpac.ingest), its source layouts (picpac.sources) and image helpers, on real files."""
from __future__ import annotations

import csv
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac import MissingPathError, PicPacValueError, Reader, SourceError, image
from picpac.errors import ImportFailedError
from picpac.ingest import import_dataset
from picpac.sources import FORMATS, scan
from picpac.tools.cli import IMPORT_FORMATS

from helpers import run_console

IMAGENET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet-250"


# -- helpers -----------------------------------------------------------------------------------
def write_image(path: Path, width: int, height: int, channels: int = 3, seed: int = 0) -> bytes:
    """Write a noise image (format from the extension) and return its bytes."""
    shape = (height, width) if channels == 1 else (height, width, channels)
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), pixels)
    return path.read_bytes()


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def read_all(db: Path) -> tuple[dict, list[tuple]]:
    """Dataset metadata (without its creation stamp) and every record as plain values."""
    with Reader(db) as r:
        metadata = {k: v for k, v in r.metadata.items() if k != "created"}
        records = [(rec.label, rec.group, rec.meta, {k: bytes(v) for k, v in rec.fields.items()}) for rec in r]
    return metadata, records


def leftovers(directory: Path) -> list[str]:
    """The database ("db") and any Writer temp files in ``directory``."""
    return sorted(p.name for p in directory.iterdir() if p.name == "db" or p.name.endswith(".picpac-tmp"))


# -- source builders (each returns the source path) ------------------------------------------------
def make_flat(tmp: Path) -> Path:
    src = tmp / "flat"
    write_image(src / "a.png", 8, 6)
    write_image(src / "sub" / "b.jpg", 5, 4, channels=1)
    return src


def make_classdirs(tmp: Path) -> Path:
    src = tmp / "classdirs"
    for i, (cls, name) in enumerate([("0", "a.png"), ("1", "b.png"), ("1", "c.png"), ("2", "d.jpg")]):
        write_image(src / cls / name, 6 + i, 4, seed=i)
    return src


def make_imagefolder(tmp: Path) -> Path:
    src = tmp / "imagefolder"
    for i, cls in enumerate(["dog", "cat", "bird"]):
        write_image(src / cls / f"{i}.png", 4, 4 + i, seed=i)
    return src


def make_list(tmp: Path) -> Path:
    for i, name in enumerate(["a.png", "b.png"]):
        write_image(tmp / "img" / name, 4, 4, seed=i)
    return write_text(tmp / "img" / "list.txt", "a.png\t3\nb.png\t1.5\n")


ANNOTATIONS = ['{"shapes": [{"type": "rect", "geometry": {"x": 0.1, "y": 0.2}}]}', '{ "shapes" : [] }']


def make_annolist(tmp: Path) -> Path:
    lines = []
    for i, annotation in enumerate(ANNOTATIONS):
        write_image(tmp / "img" / f"{i}.png", 5, 5, seed=i)
        lines.append(f"{i}.png\t{annotation}\n")
    return write_text(tmp / "img" / "anno.txt", "".join(lines))


def make_masklist(tmp: Path) -> Path:
    write_image(tmp / "img" / "a.png", 7, 5)
    write_image(tmp / "img" / "masks" / "a.png", 7, 5, channels=1, seed=1)
    return write_text(tmp / "img" / "masks.txt", "a.png\tmasks/a.png\n")


def make_csv(tmp: Path) -> Path:
    for i in range(3):
        write_image(tmp / "img" / f"{i}.png", 4, 4, seed=i)
    return write_text(tmp / "img" / "data.csv", "path,label,group\n0.png,1,7\n1.png,0,7\n2.png,2,\n")


# -- formats -----------------------------------------------------------------------------------
def test_dir_imports_every_image_sorted_with_label_0(tmp_path):
    src = make_flat(tmp_path)
    upper = write_image(src / "Z.PNG", 3, 2, channels=4)
    write_text(src / "notes.txt", "not an image")
    write_image(src / ".hidden.png", 3, 3)
    write_image(src / ".cache" / "x.png", 3, 3)
    report = import_dataset(src, tmp_path / "db", format="dir")
    metadata, records = read_all(tmp_path / "db")
    assert report.count == 3 and report.skipped == []
    assert metadata == {"fields": ["image"], "source": f"dir {src}"}
    assert [r[2] for r in records] == [
        {"path": "Z.PNG", "width": 3, "height": 2, "channels": 4},
        {"path": "a.png", "width": 8, "height": 6, "channels": 3},
        {"path": "sub/b.jpg", "width": 5, "height": 4, "channels": 1},
    ]
    assert [(r[0], r[1]) for r in records] == [(0.0, None)] * 3
    assert records[0][3] == {"image": upper}
    assert records[2][3]["image"] == (src / "sub" / "b.jpg").read_bytes()


def test_list_labels_comments_whitespace_and_root(tmp_path):
    a = write_image(tmp_path / "img" / "a.png", 4, 3)
    write_image(tmp_path / "img" / "sub dir" / "c.jpg", 5, 4)
    outside = tmp_path / "elsewhere" / "z.png"
    write_image(outside, 2, 2)
    listing = write_text(tmp_path / "lists" / "list.txt",
                         f"# path<TAB>label\n\na.png\t1\nsub dir/c.jpg 2.5\n{outside}\t-3\n")
    report = import_dataset(listing, tmp_path / "db", format="list", root=tmp_path / "img")
    metadata, records = read_all(tmp_path / "db")
    assert report.count == 3
    assert metadata["source"] == f"list {listing}"
    assert [r[0] for r in records] == [1.0, 2.5, -3.0]
    assert [r[2]["path"] for r in records] == ["a.png", "sub dir/c.jpg", str(outside)]
    assert records[0][3] == {"image": a}


def test_classdirs_labels_are_folder_numbers(tmp_path):
    src = make_classdirs(tmp_path)
    write_image(src / "loose.png", 3, 3)  # not in a class folder: not imported
    import_dataset(src, tmp_path / "db", format="classdirs")
    metadata, records = read_all(tmp_path / "db")
    assert "classes" not in metadata
    assert [(r[0], r[2]["path"], r[2]["width"]) for r in records] == [
        (0.0, "0/a.png", 6), (1.0, "1/b.png", 7), (1.0, "1/c.png", 8), (2.0, "2/d.jpg", 9)]


def test_imagefolder_classes_are_sorted_folder_names(tmp_path):
    src = make_imagefolder(tmp_path)
    import_dataset(src, tmp_path / "db", format="imagefolder")
    metadata, records = read_all(tmp_path / "db")
    assert metadata["classes"] == ["bird", "cat", "dog"]
    assert [(r[0], r[2]["path"], r[2]["height"]) for r in records] == [
        (0.0, "bird/2.png", 6), (1.0, "cat/1.png", 5), (2.0, "dog/0.png", 4)]
    with Reader(tmp_path / "db") as r:
        assert r.classes == ["bird", "cat", "dog"]


def test_annolist_stores_annotation_bytes_verbatim_and_skips_bad_json(tmp_path):
    src = make_annolist(tmp_path)
    write_image(tmp_path / "img" / "bad.png", 5, 5)
    with open(src, "a") as f:
        f.write('bad.png\t{"shapes": [\n')
    report = import_dataset(src, tmp_path / "db", format="annolist")
    metadata, records = read_all(tmp_path / "db")
    assert metadata["fields"] == ["image", "annotation"]
    assert [r[3]["annotation"] for r in records] == [a.encode() for a in ANNOTATIONS]
    assert [r[3]["image"] for r in records] == [(tmp_path / "img" / f"{i}.png").read_bytes() for i in range(2)]
    [(path, reason)] = report.skipped
    assert path == "bad.png" and reason.startswith("annotation is not valid JSON") and reason.endswith(f"({src}:3)")


def test_masklist_stores_masks_and_skips_missing_or_mismatched(tmp_path):
    src = make_masklist(tmp_path)
    write_image(tmp_path / "img" / "b.png", 7, 5)
    write_image(tmp_path / "img" / "masks" / "b.png", 6, 5, channels=1)
    write_image(tmp_path / "img" / "c.png", 7, 5)
    with open(src, "a") as f:
        f.write("b.png\tmasks/b.png\nc.png\tmasks/none.png\n")
    report = import_dataset(src, tmp_path / "db", format="masklist")
    _, records = read_all(tmp_path / "db")
    assert len(records) == 1
    assert records[0][3] == {"image": (tmp_path / "img" / "a.png").read_bytes(),
                             "mask": (tmp_path / "img" / "masks" / "a.png").read_bytes()}
    assert records[0][2] == {"path": "a.png", "width": 7, "height": 5, "channels": 3}
    assert report.skipped == [
        ("b.png", f"mask masks/b.png: 6x5 but the image is 7x5; a mask must match its image ({src}:2)"),
        ("c.png", f"mask masks/none.png: missing file ({src}:3)"),
    ]


def test_csv_numeric_labels_and_groups(tmp_path):
    src = make_csv(tmp_path)
    import_dataset(src, tmp_path / "db", format="csv")
    metadata, records = read_all(tmp_path / "db")
    assert "classes" not in metadata
    assert [(r[0], r[1], r[2]["path"]) for r in records] == [(1.0, 7, "0.png"), (0.0, 7, "1.png"), (2.0, None, "2.png")]


def test_csv_class_names_annotations_and_masks(tmp_path):
    for name in ["a", "b", "c"]:
        write_image(tmp_path / f"{name}.png", 4, 4)
    write_image(tmp_path / "m.png", 4, 4, channels=1)
    rows = [["path", "Label", "annotation", "mask", "note"],
            ["a.png", "dog", '{"shapes": [1, 2]}', "m.png", "x"],
            ["b.png", "cat", "", "", ""],
            ["c.png", "7", "", "", ""]]
    with open(tmp_path / "data.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    import_dataset(tmp_path / "data.csv", tmp_path / "db", label_kind="names")  # '7' is a class name too
    metadata, records = read_all(tmp_path / "db")
    assert metadata["classes"] == ["7", "cat", "dog"]
    assert [r[0] for r in records] == [2.0, 1.0, 0.0]
    assert records[0][3]["annotation"] == b'{"shapes": [1, 2]}'
    assert records[0][3]["mask"] == (tmp_path / "m.png").read_bytes()
    assert [sorted(r[3]) for r in records[1:]] == [["image"], ["image"]]


BUILDERS = {"dir": make_flat, "classdirs": make_classdirs, "imagefolder": make_imagefolder, "list": make_list,
            "annolist": make_annolist, "masklist": make_masklist, "csv": make_csv}


@pytest.mark.parametrize("fmt", BUILDERS)
def test_auto_detects_each_format(tmp_path, fmt):
    src = BUILDERS[fmt](tmp_path)
    assert scan(str(src)).source == f"{fmt} {src}"
    auto = import_dataset(src, tmp_path / "auto.db")
    import_dataset(src, tmp_path / "explicit.db", format=fmt)
    assert auto.source == f"{fmt} {src}"
    assert read_all(tmp_path / "auto.db") == read_all(tmp_path / "explicit.db")


def test_cli_formats_match_sources():
    assert IMPORT_FORMATS == list(FORMATS)


# -- real data ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> tuple[Path, list[tuple[str, int]]]:
    """A copy of imagenet-250 and its (file, class index) rows."""
    if not (IMAGENET / "labels.tsv").is_file():
        pytest.skip(f"real test data missing: {IMAGENET} (shared/data/imagenet-250 beside the repository)")
    copy = tmp_path_factory.mktemp("imagenet") / "imagenet-250"
    shutil.copytree(IMAGENET, copy)
    with open(copy / "labels.tsv") as f:
        rows = [(row["file"], int(row["class_index"])) for row in csv.DictReader(f, delimiter="\t")]
    return copy, rows


def test_imagenet_bytes_kept_and_storage_overhead_under_1_percent(imagenet, tmp_path):
    src, rows = imagenet
    listing = write_text(src / "list.txt", "".join(f"{name}\t{label}\n" for name, label in rows))
    report = import_dataset(listing, tmp_path / "db", threads=2)
    jpeg_bytes = sum((src / name).stat().st_size for name, _ in rows)
    assert report.count == len(rows) == 250 and report.skipped == []
    assert report.source_bytes == jpeg_bytes
    assert report.bytes == (tmp_path / "db").stat().st_size <= 1.01 * jpeg_bytes
    with Reader(tmp_path / "db") as r:
        assert r.labels.tolist() == [float(label) for _, label in rows]
        for rec, (name, _) in zip(r, rows):
            assert bytes(rec["image"]) == (src / name).read_bytes()
            assert rec.meta["path"] == name
        first = cv2.imdecode(np.frombuffer((src / rows[0][0]).read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
        assert (r[0].meta["height"], r[0].meta["width"], r[0].meta["channels"]) == first.shape


def test_parallel_import_equals_serial(imagenet, tmp_path):
    src, _ = imagenet
    import_dataset(src, tmp_path / "serial.db", format="dir", threads=1)
    import_dataset(src, tmp_path / "parallel.db", format="dir", threads=4)
    serial = read_all(tmp_path / "serial.db")
    assert len(serial[1]) == 250
    assert read_all(tmp_path / "parallel.db") == serial


# -- bad files ---------------------------------------------------------------------------------
def make_broken_list(tmp: Path) -> Path:
    """A list of one good image, then a missing, a truncated, a garbage and an empty file."""
    img = tmp / "img"
    write_image(img / "good.png", 4, 4)
    jpeg = write_image(img / "whole.jpg", 200, 200)
    (img / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (img / "garbage.png").write_bytes(os.urandom(500))
    (img / "empty.jpg").write_bytes(b"")
    names = ["good.png", "missing.png", "truncated.jpg", "garbage.png", "empty.jpg"]
    return write_text(img / "list.txt", "".join(f"{name}\t1\n" for name in names))


def test_missing_and_corrupt_files_are_skipped_and_named(tmp_path):
    src = make_broken_list(tmp_path)
    report = import_dataset(src, tmp_path / "db")
    undecodable = "cannot decode (corrupt, truncated or not an image)"
    assert report.count == 1
    assert report.skipped == [("missing.png", f"missing file ({src}:2)"),
                              ("truncated.jpg", f"{undecodable} ({src}:3)"),
                              ("garbage.png", f"{undecodable} ({src}:4)"),
                              ("empty.jpg", f"{undecodable} ({src}:5)")]
    lines = report.summary().splitlines()
    assert lines[0].startswith(f"imported 1 records from list {src} into {tmp_path / 'db'} (")
    assert lines[1:] == ["skipped 4:"] + [f"  {path}: {reason}" for path, reason in report.skipped]
    assert [r[2]["path"] for r in read_all(tmp_path / "db")[1]] == ["good.png"]


def test_strict_raises_and_writes_nothing(tmp_path):
    src = make_broken_list(tmp_path)
    with pytest.raises(ImportFailedError, match=rf"missing.png: missing file \({src}:2\); nothing was written"):
        import_dataset(src, tmp_path / "db", strict=True)
    assert leftovers(tmp_path) == []


def test_failed_overwrite_keeps_the_old_database(tmp_path):
    src = make_broken_list(tmp_path)
    import_dataset(make_flat(tmp_path), tmp_path / "db")
    before = (tmp_path / "db").read_bytes()
    with pytest.raises(ImportFailedError):
        import_dataset(src, tmp_path / "db", strict=True, overwrite=True)
    assert (tmp_path / "db").read_bytes() == before
    assert leftovers(tmp_path) == ["db"]


def test_nothing_valid_raises_and_writes_nothing(tmp_path):
    src = write_text(tmp_path / "list.txt", "gone.png\t0\n")
    with pytest.raises(ImportFailedError, match=r"none of its 1 images could be imported.*gone.png: missing file"):
        import_dataset(src, tmp_path / "db")
    assert leftovers(tmp_path) == []


def test_existing_db_needs_overwrite(tmp_path):
    src = make_flat(tmp_path)
    db = tmp_path / "db"
    db.write_bytes(b"precious")
    with pytest.raises(PicPacValueError, match="already exists; pass --overwrite"):
        import_dataset(src, db)
    assert db.read_bytes() == b"precious"
    assert import_dataset(src, db, overwrite=True).count == 2


@pytest.mark.parametrize("content, fmt, message", [
    ("a.png\n", "list", r"list.txt:1: expected `path<TAB>label`, got 'a.png'"),
    ("a.png\n", "masklist", r"list.txt:1: expected `path<TAB>mask-path`"),
    ("a.png\t1\n", "dir", r"list.txt: is a file, but format 'dir' reads a folder"),
    ("a.png\t1\n", "pictures", r"unknown import format 'pictures'; use one of auto, dir"),
])
def test_malformed_list_names_file_and_line(tmp_path, content, fmt, message):
    src = write_text(tmp_path / "list.txt", content)
    with pytest.raises(SourceError, match=message):
        import_dataset(src, tmp_path / "db", format=fmt)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("content, message", [
    ("file,label\na.png,1\n", r"data.csv:1: the CSV header has no 'path' column \(header: file, label\)"),
    ("path,label\na.png,1\nb.png,\n", r"data.csv:3: empty label"),
    ("path,group\na.png,x\n", r"data.csv:2: group 'x' is not an integer"),
    ("path,group\na.png,1\nb.png,9223372036854775808\n", r"data.csv:3: group 9223372036854775808 is outside"),
    ("", r"data.csv: empty CSV"),
])
def test_malformed_csv_names_file_and_line(tmp_path, content, message):
    src = write_text(tmp_path / "data.csv", content)
    with pytest.raises(SourceError, match=message):
        import_dataset(src, tmp_path / "db")


def test_bad_folders(tmp_path):
    with pytest.raises(MissingPathError, match="nowhere: no such file or directory"):
        import_dataset(tmp_path / "nowhere", tmp_path / "db")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"empty: no images found \(dir "):
        import_dataset(tmp_path / "empty", tmp_path / "db")
    src = make_imagefolder(tmp_path)
    with pytest.raises(SourceError, match="classdirs needs subfolders named 0..N-1, found 'bird'"):
        import_dataset(src, tmp_path / "db", format="classdirs")
    assert leftovers(tmp_path) == []


# -- max_size ----------------------------------------------------------------------------------
def test_max_size_downsizes_images_and_masks(tmp_path):
    img = tmp_path / "img"
    write_image(img / "big.jpg", 400, 300)
    write_image(img / "big.png", 300, 400, channels=1)
    small = write_image(img / "small.png", 80, 60)
    labels = np.kron(np.indices((100, 134)).sum(0) % 3, np.ones((3, 3), np.int64))[:300, :400]
    cv2.imwrite(str(img / "mask.png"), np.array([0, 100, 255], np.uint8)[labels])
    src = write_text(img / "masks.txt", "big.jpg\tmask.png\n")
    write_text(img / "list.txt", "big.jpg\t0\nbig.png\t0\nsmall.png\t0\n")
    import_dataset(img / "list.txt", tmp_path / "db", max_size=100)
    _, records = read_all(tmp_path / "db")
    assert [(r[2]["width"], r[2]["height"]) for r in records] == [(100, 75), (75, 100), (80, 60)]
    assert records[0][3]["image"][:2] == b"\xff\xd8"  # still a JPEG
    assert image.decode(records[0][3]["image"]).shape == (75, 100, 3)
    assert image.decode(records[1][3]["image"]).shape == (100, 75)
    assert records[2][3]["image"] == small

    import_dataset(src, tmp_path / "masks.db", max_size=100)
    _, [(_, _, meta, fields)] = read_all(tmp_path / "masks.db")
    mask = image.decode(fields["mask"])
    assert meta["width"] == 100 and mask.shape == (75, 100)
    assert set(np.unique(mask)) == {0, 100, 255}


def exif_rotated_jpeg(path: Path) -> None:
    """A 40x20 JPEG (white left quarter) whose EXIF orientation 6 says: show it rotated 90 degrees."""
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[:, :10] = 255
    jpeg = cv2.imencode(".jpg", pixels)[1].tobytes()
    tiff = b"II*\x00" + struct.pack("<IHHHII", 8, 1, 0x0112, 3, 1, 6) + struct.pack("<I", 0)
    app1 = b"Exif\x00\x00" + tiff
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + jpeg[2:])


def test_exif_orientation_is_applied_to_sizes_and_downsizing(tmp_path):
    exif_rotated_jpeg(tmp_path / "img" / "r.jpg")
    write_text(tmp_path / "img" / "list.txt", "r.jpg\t0\n")
    import_dataset(tmp_path / "img" / "list.txt", tmp_path / "db")
    _, [(_, _, meta, fields)] = read_all(tmp_path / "db")
    assert (meta["width"], meta["height"]) == (20, 40)  # as viewers (and cv2.IMREAD_COLOR) show it
    assert fields["image"] == (tmp_path / "img" / "r.jpg").read_bytes()
    import_dataset(tmp_path / "img" / "list.txt", tmp_path / "small.db", max_size=20)
    _, [(_, _, meta, fields)] = read_all(tmp_path / "small.db")
    shown = cv2.imdecode(np.frombuffer(fields["image"], np.uint8), cv2.IMREAD_COLOR)
    assert (meta["width"], meta["height"]) == (10, 20) and shown.shape == (20, 10, 3)
    assert shown[:5].mean() > 200 and shown[-5:].mean() < 50  # the white quarter is on top after rotation


def test_cli_import_and_picpac_import(tmp_path):
    src = make_imagefolder(tmp_path)
    done = run_console("picpac", "import", str(src), "db", "--threads", "2", "--max-size", "5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 3 records from imagefolder {src} into db (")
    assert read_all(tmp_path / "db")[0]["classes"] == ["bird", "cat", "dog"]

    listing = make_list(tmp_path)
    done = run_console("picpac-import", "-f", "1", listing.name, "list.db", cwd=listing.parent)
    assert done.returncode == 0, done.stderr
    assert [r[0] for r in read_all(listing.parent / "list.db")[1]] == [3.0, 1.5]

    again = run_console("picpac-import", "-f", "1", listing.name, "list.db", "--overwrite", "--strict",
                    cwd=listing.parent)
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("args, message", [
    (("picpac", "import", "nowhere", "db"), "picpac: error: nowhere: no such file or directory"),
    (("picpac-import", "-f", "1", "list.txt", "db"),
     "picpac-import: error: list.txt: none of its 1 images could be imported, nothing was written; "
     "first problem: a.png: missing file (list.txt:1)"),
    (("picpac", "import", "list.txt", "list.txt"), "picpac: error: list.txt: already exists; pass --overwrite"),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
    write_text(tmp_path / "list.txt", "a.png\tx\n")
    done = run_console(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr and not (tmp_path / "db").exists()


def test_ctrl_c_leaves_no_database(imagenet, tmp_path):
    src, rows = imagenet
    listing = write_text(tmp_path / "list.txt", "".join(f"{src / name}\t0\n" for name, _ in rows) * 8)
    if shutil.which("picpac") is None:
        pytest.skip("console script picpac not on PATH; run `pip install -e .`")
    proc = subprocess.Popen(["picpac", "import", str(listing), "db", "--threads", "1", "--max-size", "64"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not any(p.name.endswith(".picpac-tmp") for p in tmp_path.iterdir()):  # the Writer has started
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "Aborted!" in err
    assert leftovers(tmp_path) == []
