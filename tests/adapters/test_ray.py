"""picpac.adapters.ray (picpac.ray): picpac datasets read into and written from Ray Data, a distributed import,
and the stream's decoding mapped over a Ray dataset, on a local Ray instance of 2 CPUs."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'picpac[ray]')")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'picpac[ray]')")

import picpac  # noqa: E402
from picpac.adapters.ray import (PicpacDatasource, StreamTransform, Written, import_images, read_picpac,  # noqa: E402
                                 write_picpac)
from picpac.file.remote import RemoteOptions  # noqa: E402
from picpac.file.shards import ShardedReader, read_index  # noqa: E402
from helpers import payload, png  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True  # rows and shards in the dataset's order, to compare
    yield
    ray.shutdown()


def write_shards(folder, counts=(7, 0, 12)) -> list:
    """Shards of records with two fields ('extra' in every other record), labels, some groups and metas."""
    paths, i = [], 0
    for k, count in enumerate(counts):
        paths.append(folder / f"src-{k}.picpac")
        with picpac.Writer(paths[-1], metadata={"classes": ["a", "b", "c"]}) as writer:
            for _ in range(count):
                fields = {"image": payload(i)} | ({"extra": payload(1000 + i, 5)} if i % 2 else {})
                writer.append(fields, label=i % 3 + 0.5 * (i == 4), group=i // 4 if i % 3 else None,
                              meta={"i": i, "name": f"r{i}"} if i % 4 else None)
                i += 1
    return paths


def records_of(reader) -> list[tuple]:
    return [(dict((k, bytes(v)) for k, v in r.fields.items()), r.label, r.group, r.meta) for r in reader]


def test_a_round_trip_keeps_every_record(tmp_path):
    paths = write_shards(tmp_path)
    dataset = read_picpac(str(tmp_path / "src-*.picpac"))
    rows = dataset.take_all()
    assert [row["index"] for row in rows] == list(range(19))
    assert rows[1]["meta"] == '{"i":1,"name":"r1"}' and rows[0]["meta"] == "" and rows[0]["extra"] is None
    index = tmp_path / "out" / "copy.shards"
    written = write_picpac(dataset, index, metadata={"classes": ["a", "b", "c"]})
    assert isinstance(written, Written) and (written.records, written.index) == (19, str(index))
    assert read_index(written.index) == written.shards
    assert all(path.startswith(str(tmp_path / "out" / "copy-")) for path in written.shards)
    with ShardedReader(paths) as source, ShardedReader(written.shards) as copy:
        assert records_of(copy) == records_of(source)
        assert copy.classes == ["a", "b", "c"]
    with pytest.raises(picpac.PathExistsError, match="overwrite=True"):
        write_picpac(dataset, tmp_path / "out" / "copy.shards")


def test_shards_on_object_storage_are_read_by_range_requests(tmp_path, s3_server):
    paths = write_shards(tmp_path)
    for k, path in enumerate(paths):
        s3_server.put("ray-data", f"src-{k}.picpac", path)
    remote = RemoteOptions(cache_dir=str(tmp_path / "cache"), storage_options=s3_server.options)
    rows = read_picpac("s3://ray-data/src-*.picpac", remote=remote).take_all()
    with ShardedReader(paths) as source:
        assert [(row["image"], row["label"], json.loads(row["meta"] or "{}")) for row in rows] == \
            [(bytes(r["image"]), r.label, r.meta) for r in source]


def test_read_tasks_are_ranges_of_each_shard(tmp_path):
    source = PicpacDatasource(write_shards(tmp_path, counts=(10, 0, 30, 5)), fields=["image"], task_bytes=1)
    assert len(PicpacDatasource(source.paths).get_read_tasks(90)) == 3  # no tasks of less than TASK_BYTES
    for parallelism, tasks in ((1, 3), (9, 9), (90, 45)):  # one per non-empty shard at least, one per record at most
        found = source.get_read_tasks(parallelism)
        assert len(found) == tasks
        assert sum(task.metadata.num_rows for task in found) == 45
        rows = [row for task in found for block in task() for row in block.to_pylist()]
        assert [row["index"] for row in rows] == list(range(45))
        assert [row["image"] for row in rows] == [payload(i) for i in range(45)]
        assert all(task.metadata.input_files[0].endswith(("src-0.picpac", "src-2.picpac", "src-3.picpac"))
                   for task in found)
    assert read_picpac(source.paths, override_num_blocks=6).materialize().num_blocks() >= 6
    with pytest.raises(picpac.PicPacValueError, match="no field 'mask'"):
        PicpacDatasource(source.paths, fields=["mask"])


def test_a_distributed_import_of_class_folders(tmp_path, shared_data):
    images = sorted((shared_data / "imagenet-250").glob("*.JPEG"))[:6]
    for k, path in enumerate(images):
        folder = tmp_path / "src" / ("cat" if k % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / path.name)
    (tmp_path / "src" / "cat" / "broken.jpg").write_bytes(b"not an image")
    written = import_images(tmp_path / "src", tmp_path / "ray", images_per_shard=4)
    assert (written.records, written.skipped, written.index) == (6, 1, str(tmp_path / "ray" / "part.shards"))
    assert len(written.shards) == 2  # 7 images, at most 4 a shard
    report = picpac.ingest.import_dataset(tmp_path / "src", tmp_path / "cli.picpac", progress=False)
    assert report.count == 6
    with ShardedReader(written.shards) as ray_db, picpac.Reader(tmp_path / "cli.picpac") as cli_db:
        assert ray_db.classes == cli_db.classes == ["cat", "dog"]
        assert ray_db.metadata["source"] == cli_db.metadata["source"]
        assert records_of(ray_db) == records_of(cli_db)  # the same bytes, labels and meta (path, size)
    with pytest.raises(Exception, match="broken.jpg: cannot decode"):
        import_images(tmp_path / "src", tmp_path / "strict.shards", strict=True)
    assert not (tmp_path / "strict.shards").exists()


@pytest.mark.parametrize("keys", [dict(resize_width=40, resize_height=30),
                                  dict(resize_width=40, resize_height=30, order="NHWC", dtype="uint8", perturb=True,
                                       pert_hflip=True, pert_angle=10, pert_color1=20, seed=5)],
                         ids=["resize", "perturb"])
def test_the_stream_transform_gives_image_streams_samples(tmp_path, shared_data, keys):
    images = sorted((shared_data / "imagenet-250").glob("*.JPEG"))[:10]
    with picpac.Writer(tmp_path / "db.picpac") as writer:
        for i, path in enumerate(images):
            writer.append(image=path.read_bytes(), label=i % 3)
    out = read_picpac(tmp_path / "db.picpac").map_batches(StreamTransform(keys, epoch=2), batch_format="numpy",
                                                          batch_size=4).take_all()
    with picpac.ImageStream(tmp_path / "db.picpac", loop=False, shuffle=False, batch=10, **keys) as stream:
        stream.set_epoch(2)
        expected, labels, _ = next(iter(stream))
    assert [row["index"] for row in out] == list(range(10))
    assert np.array_equal(np.stack([row["image"] for row in out]), expected)
    assert np.array_equal([row["label"] for row in out], labels)


def test_bad_rows_and_paths_raise_clear_errors(tmp_path):
    with pytest.raises(picpac.MissingPathError, match="missing.picpac"):
        read_picpac(tmp_path / "missing.picpac")
    with pytest.raises(picpac.MissingPathError, match="no-folder"):
        import_images(tmp_path / "no-folder", tmp_path / "c.shards")
    text = ray.data.from_items([{"image": "not bytes", "label": 1.0}])
    with pytest.raises(Exception, match="column .image. holds string.*encode"):
        write_picpac(text, tmp_path / "a.shards")
    arrays = ray.data.from_items([{"image": np.zeros((2, 2), np.uint8)}])
    with pytest.raises(Exception, match="column .image. holds"):
        write_picpac(arrays, tmp_path / "a.shards")
    bad_meta = ray.data.from_items([{"image": png(np.zeros((2, 2), np.uint8)), "meta": "{"},
                                    {"image": b"x", "meta": json.dumps({"ok": 1})}])
    with pytest.raises(Exception, match=r"row 0: its meta is not valid JSON"):
        write_picpac(bad_meta, tmp_path / "b.shards")
    assert not (tmp_path / "b.shards").exists()
    no_index = ray.data.from_items([{"image": png(np.zeros((2, 2), np.uint8)), "label": 2.0}]).map_batches(
        StreamTransform(perturb=True, pert_hflip=True), batch_format="numpy")
    with pytest.raises(Exception, match="'index' column"):
        no_index.take_all()
