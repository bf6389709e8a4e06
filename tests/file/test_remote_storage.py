"""Remote picpac files (file/remote.py) against a real S3 API server on loopback (moto's server mode)."""
from __future__ import annotations

import itertools
import os
import pickle
import time

import numpy as np
import pytest

import picpac
from picpac.errors import CorruptError, CorruptRecordError, FormatError, MissingPathError, PicPacError, \
    PicPacValueError, RemoteReadError
from picpac.file.remote import CACHE_MARK, RemoteOptions, RemoteReader, is_remote
from picpac.file.shards import ShardedReader, is_glob, open_database, write_index

from helpers import damage_record, payload

BLOCK = 2**16
_buckets = itertools.count()


def bucket() -> str:
    return f"b{next(_buckets)}-{os.getpid()}"


def write(path, n: int = 60, size: int = 5000) -> picpac.Reader:
    """n records of ``size``-ish bytes, labels i % 4, groups i // 3, meta {"i": i}."""
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=payload(i, size + i), label=i % 4, group=i // 3, meta={"i": i})
    return picpac.Reader(path)


def options(server, tmp_path, **kw) -> RemoteOptions:
    kw = {"cache_dir": str(tmp_path / "cache"), "block_size": BLOCK, "backoff": 0.05, **kw}
    return RemoteOptions(storage_options=server.options, **kw)


def same(a, b) -> bool:
    return (bytes(a["image"]) == bytes(b["image"]) and a.label == b.label and a.group == b.group
            and a.meta == b.meta and a.index == b.index)


def blocks(reader: RemoteReader) -> set[str]:
    """The names of the blocks ``reader`` has in its cache."""
    return set(os.listdir(reader._folder)) - {"index", CACHE_MARK}


