"""Tar stores and WebDataset: picpac's export read by the real ``webdataset`` package, and WebDataset-style
tars (``key.jpg``, ``key.cls``) imported and streamed with ``image_field``."""
from __future__ import annotations

import io
import shutil
import tarfile

import cv2
import numpy as np
import pytest

import picpac
from picpac import stores
from picpac.stores.tar import image_extension

from helpers import png
from store_helpers import assert_same_records

wds = pytest.importorskip("webdataset", reason="the WebDataset checks need the webdataset package (the test extra)")


@pytest.fixture
def real_images(shared_data, tmp_path):
    """(bytes, class id) of real JPEGs (imagenet-250) and RGB PNGs (coco128's panoptic masks), copied here."""
    imagenet = shared_data / "imagenet-250"
    classes = dict(line.split("\t")[:2] for line in (imagenet / "labels.tsv").read_text().splitlines()[1:])
    jpegs = sorted(imagenet.glob("*.JPEG"))[:10]
    pngs = sorted((shared_data / "coco128-train" / "panoptic" / "masks").glob("*.png"))[:4]
    local = tmp_path / "images"
    local.mkdir()
    out = []
    for i, source in enumerate(jpegs + pngs):
        copy = local / source.name
        shutil.copyfile(source, copy)
        out.append((copy.read_bytes(), int(classes[source.name]) if source.suffix == ".JPEG" else 1000 + i))
    return out


def picpac_pixels(db, **config) -> list[np.ndarray]:
    """Every record's image as picpac streams it: RGB, uint8, HWC, as stored (no resize)."""
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=1, dtype="uint8", order="NHWC", **config) as s:
        return [images[0] for images, _, _ in s]


def test_export_reads_with_webdataset(real_images, tmp_path):
    db, tar = tmp_path / "real.picpac", tmp_path / "real.tar"
    with picpac.Writer(db, metadata={"classes": ["tench"]}) as w:
        for i, (data, label) in enumerate(real_images):
            w.append(image=data, label=label, meta={"i": i})
        w.append(image=real_images[0][0], label=2.5)  # not a class id: .picpac.label, which WebDataset leaves
    stores.export_store(db, tar, "tar")
    with tarfile.open(tar) as t:
        names = t.getnames()
    assert names[:3] == ["000000.jpg", "000000.cls", "000000.json"] and "000010.png" in names
    assert "000014.picpac.label" in names and "000014.cls" not in names

    samples = list(wds.WebDataset(str(tar), shardshuffle=False).decode("rgb8"))
    expected = picpac_pixels(db)
    assert len(samples) == len(real_images) + 1
    for i, sample in enumerate(samples[:-1]):
        data, label = real_images[i]
        kind = "jpg" if data[:2] == b"\xff\xd8" else "png"
        assert sample["__key__"] == "%06d" % i and sample["cls"] == label and sample["json"] == {"i": i}
        assert sample[kind].dtype == np.uint8 and sample[kind].shape == expected[i].shape
        assert np.array_equal(sample[kind], expected[i]), i  # WebDataset (PIL) and picpac (OpenCV): same pixels
    assert bytes(samples[-1]["picpac.label"]) == b"2.5" and "cls" not in samples[-1]
    assert samples[-1]["picpac.json"]["classes"] == ["tench"]

    # picpac's own round trip stays exact: fields, labels, meta, metadata
    stores.import_store(tar, tmp_path / "back.picpac", "tar")
    with picpac.Reader(db) as a, picpac.Reader(tmp_path / "back.picpac") as b:
        assert a.metadata == b.metadata and b.fields == ["image"]
        assert_same_records(a, b)


def webdataset_tar(path, records, extension="jpg", extra=()) -> None:
    """A tar as WebDataset's tools write one (no picpac.json): ``key.<extension>`` and ``key.cls``."""
    with tarfile.open(path, "w") as tar:
        for key, (data, label) in records:
            for name, value in ((f"{key}.{extension}", data), (f"{key}.cls", b"%d" % label), *extra):
                info = tarfile.TarInfo(name)
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))


def test_a_webdataset_tar_imports_and_streams_with_image_field(real_images, tmp_path):
    jpegs = [(data, label) for data, label in real_images if data[:2] == b"\xff\xd8"]
    records = [(f"shard/sample{i:04d}", item) for i, item in enumerate(jpegs)]
    webdataset_tar(tmp_path / "wds.tar", records)
    # WebDataset itself reads what this test wrote
    assert [s["cls"] for s in wds.WebDataset(str(tmp_path / "wds.tar"), shardshuffle=False).decode()] == \
        [label for _, label in jpegs]

    db = tmp_path / "wds.picpac"
    stores.import_store(tmp_path / "wds.tar", db, "tar")
    with picpac.Reader(db) as r:
        assert r.fields == ["jpg"] and [rec.label for rec in r] == [float(label) for _, label in jpegs]
        assert [bytes(rec["jpg"]) for rec in r] == [data for data, _ in jpegs]

    # the image field is checked when the stream is built, naming what the database has
    with pytest.raises(picpac.PicPacValueError, match=r"config key 'image_field' is 'image', but the database has "
                                                      r"no field 'image'; its fields: \['jpg'\]; did you mean "
                                                      r"image_field='jpg'\?"):
        picpac.ImageStream(db)
    with pytest.raises(picpac.PicPacValueError, match=r"has 1 field\(s\), no field number 3"):
        picpac.ImageStream(db, images=[3])

    with picpac.ImageStream(db, image_field="jpg", loop=False, shuffle=False, batch=1, dtype="uint8",
                            order="NHWC", label_dtype="int64") as s:
        batches = list(s)
    assert [int(labels[0]) for _, labels, _ in batches] == [label for _, label in jpegs]
    for (images, _, _), (data, _) in zip(batches, jpegs):
        rgb = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
        assert np.array_equal(images[0], rgb)
    # PicPac's field number names it too: image_field=0 is the record's first field (images=[0] keeps its
    # old meaning, the 'image' field)
    assert all(np.array_equal(a, b) for a, b in zip(picpac_pixels(db, image_field=0), [b[0][0] for b in batches]))


