"""`picpac import` of labelled lists never invents labels: the real imagenet-250 labels.tsv (a header, then
file, class index and class name), typos in a label column, and the summary line's classes."""
from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac import SourceError
from picpac.ingest import import_dataset

from helpers import run_console

IMAGENET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet-250"
COMMANDS = [("picpac", "import"), ("picpac-import", "-f", "1")]


def image(path: Path) -> None:
    assert cv2.imwrite(str(path), np.full((4, 6, 3), 90, np.uint8))


@pytest.fixture(scope="module")
def labels_tsv() -> tuple[Path, list[dict[str, str]]]:
    """imagenet-250's labels.tsv, read in place (never written), and its rows."""
    if not (IMAGENET / "labels.tsv").is_file():
        pytest.skip(f"real test data missing: {IMAGENET} (shared/data/imagenet-250 beside the repository)")
    with open(IMAGENET / "labels.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == 250
    return IMAGENET / "labels.tsv", rows


@pytest.mark.parametrize("command", COMMANDS, ids=["picpac import", "picpac-import"])
def test_the_imagenet_labels_tsv_imports_its_labels_and_class_names(labels_tsv, tmp_path, command):
    src, rows = labels_tsv
    done = run_console(*command, str(src), "db.picpac", "--threads", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skipped" not in done.stdout  # the header is no missing image
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"imported 250 records from list {src} into db.picpac (")
    assert first.endswith("img/s; 250 classes (ids 0-996): 0 tench, 4 hammerhead, 8 hen, 12 house_finch, "
                          "16 bulbul, ...")
    with picpac.Reader(tmp_path / "db.picpac") as db:
        assert len(db) == 250
        assert [(r.meta["path"], r.label) for r in db] == [(row["file"], float(row["class_index"])) for row in rows]
        assert len(db.classes) == 997
        assert {i: name for i, name in enumerate(db.classes) if name} == \
            {int(row["class_index"]): row["class_name"] for row in rows}


def test_a_typo_in_the_imagenet_label_column_names_the_line(labels_tsv, tmp_path):
    src, rows = labels_tsv
    lines = src.read_text().splitlines(keepends=True)
    assert lines[12].split("\t")[1] == "44"
    lines[12] = lines[12].replace("\t44\t", "\t4A\t")
    typo = tmp_path / "labels.tsv"
    typo.write_text("".join(lines))
    done = run_console("picpac", "import", str(typo), "db.picpac", "--root", str(IMAGENET), cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "db.picpac").exists()
    assert done.stderr.startswith(f"picpac: error: {typo}:13: label '4A' is a class name, but the other 249 labels "
                                  "are numbers; a label column holds numbers or class names, never both")
    # read as class names on purpose, every label is one: a class-name column cannot name them
    with pytest.raises(SourceError, match=f"{typo}:2: the labels are class names"):
        import_dataset(typo, tmp_path / "db.picpac", root=IMAGENET, label_kind="names")


def test_a_1O_typo_in_a_plain_list_is_refused_and_names_every_offending_line(tmp_path):
    for i in range(12):
        image(tmp_path / f"{i}.jpg")
    labels = [str(i) for i in range(12)]
    labels[10], labels[11] = "1O", "l1"
    src = tmp_path / "list.txt"
    src.write_text("".join(f"{i}.jpg\t{label}\n" for i, label in enumerate(labels)))
    with pytest.raises(SourceError, match=f"{src}:11: label '1O' is a class name, as are {src}:12 \\('l1'\\), but the "
                                          "other 10 labels are numbers") as error:
        import_dataset(src, tmp_path / "db")
    assert "--label-kind names" in str(error.value) and not (tmp_path / "db").exists()


def test_the_summary_line_shows_the_classes(tmp_path):
    image(tmp_path / "a.jpg")
    src = tmp_path / "list.txt"
    src.write_text("a.jpg\t3\n")
    assert import_dataset(src, tmp_path / "numbers").summary().endswith(" img/s; no class names")
    src.write_text("".join(f"a.jpg\t{name}\n" for name in ("cow", "ant", "bee", "cat", "dog", "eel", "fox")))
    assert import_dataset(src, tmp_path / "names").summary().endswith(" img/s; 7 classes: ant, bee, cat, cow, dog, ...")
    src.write_text("file\tlabel\tname\na.jpg\t2\tcat\na.jpg\t0\tdog\n")
    report = import_dataset(src, tmp_path / "named")
    assert report.classes == ["dog", "", "cat"]
    assert report.summary().endswith(" img/s; 2 classes (ids 0-2): 0 dog, 2 cat")