def blocks_of(local: picpac.Reader, records) -> set[str]:
    """The names of the blocks that records of the file lie in."""
    spans = [(int(local.index["offset"][i]), int(local.index["offset"][i] + local.index["size"][i])) for i in records]
    return {f"b{b}" for start, end in spans for b in range(start // BLOCK, (end - 1) // BLOCK + 1)}


def test_reads_every_record_as_the_local_file_does(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac")
    url = s3_server.put(bucket(), "data/a.picpac", tmp_path / "a.picpac")
    with RemoteReader(url, options=options(s3_server, tmp_path)) as remote:
        assert (len(remote), remote.fields, remote.classes) == (len(local), local.fields, local.classes)
        assert np.array_equal(remote.labels, local.labels) and np.array_equal(remote.groups, local.groups)
        assert all(same(r, l) for r, l in zip(remote, local))
        assert same(remote[-1], local[-1])
        with pytest.raises(IndexError):
            remote[len(local)]
    assert remote.closed


def test_opening_reads_the_index_only_and_records_fetch_their_blocks(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac", n=40, size=20_000)  # 800 KB: 13 blocks of 64 KiB
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    assert blocks(remote) == set()
    assert same(remote[20], local[20])
    assert blocks(remote) == blocks_of(local, [20])


def test_the_cache_stays_within_its_limit_and_evicts_the_least_recently_used(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac", n=60, size=20_000)  # 1.2 MB: 19 blocks
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    limit = 6 * BLOCK
    remote = RemoteReader(url, options=options(s3_server, tmp_path, cache_limit=limit))
    for i in range(len(local)):
        assert same(remote[i], local[i])
        remote[0]  # used all along: never the least recently used
        assert remote.cache_usage() <= limit
    assert "b0" in blocks(remote) and "b1" not in blocks(remote)
    assert all(same(remote[i], local[i]) for i in range(len(local)))  # evicted blocks come back


def test_prefetch_downloads_the_blocks_of_coming_records(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac", n=40, size=20_000)
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    remote.prefetch([30, 31, 39])
    want = blocks_of(local, [30, 31, 39])
    deadline = time.monotonic() + 30
    while blocks(remote) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    assert blocks(remote) == want
    s3_server.kill()  # the prefetched records no longer need the server
    try:
        assert same(remote[31], local[31]) and same(remote[39], local[39])
    finally:
        s3_server.start()
        s3_server.refill()


def test_a_block_damaged_in_the_cache_is_downloaded_again(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac")
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    remote[5]
    path = os.path.join(remote._folder, f"b{int(local.index['offset'][5]) // BLOCK}")
    data = bytearray(open(path, "rb").read())
    data[int(local.index["offset"][5]) % BLOCK + 100] ^= 0xFF
    open(path, "wb").write(data)
    assert same(remote[5], local[5])


def test_a_record_damaged_on_the_server_is_a_corrupt_record_error(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac")
    url = s3_server.put(bucket(), "a.picpac", damage_record(tmp_path / "a.picpac", 7, at=50))
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    assert same(remote[6], local[6])
    with pytest.raises(CorruptRecordError, match=r"s3://.*a\.picpac.*record 7.*checksum as it arrived"):
        remote[7]


def test_a_file_changed_on_the_server_is_refused_not_read(s3_server, tmp_path):
    write(tmp_path / "a.picpac")
    name = bucket()
    url = s3_server.put(name, "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    write(tmp_path / "b.picpac", size=5100)  # other records under the same name
    s3_server.put(name, "a.picpac", tmp_path / "b.picpac")
    with pytest.raises(RemoteReadError, match="changed on the server since it was opened"):
        remote[3]
    with pytest.raises(PicPacError, match="changed on the server after this reader was sent"):
        pickle.loads(pickle.dumps(remote))


def test_pickles_by_url_and_survives_fork(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac")
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path))
    remote[0]
    copy = pickle.loads(pickle.dumps(remote))
    assert same(copy[9], local[9])
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads records its parent never fetched, through a fresh connection
        ok = all(same(remote[i], local[i]) for i in range(30, 40))
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_end)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_a_server_killed_for_a_while_is_waited_for(s3_server, tmp_path):
    local = write(tmp_path / "a.picpac", n=40, size=20_000)
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path, retries=12, backoff=0.2))
    assert same(remote[0], local[0])
    thread = s3_server.outage(1.0)
    try:
        assert all(same(remote[i], local[i]) for i in range(len(local)))
    finally:
        thread.join()


def test_a_server_that_stays_down_is_a_clear_error_soon(s3_server, tmp_path):
    write(tmp_path / "a.picpac", n=40, size=20_000)
    url = s3_server.put(bucket(), "a.picpac", tmp_path / "a.picpac")
    remote = RemoteReader(url, options=options(s3_server, tmp_path, retries=2))
    s3_server.kill()
    try:
        start = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"s3://.*a\.picpac: reading bytes .* failed 3 times.*retries"):
            remote[39]
        assert time.monotonic() - start < 30
    finally:
        s3_server.start()
        s3_server.refill()


def test_missing_and_foreign_objects(s3_server, tmp_path):
    name = bucket()
    s3_server.put(name, "other.txt", b"not a picpac file, just some text" * 10)
    with pytest.raises(MissingPathError, match=f"s3://{name}/nope.picpac: no such remote file"):
        RemoteReader(f"s3://{name}/nope.picpac", options=options(s3_server, tmp_path))
    with pytest.raises(FormatError, match="not a picpac database"):
        RemoteReader(f"s3://{name}/other.txt", options=options(s3_server, tmp_path))
    write(tmp_path / "a.picpac")
    truncated = (tmp_path / "a.picpac").read_bytes()[:-100]
    with pytest.raises(CorruptError, match="truncated or damaged"):
        RemoteReader(s3_server.put(name, "t.picpac", truncated), options=options(s3_server, tmp_path))
    with pytest.raises(PicPacError, match="fsspec cannot open this URL"):
        RemoteReader("nosuchprotocol://x/y.picpac")


@pytest.mark.parametrize("kw, key", [({"cache_limit": "1KiB"}, "cache_limit"), ({"block_size": 100}, "block_size"),
                                     ({"retries": -1}, "retries"), ({"backoff": "1"}, "backoff"),
                                     ({"storage_options": []}, "storage_options"), ({"cache_limit": "x"}, "cache_limit")])
def test_bad_options_name_the_option(kw, key):
    with pytest.raises(PicPacValueError, match=key):
        RemoteOptions(**kw)


def test_is_remote():
    assert is_remote("s3://b/k") and is_remote("gs://b/k") and is_remote("https://h/x.picpac")
    assert not any(is_remote(p) for p in ("data.picpac", "/abs/x", "file:///abs/x", "c:/x"))
    assert is_glob("s3://b/train-*.picpac") and is_glob("gs://b/part-[0-3].picpac")
    assert not is_glob("https://h/x.picpac?X-Amz-Signature=abc&X-Amz-Expires=60")  # a signed URL's query


def test_sharded_remote_datasets_by_glob_and_index(s3_server, tmp_path):
    name = bucket()
    readers = []
    for k in range(3):
        readers.append(write(tmp_path / f"s{k}.picpac", n=10 + k))
        s3_server.put(name, f"ds/train-{k}.picpac", tmp_path / f"s{k}.picpac")
    write_index(tmp_path / "train.shards", [tmp_path / f"s{k}.picpac" for k in range(3)])
    text = "".join(f"train-{k}.picpac\n" for k in range(3))
    s3_server.put(name, "ds/train.shards", text.encode())
    local = open_database(str(tmp_path / "train.shards"))
    for spec in (f"s3://{name}/ds/train-*.picpac", f"s3://{name}/ds/train.shards"):
        with open_database(spec, remote=options(s3_server, tmp_path)) as remote:
            assert isinstance(remote, ShardedReader) and len(remote) == len(local) == 33
            assert [s.path for s in remote.shards] == [f"s3://{name}/ds/train-{k}.picpac" for k in range(3)]
            assert all(bytes(r["image"]) == bytes(l["image"]) and r.meta == l.meta for r, l in zip(remote, local))
            remote.prefetch(np.arange(33))
            copy = pickle.loads(pickle.dumps(remote))
            assert bytes(copy[32]["image"]) == bytes(local[32]["image"])
    with pytest.raises(MissingPathError, match="no file matches"):
        open_database(f"s3://{name}/ds/nothing-*.picpac", remote=options(s3_server, tmp_path))
