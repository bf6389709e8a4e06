"""picpac/stores/parquet.py: Parquet files that Hugging Face's ``datasets`` wrote, read by their features; picpac's
export, which ``datasets.load_dataset`` loads, and back exactly; memory bounded on a file far larger than it."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

import picpac
from picpac import stores
from picpac.errors import CorruptError, FormatError, MissingPathError, PicPacValueError, SourceError

from helpers import hf_datasets, imagenet_jpegs
from store_helpers import assert_same_records

pa = pytest.importorskip("pyarrow", reason="the parquet format needs pyarrow (pip install picpac[parquet])")
pq = pytest.importorskip("pyarrow.parquet")


def write_classified(datasets, folder, n: int = 12, shards: int = 3) -> list[tuple[str, bytes, int]]:
    """imagenet-250's first ``n`` JPEGs as ``shards`` Parquet files of a dataset with an Image, a ClassLabel of
    their 1000 class names, a string and an int column, written by ``datasets``; the rows in order."""
    jpegs = imagenet_jpegs(n)
    names = [f"class{i}" for i in range(1000)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names),
                                  "file": datasets.Value("string"), "size": datasets.Value("int32")})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": data, "path": None} for _, data, _ in jpegs],
                                     "label": [label for *_, label in jpegs], "file": [name for name, *_ in jpegs],
                                     "size": [len(data) for _, data, _ in jpegs]}, features=features)
    os.makedirs(folder, exist_ok=True)
    for k in range(shards):
        ds.shard(num_shards=shards, index=k, contiguous=True).to_parquet(
            os.path.join(folder, f"train-{k:05d}-of-{shards:05d}.parquet"))
    return jpegs


def test_reads_the_files_datasets_wrote_by_their_features(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    jpegs = write_classified(datasets, tmp_path / "data")
    for src in (tmp_path / "data", str(tmp_path / "data" / "train-*.parquet")):
        with stores.open_reader(src, "parquet") as r:
            assert len(r) == 12 and r.fields == ["image"] and r.classes == [f"class{i}" for i in range(1000)]
            records = list(r)
            assert [bytes(x["image"]) for x in records] == [data for _, data, _ in jpegs]
            assert [x.label for x in records] == [float(label) for *_, label in jpegs]
            assert [x.meta for x in records] == [{"file": name, "size": len(data)} for name, data, _ in jpegs]
            for i in (11, 0, 5, 4):  # random access, across files and back
                assert bytes(r[i]["image"]) == jpegs[i][1] and r[i].meta == records[i].meta
            assert r.where(5).endswith("train-00001-of-00003.parquet: row 1")
    one = tmp_path / "data" / "train-00002-of-00003.parquet"
    with stores.open_reader(one, "parquet", label_column="size") as r:  # a column named by the option
        assert len(r) == 4 and [x.label for x in r] == [float(len(d)) for _, d, _ in jpegs[8:]]
        assert r.classes == []  # the label column is no ClassLabel


def test_export_round_trip_keeps_every_record(db, tmp_path):
    """picpac -> parquet -> picpac: every field's bytes (present, absent, empty), label (-0.0, inf, 1e300),
    group and meta, and the dataset metadata, with the stores' own record set (store_helpers.make_db)."""
    out = tmp_path / "x.parquet"
    report = stores.export_store(db, out, "parquet")
    assert report.count == 23 and report.destination_bytes == os.path.getsize(out)
    back = tmp_path / "back.picpac"
    stores.import_store(out, back, "parquet")
    with picpac.Reader(db) as a, picpac.Reader(back) as b:
        assert_same_records(a, b)
        assert {k: v for k, v in a.metadata.items() if k != "fields"} == \
               {k: v for k, v in b.metadata.items() if k != "fields"}
    schema = pq.read_schema(out)
    assert schema.field("image").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert schema.field("label").type == pa.float64()  # -0.0, 2.5, inf: no class ids
    own = json.loads(schema.metadata[b"picpac"])
    assert own["json_meta"] == [] and own["group"] == "group" and own["metadata"]["note"] == {"nested": [1, 2]}


