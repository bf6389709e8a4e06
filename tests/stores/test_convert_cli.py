"""``picpac import --from`` and ``picpac export --to`` (picpac/stores/convert.py) on real JPEGs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import picpac
from picpac import stores

from helpers import SHARED_DATA
from store_helpers import KINDS, _needs, assert_same_records, store_path


SUMMARY = {
    "export": r"exported (\d+) records from \S+ \(([\d,]+) bytes\) to {kind} \S+ \(([\d,]+) bytes, "
              r"[\d.]+x the source\) in [\d.]+ s",
    "import": r"imported (\d+) records from {kind} \S+ \(([\d,]+) bytes\) to \S+ \(([\d,]+) bytes, "
              r"[\d.]+x the source\) in [\d.]+ s",
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def jpeg_db(tmp_path_factory):
    source = str(SHARED_DATA / "imagenet-250")
    if not os.path.isdir(source):
        pytest.skip(f"real data not found at {source} (the ../shared folder beside the repo)")
    folder = tmp_path_factory.mktemp("jpegs")
    names = sorted(n for n in os.listdir(source) if n.endswith(".JPEG"))[:24]
    for name in names:
        shutil.copy(os.path.join(source, name), folder / name)
    db = folder.parent / "imagenet24.picpac"
    result = run_cli("import", "-f", "dir", folder, db)
    assert result.returncode == 0, result.stderr
    return db, {name: (folder / name).read_bytes() for name in names}


@pytest.mark.parametrize("kind", KINDS)
def test_cli_converts_jpegs_both_ways_keeping_every_byte(kind, jpeg_db, tmp_path):
    _needs(kind)
    db, jpegs = jpeg_db
    dst, back = store_path(tmp_path, kind), tmp_path / "back.picpac"
    result = run_cli("export", "--to", kind, db, dst)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(SUMMARY["export"].format(kind=kind), result.stdout.strip())
    assert match and match.group(1) == "24", result.stdout
    assert int(match.group(2).replace(",", "")) == os.path.getsize(db)
    assert int(match.group(3).replace(",", "")) == stores.store_size(dst, kind)
    assert run_cli("export", "--to", kind, db, dst).returncode == 2  # exists
    result = run_cli("import", "--from", kind, dst, back)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(SUMMARY["import"].format(kind=kind), result.stdout.strip())
    assert match and match.group(1) == "24", result.stdout
    with picpac.Reader(db) as a, picpac.Reader(back) as b:
        assert a.metadata == b.metadata
        assert_same_records(a, b)
        assert {rec.meta["path"]: bytes(rec["image"]) for rec in b} == jpegs


def test_cli_errors_are_one_line(tmp_path, jpeg_db):
    db, _ = jpeg_db
    (tmp_path / "junk.tfrecord").write_bytes(b"junk" * 10)
    result = run_cli("import", "--from", "tfrecord", tmp_path / "junk.tfrecord", tmp_path / "x.picpac")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"picpac: error: {tmp_path / 'junk.tfrecord'}: not a TFRecord file "
                                          "(its first record fails its length CRC32C)"]
    assert not (tmp_path / "x.picpac").exists()
    result = run_cli("import", "--from", "tar", "-f", "dir", db, tmp_path / "x.picpac")
    assert result.returncode == 2 and "--from cannot be combined with -f/--format" in result.stderr
    result = run_cli("export", "--to", "tar", tmp_path / "missing.picpac", tmp_path / "x.tar")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "missing.picpac" in result.stderr
