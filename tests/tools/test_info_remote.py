"""The tools take URLs as ImageStream does: `picpac info`, `verify`, `export` and `dump` on a picpac file on object
storage (a real S3 API server on loopback, moto's), from Python and from the command line (--storage-options)."""
from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest

from picpac.file.remote import RemoteOptions
from picpac.stores import export_store
from picpac.tools.dump import dump
from picpac.tools.info import describe
from picpac.tools.verify import verify
from helpers import make_db, run_console

_buckets = itertools.count()


@pytest.fixture
def remote_db(s3_server, tmp_path) -> tuple[str, str, RemoteOptions]:
    local = make_db(tmp_path / "a.picpac", n=30, size=(16, 12))
    url = s3_server.put(f"tools{next(_buckets)}-{os.getpid()}", "a.picpac", local)
    return str(local), url, RemoteOptions(storage_options=s3_server.options, cache_dir=str(tmp_path / "cache"))


def test_info_and_verify_read_a_url(remote_db):
    local, url, remote = remote_db
    here, there = describe(local), describe(url, remote=remote)
    assert there["path"] == url and there["file_bytes"] == here["file_bytes"] == os.path.getsize(local)
    assert {k: v for k, v in there.items() if k != "path"} == {k: v for k, v in here.items() if k != "path"}
    report = verify(url, decode=True, remote=remote)
    assert report.ok and report.records == 30 and report.path == url


def test_export_and_dump_read_a_url(remote_db, tmp_path, s3_server):
    local, url, remote = remote_db
    export_store(url, tmp_path / "a.tfrecord", "tfrecord", remote=remote)
    export_store(local, tmp_path / "b.tfrecord", "tfrecord")
    assert (tmp_path / "a.tfrecord").read_bytes() == (tmp_path / "b.tfrecord").read_bytes()
    report = dump(url, tmp_path / "shots", {"storage_options": s3_server.options, "resize_width": 16,
                                            "resize_height": 12}, count=4)
    assert report.samples == 4 and report.db == url
    assert len(list((tmp_path / "shots").glob("*.png"))) >= 4 and (tmp_path / "shots" / "index.html").is_file()


def test_the_command_line_takes_storage_options(remote_db, tmp_path, s3_server):
    _, url, _ = remote_db
    options = json.dumps(s3_server.options)
    info = run_console("picpac", "info", url, "--storage-options", options, "--json", cwd=tmp_path)
    assert info.returncode == 0 and json.loads(info.stdout)["records"] == 30
    checked = run_console("picpac", "verify", url, "--storage-options", options, cwd=tmp_path)
    assert checked.returncode == 0 and "30 records" in checked.stdout
    out = run_console("picpac", "export", "--to", "npz", url, str(tmp_path / "a.npz"), "--storage-options", options,
                      cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("exported 30 records from s3://")
    with np.load(tmp_path / "a.npz", allow_pickle=False) as npz:
        assert len(npz.files) > 0
    bad = run_console("picpac", "info", url, "--storage-options", "[1]", cwd=tmp_path)
    assert bad.returncode == 2 and "--storage-options" in bad.stderr