def test_export_loads_in_datasets_with_image_and_class_label_features(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    jpegs = imagenet_jpegs(30)
    db = tmp_path / "in.picpac"
    with picpac.Writer(db, metadata={"classes": [f"c{i}" for i in range(1000)]}) as w:
        for name, data, label in jpegs:
            w.append(image=data, label=label, meta={"path": name, "width": 1, "ok": True, "odd": [1] if label else 2})
    out = tmp_path / "out"
    report = stores.export_store(db, out, "parquet", shard_size="1MB")
    files = sorted(os.listdir(out))
    assert len(files) == 4 and files[0] == "data-00000-of-00004.parquet" and report.count == 30
    ds = datasets.load_dataset("parquet", data_files=[str(out / f) for f in files], split="train",
                               cache_dir=str(tmp_path / "cache"))
    assert isinstance(ds.features["image"], datasets.Image)
    assert ds.features["label"].names == [f"c{i}" for i in range(1000)]
    assert ds["label"] == [label for *_, label in jpegs] and ds["path"] == [name for name, *_ in jpegs]
    raw = ds.cast_column("image", datasets.Image(decode=False))
    assert [row["image"]["bytes"] for row in raw] == [data for _, data, _ in jpegs]
    assert ds[0]["image"].size == (500, 375) or ds[0]["image"].size[0] > 0  # decodes as a PIL image
    assert ds["odd"][:2] == ["2", "[1]"]  # a key of no one type: JSON text, and read back as it was
    with stores.open_reader(out, "parquet") as r:
        assert [x.meta for x in r] == [{"path": n, "width": 1, "ok": True, "odd": [1] if label else 2}
                                       for n, _, label in jpegs]


def test_writer_refuses_records_that_do_not_fit_the_first(tmp_path):
    with stores.open_writer(tmp_path / "w.parquet", "parquet") as w:
        w.append(image=b"a", label=1, meta={"k": 1})
        with pytest.raises(PicPacValueError, match=r"record 1's field or meta key 'z' .* export_store"):
            w.append(image=b"b", meta={"z": 1})
        with pytest.raises(PicPacValueError, match="record 1's its label, group or meta values"):
            w.append(image=b"b", meta={"k": "text"})
    with stores.open_reader(tmp_path / "w.parquet", "parquet") as r:
        assert len(r) == 1 and r[0].meta == {"k": 1}
    with pytest.raises(PicPacValueError, match="shard_size .* --to parquet"):
        stores.export_store(tmp_path / "none.picpac", tmp_path / "x.tar", "tar", shard_size="1MB")


def test_damaged_and_mismatched_files_are_named(db, tmp_path):
    out = tmp_path / "x.parquet"
    stores.export_store(db, out, "parquet")
    data = out.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[:len(data) // 2])
    with pytest.raises((CorruptError, FormatError), match="cut.parquet"):
        stores.open_reader(tmp_path / "cut.parquet", "parquet")
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(data)
    pq.write_table(pa.table({"image": [b"x"], "other": [1]}), folder / "b.parquet")
    with pytest.raises(FormatError, match=r"b.parquet: its columns differ from .*a.parquet's"):
        stores.open_reader(folder, "parquet")
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "numbers.parquet")
    with pytest.raises(SourceError, match="no column of images .* columns: n; name it with --image-column"):
        stores.open_reader(tmp_path / "numbers.parquet", "parquet")
    with pytest.raises(SourceError, match=r"no column 'img' \(--image-column\); its columns are n"):
        stores.open_reader(tmp_path / "numbers.parquet", "parquet", image_column="img")
    with pytest.raises(MissingPathError, match="no parquet file matches"):
        stores.open_reader(tmp_path / "nothing-*.parquet", "parquet")


def test_without_pyarrow_the_error_names_the_extra(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.modules["pyarrow"] = None
        from picpac import stores
        try:
            stores.open_reader({str(tmp_path)!r}, "arrow")
        except stores.MissingPackageError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "the parquet format needs the 'pyarrow' package: pip install picpac[parquet]"


BIG = """
import json, resource, sys
import pyarrow.parquet, picpac.tools.tables
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
report = picpac.tools.tables.import_table(sys.argv[1], sys.argv[2], "parquet", threads=2, progress=False)
print(json.dumps({"count": report.count, "growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before}))
"""


def write_big(path, jpeg: bytes) -> None:
    """3,000 rows of 100 KB images in 30 row groups of 100 (as datasets writes image datasets): 300 MB."""
    import numpy as np

    pad = np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8).tobytes()

    def image(k: int) -> bytes:  # a real JPEG whose APP9 segments carry 100 KB of noise: it decodes, nothing shrinks it
        return jpeg[:2] + b"".join(b"\xff\xe9" + (20002).to_bytes(2, "big") + k.to_bytes(4, "little")
                                   + pad[j * 20000:(j + 1) * 20000 - 4] for j in range(5)) + jpeg[2:]

    features = {"image": {"_type": "Image"}, "label": {"names": ["a", "b", "c"], "_type": "ClassLabel"}}
    kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("image", kind), ("label", pa.int64())],
                       metadata={b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    with pq.ParquetWriter(path, schema, compression="none") as w:
        for g in range(30):
            rows = [{"bytes": image(g * 100 + i), "path": None} for i in range(100)]
            w.write_batch(pa.RecordBatch.from_arrays([pa.array(rows, kind), pa.array([i % 3 for i in range(100)])],
                                                     schema=schema))


def test_importing_a_file_far_larger_than_the_memory_it_takes(tmp_path):
    """300 MB of images in 30 row groups: the import streams batches of rows, so its peak memory grows by a
    few row groups' worth (about 80 MB here), not by the file."""
    import cv2
    import numpy as np

    jpeg = cv2.imencode(".jpg", np.full((16, 16, 3), 90, np.uint8))[1].tobytes()
    write_big(tmp_path / "big.parquet", jpeg)
    size = os.path.getsize(tmp_path / "big.parquet")
    out = subprocess.run([sys.executable, "-c", BIG, str(tmp_path / "big.parquet"), str(tmp_path / "big.picpac")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["count"] == 3000 and size > 300e6
    assert result["growth"] < 0.4 * size, (result, size)
    with picpac.Reader(tmp_path / "big.picpac") as r:
        assert len(r) == 3000 and r.classes == ["a", "b", "c"] and (r[2].label, r[2999].label) == (2.0, 0.0)
        assert math.isclose(len(r[0]["image"]), 100_000 + 20 + len(jpeg), rel_tol=0.01)
