"""`picpac import --shard-size`, and info, verify, merge and split over a shard index (real subprocesses)."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from picpac import FormatError, ImageStream, Reader
from picpac.file.shards import read_index

from helpers import run_console


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "src"
    for c in ("cat", "dog"):
        (folder / c).mkdir(parents=True)
        for i in range(6):
            rng = np.random.default_rng(i + 10 * (c == "dog"))
            cv2.imwrite(str(folder / c / f"{i}.png"), rng.integers(0, 256, (16, 16, 3), np.uint8))
    return tmp_path


def records(path):
    with Reader(path) as r:
        return [(bytes(x["image"]), x.label, x.meta) for x in r]


def test_shard_size_splits_like_one_file(images):
    one = run_console("picpac", "import", "src", "one.picpac", "--threads", "2", cwd=images)
    assert one.returncode == 0, one.stderr
    done = run_console("picpac", "import", "src", "train.shards", "--shard-size", "3KB", "--threads", "2", cwd=images)
    assert done.returncode == 0, done.stderr
    shards = read_index(images / "train.shards")
    assert len(shards) > 2 and [p.rsplit("/", 1)[1] for p in shards] == \
        [f"train-{k:05d}.picpac" for k in range(len(shards))]
    assert sum((records(p) for p in shards), []) == records(images / "one.picpac")
    assert not list(images.glob(".*picpac-tmp"))

    info = run_console("picpac", "info", "--json", "train.shards", cwd=images)
    assert info.returncode == 0, info.stderr
    total = json.loads(info.stdout)["total"]
    assert (total["shards"], total["records"]) == (len(shards), 12)
    text = run_console("picpac", "info", *[p.rsplit("/", 1)[1] for p in shards], cwd=images)
    assert f"total: {len(shards)} shards, 12 records" in text.stdout
    verify = run_console("picpac", "verify", "train.shards", cwd=images)
    assert verify.returncode == 0 and f"total: {len(shards)} shards, 12 records, OK" in verify.stdout

    merged = run_console("picpac", "merge", "train.shards", "merged.picpac", cwd=images)
    assert merged.returncode == 0, merged.stderr
    assert [r[:2] for r in records(images / "merged.picpac")] == [r[:2] for r in records(images / "one.picpac")]


def test_verify_reports_a_damaged_shard(images):
    assert run_console("picpac", "import", "src", "t.shards", "--shard-size", "3KB", cwd=images).returncode == 0
    shards = read_index(images / "t.shards")
    data = bytearray(open(shards[1], "rb").read())
    data[100] ^= 0xFF
    open(shards[1], "wb").write(bytes(data))
    done = run_console("picpac", "verify", "t.shards", cwd=images)
    assert done.returncode == 1 and "problem(s)" in done.stdout.splitlines()[-1]


def test_split_takes_an_index(images):
    assert run_console("picpac", "import", "src", "t.shards", "--shard-size", "3KB", cwd=images).returncode == 0
    assert run_console("picpac", "import", "src", "one.picpac", cwd=images).returncode == 0
    (images / "a").mkdir()
    (images / "b").mkdir()
    a = run_console("picpac", "split", "t.shards", "--folds", "2", "--output-dir", "a", cwd=images)
    b = run_console("picpac", "split", "one.picpac", "--folds", "2", "--output-dir", "b", cwd=images)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    parts_a, parts_b = sorted((images / "a").glob("*.picpac")), sorted((images / "b").glob("*.picpac"))
    assert [p.name for p in parts_a] == ["t-fold0.picpac", "t-fold1.picpac"]
    assert len(parts_a) == len(parts_b) == 2
    for x, y in zip(parts_a, parts_b):
        assert [r[:2] for r in records(x)] == [r[:2] for r in records(y)]


def test_missing_shard_in_index_is_named(images):
    (images / "x.shards").write_text("gone.picpac\n")
    done = run_console("picpac", "info", "x.shards", cwd=images)
    assert done.returncode != 0 and "gone.picpac" in done.stderr


def test_a_failed_overwrite_leaves_no_index(images):
    done = run_console("picpac", "import", "src", "train.shards", "--shard-size", "3KB", cwd=images)
    assert done.returncode == 0, done.stderr
    bad = images / "bad" / "cat"
    bad.mkdir(parents=True)
    (bad / "0.png").write_bytes(b"not a png")
    failed = run_console("picpac", "import", "bad", "train.shards", "--shard-size", "3KB", "--overwrite", cwd=images)
    assert failed.returncode != 0 and "could be imported" in failed.stderr
    assert not (images / "train.shards").exists()  # the old index would name shards this import replaced
    assert not list(images.glob(".*picpac-tmp"))


def test_a_picpac_name_with_shard_size_puts_the_index_beside_it(images):
    done = run_console("picpac", "import", "src", "train.picpac", "--shard-size", "3KB", cwd=images)
    assert done.returncode == 0, done.stderr
    assert not (images / "train.picpac").exists()  # a text index under a database's name opened with no tool
    shards = read_index(images / "train.shards")
    assert [p.rsplit("/", 1)[1] for p in shards] == [f"train-{k:05d}.picpac" for k in range(len(shards))]
    assert "into train.shards (" in done.stdout
    assert "the shards' index is train.shards, not train.picpac" in done.stdout
    info = run_console("picpac", "info", "--json", "train.shards", cwd=images)
    assert json.loads(info.stdout)["total"]["records"] == 12
    with ImageStream(str(images / "train.shards"), batch=12, loop=False, shuffle=False) as stream:
        assert sorted(next(iter(stream))[1].tolist()) == [0] * 6 + [1] * 6
    again = run_console("picpac", "import", "src", "train.picpac", "--shard-size", "3KB", cwd=images)
    assert again.returncode != 0 and "train.shards: already exists" in again.stderr


def test_a_shard_index_given_as_a_database_is_named_as_one(images):
    assert run_console("picpac", "import", "src", "t.shards", "--shard-size", "3KB", cwd=images).returncode == 0
    (images / "old.picpac").write_bytes((images / "t.shards").read_bytes())  # as an older import named it
    for command in (("info", "old.picpac"), ("verify", "old.picpac"), ("dump", "old.picpac", "out")):
        done = run_console("picpac", *command, cwd=images)
        assert done.returncode != 0 and f"{command[1]}: this is a picpac shard index" in done.stderr, done.stderr
    dumped = run_console("picpac", "dump", "t.shards", "out", cwd=images)  # named as an index, it is one: read
    assert dumped.returncode == 0 and dumped.stdout.startswith("dumped 16 samples of t.shards"), dumped.stderr
    with pytest.raises(FormatError, match=r"old\.picpac: this is a picpac shard index .* ImageStream"):
        ImageStream(str(images / "old.picpac"))
