"""COCO JSON files, instances and panoptic (picpac/sources/coco.py), as PicPac JSON shapes on coco128."""
from __future__ import annotations

import json

import pytest

from picpac import SourceError
from picpac.ingest import import_dataset
from picpac.sources import scan

from source_helpers import close, compact, records, write_text, yolo_lines


# -- COCO --------------------------------------------------------------------------------------
def test_coco_panoptic_segments_become_bbox_rects(coco128, tmp_path):
    src = coco128 / "panoptic" / "panoptic_train2017.json"
    coco = json.loads(src.read_text())
    report = import_dataset(src, tmp_path / "db", root=coco128 / "images", threads=2)  # auto: .json is coco
    assert report.count == 100 and report.skipped == [] and report.source == f"coco {src}"
    classes, rows = records(tmp_path / "db")
    assert all(classes[c["id"]] == c["name"] for c in coco["categories"])
    assert len(classes) == 201 and classes[0] == "" and classes[1] == "person"
    segments = {a["image_id"]: a["segments_info"] for a in coco["annotations"]}
    assert [row["meta"]["path"] for row in rows] == [image["file_name"] for image in coco["images"]]
    for row, image in zip(rows, coco["images"]):
        assert (row["meta"]["width"], row["meta"]["height"]) == (image["width"], image["height"])
        assert row["label"] == 0.0 and len(row["shapes"]) == len(segments[image["id"]])
        for shape, segment in zip(row["shapes"], segments[image["id"]]):
            assert shape["type"] == "rect" and shape["label"] == segment["category_id"]
            assert shape.get("tag") == (1 if segment["iscrowd"] else None)
            g = shape["geometry"]
            pixels = [g["x"] * image["width"], g["y"] * image["height"],
                      g["width"] * image["width"], g["height"] * image["height"]]
            assert close(pixels, segment["bbox"], 1e-3), (image["file_name"], pixels, segment["bbox"])


def test_coco_instances_polygons_parts_and_crowds(coco128, tmp_path):
    names = ["000000000009.jpg", "000000000025.jpg", "000000000030.jpg"]
    sizes = [(640, 480), (640, 426), (640, 428)]
    polygons = [[(cls, [v * (w if i % 2 == 0 else h) for i, v in enumerate(values)])
                 for cls, values in yolo_lines(coco128 / "instance-polygons" / (name[:-4] + ".txt"))]
                for name, (w, h) in zip(names, sizes)]
    (cls_a, one), (cls_b, two), (_, three) = polygons[0][:3]
    (cls_c, _), = polygons[1][:1]
    coco = {
        "images": [{"id": 10 + i, "file_name": name, "width": w, "height": h}
                   for i, (name, (w, h)) in enumerate(zip(names, sizes))],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": cls_a, "iscrowd": 0, "segmentation": [one], "bbox": [1, 2, 3, 4]},
            {"id": 2, "image_id": 10, "category_id": cls_b, "iscrowd": 0, "segmentation": [two, three],
             "bbox": [1, 2, 3, 4]},
            {"id": 3, "image_id": 11, "category_id": cls_c, "iscrowd": 1,
             "segmentation": {"counts": [0, 5, 100], "size": [426, 640]}, "bbox": [64, 42.6, 320, 213]},
            {"id": 4, "image_id": 11, "category_id": 90, "bbox": [0, 0, 640, 426]},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 51, "name": "bowl"}, {"id": 90, "name": "toothbrush"}],
    }
    src = write_text(tmp_path / "instances.json", json.dumps(coco))

    def points(pixels, w, h):
        return [{"x": round(x / w, 6), "y": round(y / h, 6)} for x, y in zip(pixels[::2], pixels[1::2])]

    expected = [
        {"shapes": [
            {"type": "polygon", "geometry": {"points": points(one, 640, 480)}, "label": cls_a},
            {"type": "polygons", "geometry": {"polygons": [points(two, 640, 480), points(three, 640, 480)]},
             "label": cls_b}]},
        {"shapes": [
            {"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "label": cls_c, "tag": 1},
            {"type": "rect", "geometry": {"x": 0.0, "y": 0.0, "width": 1.0, "height": 1.0}, "label": 90}]},
        {"shapes": []},
    ]
    report = import_dataset(src, tmp_path / "db", format="coco", root=coco128 / "images", threads=2)
    assert report.count == 3 and report.skipped == []
    classes, rows = records(tmp_path / "db")
    assert [row["fields"]["annotation"] for row in rows] == [compact(e) for e in expected]
    assert [row["meta"]["path"] for row in rows] == names
    assert len(classes) == 91 and (classes[1], classes[51], classes[90], classes[2]) == ("person", "bowl",
                                                                                        "toothbrush", "")
    # the points are the YOLO-seg source again (pixels / size)
    assert close([p["x"] for p in expected[0]["shapes"][0]["geometry"]["points"]],
                 yolo_lines(coco128 / "instance-polygons" / "000000000009.txt")[0][1][::2], 1e-6)


@pytest.mark.parametrize("change, message", [
    (lambda c: c["annotations"][0].update(image_id=99), r"annotations\[0\]: image_id 99 is not the id of an entry"),
    (lambda c: c["annotations"][0].update(segmentation=[[1, 2, 3]]), r"annotations\[0\]: .*odd number of "
                                                                      r"coordinates \(3\)"),
    (lambda c: c["annotations"][0].update(segmentation=[1, 2, 3, 4, 5, 6]), r"segmentation must be a list of polygons"),
    (lambda c: c["annotations"][0].update(segmentation=None, bbox=None), r"annotations\[0\]: expected `bbox`"),
    (lambda c: c["annotations"][0].update(category_id="cat"), r"`category_id` must be an integer"),
    (lambda c: c["images"][0].pop("width"), r"images\[0\]: `width` must be a positive number"),
    (lambda c: c["images"].append(dict(c["images"][0])), r"images\[1\]: image id 1 appears twice"),
    (lambda c: c.pop("images"), r"not a COCO file: no `images` list"),
])
def test_malformed_coco_names_the_entry(tmp_path, change, message):
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}],
            "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "segmentation": [[1, 1, 5, 1, 3, 4]]}],
            "categories": [{"id": 1, "name": "cat"}]}
    change(coco)
    src = write_text(tmp_path / "coco.json", json.dumps(coco))
    with pytest.raises(SourceError, match=message):
        scan(src)
    write_text(tmp_path / "broken.json", '{"images": [')
    with pytest.raises(SourceError, match=r"broken.json: not valid JSON"):
        scan(tmp_path / "broken.json", "coco")