def test_image_field_on_both_paths_and_annotation_field(tmp_path):
    """A renamed array field streams on the batch path; a mask stored under another name is annotation_field."""
    arrays = np.random.default_rng(3).integers(0, 255, (6, 8, 10, 3), np.uint8)
    db = tmp_path / "arrays.picpac"
    picpac.write_arrays(db, arrays, np.arange(6), field="pixels")
    with picpac.ImageStream(db, image_field="pixels", loop=False, shuffle=False, batch=3, dtype="uint8",
                            order="NHWC") as s:
        batches = list(s)
        assert s.stats()["path"] == "batch"
    assert np.array_equal(np.concatenate([b[0] for b in batches]), arrays)
    with pytest.raises(picpac.PicPacValueError, match=r"its fields: \['pixels'\]"):
        picpac.ImageStream(db)

    seg = tmp_path / "seg.picpac"
    image, mask = np.full((8, 8, 3), 50, np.uint8), np.eye(8, dtype=np.uint8) * 3
    with picpac.Writer(seg) as w:
        for _ in range(2):
            w.append({"jpg": png(image), "seg.png": png(mask)}, label=1)
    with picpac.ImageStream(seg, image_field="jpg", annotation_field="seg.png", loop=False, shuffle=False,
                            batch=2) as s:
        assert s.config["annotate"] == "any" and s.config["task"] == "segment"
        images, masks, pad = next(s)
    assert masks.shape == (2, 1, 8, 8) and np.array_equal(masks[0, 0], mask) and (images == 50).all()
    with picpac.ImageStream(seg, image_field="jpg", annotate="image", annotation_field="seg.png", batch=2) as s:
        assert np.array_equal(next(s)[1][1, 0], mask)
    with pytest.raises(picpac.PicPacValueError, match=r"config key 'annotation_field' is 'mask', but the database "
                                                      r"has no field 'mask'; its fields: \['jpg', 'seg.png'\]"):
        picpac.ImageStream(seg, image_field="jpg", annotate="image", annotation_field="mask")
    # ImageLoader takes the image's bytes: the field keys are accepted and ignored
    loader = picpac.ImageLoader(image_field="jpg", annotation_field="seg.png", images=[1])
    assert loader.load_binary(png(image)).shape == (1, 3, 8, 8)


def test_legacy_field_numbers_map_onto_the_field_keys():
    from picpac.stream.config import StreamConfig
    assert StreamConfig.from_dict({"images": [2]})["image_field"] == 2 and StreamConfig.from_dict({"images": [0]})["image_field"] == "image"
    c = StreamConfig.from_dict({"annotate": [1]})
    assert (c["annotate"], c["annotation_field"], c["task"]) == ("any", 1, "segment")
    assert StreamConfig.from_dict({"annotate": True})["annotation_field"] == 1 and StreamConfig.from_dict({"annotate": [0]})["annotate"] == "auto"
    assert StreamConfig.from_dict({"annotate": []})["annotate"] is None
    with pytest.raises(picpac.PicPacValueError, match="config keys 'images' .* and 'image_field' both given"):
        StreamConfig.from_dict({"images": [1], "image_field": "jpg"})
    with pytest.raises(picpac.PicPacValueError, match="names several fields"):
        StreamConfig.from_dict({"images": [0, 1]})
    with pytest.raises(picpac.PicPacTypeError, match="'image_field' must be a field name"):
        StreamConfig.from_dict({"image_field": 1.5})


def test_image_member_names_follow_the_bytes_type(tmp_path):
    pixels = np.zeros((4, 4, 3), np.uint8)
    encoded = {ext: cv2.imencode(f".{ext}", pixels)[1].tobytes() for ext in ("jpg", "png", "webp", "bmp", "tiff")}
    assert {ext: image_extension(data) for ext, data in encoded.items()} == {ext: ext for ext in encoded}
    assert image_extension(b"\xff\xd8 not quite") is None and image_extension(b"BM junk") is None

    # a field named like an image type keeps the image under .image; declared fields make that known up front
    path = tmp_path / "x.tar"
    with stores.open_writer(path, "tar", fields=["image", "png"]) as w:
        w.append(image=encoded["png"], label=1)
        w.append(image=encoded["jpg"], png=b"not an image", label=2)
    with tarfile.open(path) as t:
        assert t.getnames()[:4] == ["000000.image", "000000.cls", "000001.jpg", "000001.png"]
    with stores.open_reader(path, "tar") as r:
        assert bytes(r[0]["image"]) == encoded["png"] and bytes(r[1]["image"]) == encoded["jpg"]
        assert bytes(r[1]["png"]) == b"not an image"
    with pytest.raises(picpac.PicPacValueError, match="earlier records' 'image' fields were written as .png"):
        with stores.open_writer(tmp_path / "y.tar", "tar") as w:
            w.append(image=encoded["png"])
            w.append(image=encoded["png"], png=b"late")
    assert not (tmp_path / "y.tar").exists()
