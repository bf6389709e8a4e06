"""`picpac merge` gives annotation shapes (boxes, polygons, points) and mask pixels the class ids of the
merged table, as it does labels: real YOLO, YOLO-seg, COCO panoptic and mask imports of coco128, and small
synthetic sources; sources whose classes cannot be reconciled are refused with the reason."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import PicPacValueError
from picpac.ingest import import_dataset
from picpac.tools.merge import merge

from helpers import png, png_bomb, run_console

COCO128 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "coco128-train"
STEMS = ("000000000009", "000000000025")  # a bowl, oranges and broccoli; a giraffe


def shapes(record) -> list[dict]:
    return json.loads(bytes(record["annotation"]))["shapes"]


def mask_of(record) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(bytes(record["mask"]), np.uint8), cv2.IMREAD_UNCHANGED)


@pytest.fixture(scope="module")
def coco_dbs(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """Two coco128 images imported as YOLO boxes, COCO panoptic rects, YOLO-seg polygons and class masks."""
    if not (COCO128 / "images").is_dir():
        pytest.skip(f"real test data missing: {COCO128} (shared/data/coco128-train beside the repository)")
    tmp = tmp_path_factory.mktemp("coco128")
    for folder, ext in (("images", "jpg"), ("detection", "txt"), ("instance-polygons", "txt"),
                        ("semantic-masks", "png")):
        (tmp / folder).mkdir()
        for stem in STEMS:
            shutil.copy(COCO128 / folder / f"{stem}.{ext}", tmp / folder)
    panoptic = json.loads((COCO128 / "panoptic" / "panoptic_train2017.json").read_text())
    ids = {image["id"] for image in panoptic["images"] if image["file_name"][:-4] in STEMS}
    panoptic["images"] = [image for image in panoptic["images"] if image["id"] in ids]
    panoptic["annotations"] = [a for a in panoptic["annotations"] if a["image_id"] in ids]
    (tmp / "panoptic.json").write_text(json.dumps(panoptic))
    dbs = {name: tmp / f"{name}.picpac" for name in ("yolo", "coco", "seg", "mask")}
    import_dataset(tmp / "images", dbs["yolo"], format="yolo", labels=tmp / "detection",
                   classes=COCO128 / "detection-classes.yaml", threads=2)
    import_dataset(tmp / "panoptic.json", dbs["coco"], root=tmp / "images", threads=2)
    import_dataset(tmp / "images", dbs["seg"], format="yolo-seg", labels=tmp / "instance-polygons",
                   classes=COCO128 / "instance-classes.yaml", threads=2)
    import_dataset(tmp / "images", dbs["mask"], format="maskdir", labels=tmp / "semantic-masks",
                   classes=COCO128 / "semantic-classes.yaml", threads=2)
    return tmp, dbs


def test_a_yolo_coco_seg_and_mask_merge_gives_every_class_id_the_merged_tables(coco_dbs, tmp_path):
    _, dbs = coco_dbs
    out = tmp_path / "out.picpac"
    report = merge([dbs[name] for name in ("yolo", "coco", "seg", "mask")], out, sync=False)
    sources = {name: picpac.Reader(path) for name, path in dbs.items()}
    yolo = sources["yolo"].classes
    assert (yolo[45], yolo[49], yolo[50]) == ("bowl", "orange", "broccoli")
    coco, seg, masks = sources["coco"].classes, sources["seg"].classes, sources["mask"].classes
    assert (coco[51], seg[51], masks[51], masks[55], masks[56], masks[0]) == \
        ("bowl", "bowl", "bowl", "orange", "broccoli", "unlabeled")
    union = list(yolo)  # YOLO's ids kept, then each new name in the order met
    for table in (coco, seg, masks):
        union += [name for name in table if name and name not in union]
    assert report.classes == union and report.remapped == [str(dbs[n]) for n in ("coco", "seg", "mask")]
    with picpac.Reader(out) as merged:
        assert merged.classes == union and len(merged) == 8
        assert merged.labels.tolist() == [0.0] * 8  # a detection record's label is no class id: kept
        for k in range(2):  # the YOLO records: copied byte for byte
            assert {n: bytes(v) for n, v in merged[k].fields.items()} == \
                {n: bytes(v) for n, v in sources["yolo"][k].fields.items()}
        for offset, name in ((2, "coco"), (4, "seg")):
            table = sources[name].classes
            for k in range(2):
                before, after = shapes(sources[name][k]), shapes(merged[offset + k])
                assert [s["label"] for s in after] == [union.index(table[s["label"]]) for s in before]
                assert [{**s, "label": 0} for s in after] == [{**s, "label": 0} for s in before]  # geometry kept
        first = [r.meta["path"] for r in sources["coco"]].index(f"{STEMS[0]}.jpg")
        bowl_before = [s["label"] for s in shapes(sources["coco"][first])]
        bowl_after = [s["label"] for s in shapes(merged[2 + first])]
        assert bowl_before.count(51) == bowl_after.count(45) == 3  # COCO's 51 bowl is YOLO's 45 bowl
        assert merged[4].meta["path"] == f"{STEMS[0]}.jpg" and [s["type"] for s in shapes(merged[4])] == ["polygon"] * 8
        assert sorted(s["label"] for s in shapes(merged[4])) == [45, 45, 45, 49, 49, 49, 49, 50]
        lut = {v: union.index(masks[v]) for v in range(len(masks)) if masks[v]}
        for k in range(2):
            before, after = mask_of(sources["mask"][k]), mask_of(merged[6 + k])
            assert after.dtype == np.uint8 and after.shape == before.shape
            assert np.array_equal(after, np.vectorize(lut.get)(before))
        before, after = mask_of(sources["mask"][0]), mask_of(merged[6])
        assert merged[6].meta["path"] == f"{STEMS[0]}.jpg"
        assert np.array_equal(after == 45, before == 51) and np.array_equal(after == 49, before == 55)
        assert np.array_equal(after == union.index("unlabeled"), before == 0)
    for reader in sources.values():
        reader.close()


def test_the_cli_names_what_was_remapped(coco_dbs):
    tmp, _ = coco_dbs
    done = run_console("picpac", "merge", "yolo.picpac", "coco.picpac", "merged.picpac", cwd=tmp)
    assert done.returncode == 0, done.stderr
    with picpac.Reader(tmp / "coco.picpac") as coco, picpac.Reader(tmp / "merged.picpac") as merged:
        moved = sum(a["label"] != b["label"]
                    for k in range(2) for a, b in zip(shapes(coco[k]), shapes(merged[2 + k])))
        count = len(merged.classes)
    assert moved == 15
    assert done.stdout == (f"merged 4 records into merged.picpac (2 from yolo.picpac, 2 from coco.picpac); {count} "
                           f"classes, annotation classes of 1 source(s) remapped ({moved} shapes, 0 masks)\n")
    (tmp / "merged.picpac").unlink()


# -- synthetic sources ---------------------------------------------------------------------------
A_SHAPES = [{"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "label": 0},
            {"type": "point", "geometry": {"x": 0.2, "y": 0.3}, "label": 2}]
B_SHAPES = [{"type": "rect", "geometry": {"x": 0.1, "y": 0.2, "width": 0.3, "height": 0.4}, "label": 4},
            {"type": "polygon", "geometry": {"points": [{"x": 0.1, "y": 0.1}, {"x": 0.5, "y": 0.1},
                                                        {"x": 0.3, "y": 0.6}]}, "label": 2},
            {"type": "point", "geometry": {"x": 0.5, "y": 0.5}, "label": 3},
            {"type": "ellipse", "geometry": {"x": 0.5, "y": 0.5, "width": 0.2, "height": 0.1}, "label": 1}]
B_MASK = np.array([[1, 2, 3], [4, 4, 1]], np.uint8)


def annotated(path: Path, classes: list[str], records: list[dict], source: str = "coco x.json") -> Path:
    with picpac.Writer(path, metadata={"classes": classes, "source": source}) as writer:
        for fields in records:  # (JSON text as bytes)
            writer.append(image=png(np.zeros((2, 3), np.uint8)), label=0,
                          **{k: v.encode() if isinstance(v, str) else v for k, v in fields.items()})
    return path


def test_shapes_and_mask_pixels_take_the_merged_ids(tmp_path):
    a = annotated(tmp_path / "a.picpac", ["cat", "", "dog"], [{"annotation": json.dumps({"shapes": A_SHAPES})}])
    b = annotated(tmp_path / "b.picpac", ["", "", "bird", "dog", "cat"],
                  [{"annotation": json.dumps({"shapes": B_SHAPES})}, {"mask": png(B_MASK)}], source="maskdir b")
    report = merge([a, b], tmp_path / "out.picpac", sync=False)
    assert report.classes == ["cat", "", "dog", "bird"] and report.remapped == [str(b)]
    assert (report.shapes, report.masks) == (3, 1)  # the ellipse's unnamed id 1 stays 1 (unnamed in the output too)
    with picpac.Reader(tmp_path / "out.picpac") as out:
        assert out.classes == ["cat", "", "dog", "bird"] and out.labels.tolist() == [0, 0, 0]
        assert bytes(out[0]["annotation"]) == json.dumps({"shapes": A_SHAPES}).encode()  # a: as stored
        assert [s["label"] for s in shapes(out[1])] == [0, 3, 2, 1]  # cat, bird, dog, unnamed
        assert [{**s, "label": 0} for s in shapes(out[1])] == [{**s, "label": 0} for s in B_SHAPES]
        assert np.array_equal(mask_of(out[2]), [[1, 3, 2], [0, 0, 1]])
        assert bytes(out[2]["image"]) == png(np.zeros((2, 3), np.uint8))


def test_relabel_by_source_keeps_annotations_and_says_the_classes_name_labels(tmp_path):
    a = annotated(tmp_path / "a.picpac", ["cat", "", "dog"], [{"annotation": json.dumps({"shapes": A_SHAPES})}])
    b = annotated(tmp_path / "b.picpac", ["", "", "bird", "dog", "cat"], [{"mask": png(B_MASK)}], source="maskdir b")
    merge([a, b], tmp_path / "out.picpac", relabel_by_source=True, sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as out:
        assert out.classes == ["a.picpac", "b.picpac"] and "source" not in out.metadata  # `info`: they name labels
        assert shapes(out[0]) == A_SHAPES and np.array_equal(mask_of(out[1]), B_MASK)


def test_mask_values_past_uint8_become_a_16_bit_png(tmp_path):
    a = annotated(tmp_path / "a.picpac", [f"c{i}" for i in range(300)], [], source="maskdir a")
    b = annotated(tmp_path / "b.picpac", ["x", "c299", "c0"], [{"mask": png(np.array([[0, 1, 2]], np.uint8))}],
                  source="maskdir b")
    merge([a, b], tmp_path / "out.picpac", sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as out:
        mask, data = mask_of(out[0]), bytes(out[0]["mask"])
    assert mask.dtype == np.uint16 and mask.tolist() == [[300, 299, 0]] and data[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("b_records, message", [
    ([{"mask": png(np.array([[0, 2]], np.uint8))}],
     "{b}: record 0 has 'mask' value 0, which its classes leave unnamed while the merged table names it 'cat'"),
    ([{"annotation": json.dumps({"shapes": [{**B_SHAPES[0], "label": 0}]})}],
     "{b}: record 0 has annotation shape 0 (rect) label 0, which its classes leave unnamed while the merged table "
     "names it 'cat'"),
    ([{"annotation": json.dumps({"shapes": [{**B_SHAPES[0], "label": [2, 0, 0]}]})}],
     "{b}: record 0 has annotation shape 0 (rect) label [2, 0, 0], which is not a class id"),
    ([{"annotation": json.dumps({"shapes": [{"type": "rect", "geometry": B_SHAPES[0]["geometry"]}]})}],
     "{b}: record 0 has annotation shape 0 (rect) label None, which is not a class id"),
    ([{"mask": png(np.zeros((2, 2, 3), np.uint8))}],
     "{b}: record 0 has a 'mask' of 3 channels; class masks have one channel"),
    ([{"annotation": "not json"}], "{b}: record 0 has an 'annotation' that is not PicPac JSON"),
    ([{"mask": png_bomb()}], "{b}: record 0 has a 'mask' 65500x65500 = 4,290,250,000 pixels, over the limit "
                             "max_pixels=268435456 (a decompression bomb?); raise --max-pixels"),
])
def test_unreconcilable_annotation_classes_are_refused_with_the_reason(tmp_path, b_records, message):
    a = annotated(tmp_path / "a.picpac", ["cat", "", "dog"], [])
    b = annotated(tmp_path / "b.picpac", ["", "", "bird", "dog", "cat"], b_records)
    with pytest.raises(PicPacValueError, match=re.escape(message.format(b=b))):
        merge([a, b], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists()


def test_sources_whose_classes_name_different_things_are_refused(tmp_path):
    a = annotated(tmp_path / "a.picpac", ["cat", "dog"], [], source="list a.txt")
    b = annotated(tmp_path / "b.picpac", ["dog", "cat"], [{"annotation": json.dumps({"shapes": A_SHAPES[:1]})}])
    with pytest.raises(PicPacValueError, match=f"^{b}: its class names name the annotation shapes' labels and mask "
                                               f"values, but {a}'s name the records' labels"):
        merge([a, b], tmp_path / "out.picpac")
    c = annotated(tmp_path / "c.picpac", ["dog", "dog", "cat"], [{"annotation": json.dumps({"shapes": A_SHAPES[:1]})}])
    d = annotated(tmp_path / "d.picpac", ["cat", "dog"], [])
    with pytest.raises(PicPacValueError, match=f"^{c}: names class 'dog' at ids 0, 1, so its ids cannot be matched "
                                               "to the merged table's by name"):
        merge([d, c], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists()


def test_ids_past_every_table_are_kept(tmp_path):
    a = annotated(tmp_path / "a.picpac", ["cat", "", "dog"], [])
    far = [{**B_SHAPES[0], "label": 10**30}, {**B_SHAPES[2], "label": 4}]
    b = annotated(tmp_path / "b.picpac", ["", "", "bird", "dog", "cat"], [{"annotation": json.dumps({"shapes": far})}])
    merge([a, b], tmp_path / "out.picpac", sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as out:
        assert [s["label"] for s in shapes(out[0])] == [10**30, 0]  # unnamed in b and in the output: kept


def test_an_unnamed_id_is_refused_when_no_id_of_its_source_moves(tmp_path):
    # b names only cat, at a's id: no id of b moves, yet its ids 1 and 2 are unnamed; the output names 2 'dog'
    a = annotated(tmp_path / "a.picpac", ["cat", "", "dog"], [])
    rect = {**B_SHAPES[0], "label": 2}
    for records, what in (([{"annotation": json.dumps({"shapes": [{**rect, "label": 0}, rect]})}],
                           "annotation shape 1 (rect) label 2"),
                          ([{"mask": png(np.array([[0, 1, 2]], np.uint8))}], "'mask' value 2")):
        b = annotated(tmp_path / "b.picpac", ["cat"], records)
        with pytest.raises(PicPacValueError, match=re.escape(
                f"{b}: record 0 has {what}, which its classes leave unnamed while the merged table names it 'dog'")):
            merge([a, b], tmp_path / "out.picpac")
        assert not (tmp_path / "out.picpac").exists()
        b.unlink()
    # ids it leaves unnamed that the output leaves unnamed too are kept: nothing moves, b is not remapped
    kept = [{"annotation": json.dumps({"shapes": [{**rect, "label": 0}, {**rect, "label": 1}]})},
            {"mask": png(np.array([[0, 1, 7]], np.uint8))}]
    b = annotated(tmp_path / "b.picpac", ["cat"], kept)
    report = merge([a, b], tmp_path / "out.picpac", sync=False)
    assert report.classes == ["cat", "", "dog"] and report.remapped == [] and (report.shapes, report.masks) == (0, 0)
    assert report.summary().endswith("; 3 classes")
    with picpac.Reader(tmp_path / "out.picpac") as out:
        assert bytes(out[0]["annotation"]) == kept[0]["annotation"].encode()
        assert bytes(out[1]["mask"]) == kept[1]["mask"]