def _coco_text(images='[{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}]', annotations="[]",
               categories="[]") -> str:
    return f'{{"images": {images}, "annotations": {annotations}, "categories": {categories}}}'


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, r"not valid JSON \(nested too deeply\)"),
    (_coco_text(annotations='[{"image_id": 1, "category_id": 1, "bbox": [' + "[" * 50_000 + "]" * 50_000 + "]}]"),
     r"not valid JSON \(nested too deeply\)"),
    (_coco_text(images='"abc"'), r"not a COCO file: no `images` list"),
    (_coco_text(annotations='"abc"'), r"`annotations` is not a list"),
    (_coco_text(categories='{"1": "cat"}'), r"`categories` is not a list"),
    (_coco_text(images='["a.jpg"]'), r"images\[0\]: expected a JSON object \(an image\), got str"),
    (_coco_text(images='[{"id": [1], "file_name": "a.jpg", "width": 1, "height": 1}]'),
     r"images\[0\]: `id` must be an integer or a string, got \[1\]"),
    (_coco_text(images='[{"id": 1, "file_name": "a\\u0000.jpg", "width": 1, "height": 1}]'),
     r"images\[0\]: `file_name` 'a\\x00.jpg' is not a path"),
    (_coco_text(images='[{"id": 1, "file_name": ["a.jpg"], "width": 1, "height": 1}]'),
     r"images\[0\]: `file_name` \['a.jpg'\] is not a path"),
    (_coco_text(images='[{"id": 1, "file_name": "a.jpg", "width": "10", "height": 1}]'),
     r"images\[0\]: `width` must be a positive number \(pixels\), got '10'"),
    (_coco_text(annotations='[{"image_id": 1, "category_id": 1, "bbox": [1' + "0" * 400 + ', 1, 1, 1]}]'),
     r"annotations\[0\]: expected `bbox` \[x, y, width, height\] in pixels"),
    (_coco_text(annotations='[{"image_id": 1, "category_id": 1, "segmentation": [[1, 2, 3, "4", 5, 6]]}]'),
     r"annotations\[0\]: segmentation must be a list of polygons"),
    (_coco_text(annotations='[{"image_id": 1, "segments_info": [{"bbox": [1, 1, 1, 1], "category_id": 1}]}, '
                            '{"image_id": 1, "segments_info": "x"}]'), r"annotations\[1\]: no `segments_info` list"),
    (_coco_text(annotations='[{"image_id": 1, "segments_info": [7]}]'),
     r"annotations\[0\].segments_info\[0\]: expected a JSON object \(an segment\), got int"),
    (_coco_text(categories='[{"id": 10000000000, "name": "cat"}]'),
     r"categories\[0\]: `id` must be an integer 0, 1, ..., 1048575, got 10000000000"),
    (_coco_text(annotations='[{"image_id": 1, "category_id": -1, "bbox": [1, 1, 1, 1]}]'),
     r"annotations\[0\]: `category_id` must be an integer 0, 1, ..., 1048575, got -1"),
], ids=lambda value: str(value)[:40])
def test_hostile_coco_files_are_source_errors_naming_the_file(tmp_path, text, message):
    src = write_text(tmp_path / "coco.json", text)
    with pytest.raises(SourceError, match=rf"^{tmp_path}/coco.json: {message}"):
        scan(src)
