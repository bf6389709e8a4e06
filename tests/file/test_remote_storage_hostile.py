"""Remote files against servers that misbehave or point elsewhere, and a cache folder shared with the user's
files (file/remote.py, file/shards.py): real HTTP servers on 127.0.0.1, each in a child process."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacValueError, RemoteReadError
from picpac.file.remote import RemoteOptions, RemoteReader
from picpac.file.shards import open_database, read_index

from helpers import payload

pytest.importorskip("aiohttp", reason="reading http:// needs aiohttp: pip install -e '.[test]'")

BLOCK = 2**16

SERVER = r"""
import http.server, os, re, sys

root, mode = sys.argv[1], sys.argv[2]


class Handler(http.server.BaseHTTPRequestHandler):
    def _file(self):
        path = os.path.join(root, self.path.lstrip("/"))
        if not os.path.isfile(path):
            self.send_error(404)
            return None
        return path

    def do_HEAD(self):
        path = self._file()
        if path:
            self.send_response(200)
            if mode != "unsized":
                self.send_header("Content-Length", str(os.path.getsize(path)))
            self.end_headers()

    def do_GET(self):
        path = self._file()
        if not path:
            return
        size = os.path.getsize(path)
        wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        start, stop = (int(wanted[1]), min(int(wanted[2]) + 1, size)) if wanted else (0, size)
        if mode in ("whole", "unsized"):  # ignores Range: 200 and the whole object (unsized: its end is the close)
            start, stop, status = 0, size, 200
        elif mode == "lying":  # says 206, sends the whole object
            start, stop, status = 0, size, 206
        else:
            status = 206 if wanted else 200
        self.send_response(status)
        if status == 206 and mode != "lying":
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        if mode != "unsized":
            self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            left = stop - start
            try:
                while left:
                    chunk = f.read(min(left, 2**20))
                    self.wfile.write(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def http_server(tmp_path):
    """``serve(mode) -> base URL`` of an HTTP server of ``tmp_path / "www"`` in a child process: mode "honest"
    serves ranges, "whole" ignores them (200, the whole object), "lying" answers 206 with the whole object,
    "unsized" ignores them and says no size (no Content-Length: the body ends when the connection closes)."""
    servers = []

    def serve(mode: str = "honest") -> str:
        (tmp_path / "www").mkdir(exist_ok=True)
        process = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path / "www"), mode],
                                   stdout=subprocess.PIPE, text=True)
        servers.append(process)
        return f"http://127.0.0.1:{int(process.stdout.readline())}"
    yield serve
    for process in servers:
        process.kill()
        process.wait()


def options(tmp_path, **kw) -> RemoteOptions:
    return RemoteOptions(**{"cache_dir": str(tmp_path / "cache"), "block_size": BLOCK, "backoff": 0.01,
                            "retries": 1, **kw})


def write(path, n: int, size: int) -> picpac.Reader:
    path.parent.mkdir(parents=True, exist_ok=True)
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=payload(i, size + i), label=i % 4)
    return picpac.Reader(path)


def test_eviction_removes_only_the_caches_own_files(http_server, tmp_path):
    home = tmp_path / "home"  # a user's folder given as cache_dir
    theirs = {home / "notes.txt": b"mine", home / "photos" / "a.jpg": b"a" * 50_000,
              home / "photos" / "b.jpg": b"b" * 90_000, home / ("0" * 32) / "b0": b"named like a block"}
    for path, data in theirs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (946684800, 946684800))  # 2000-01-01: older than any block
    base = http_server()
    local = write(tmp_path / "www" / "a.picpac", n=40, size=30_000)  # 1.2 MB: 19 blocks
    limit = 4 * BLOCK
    with RemoteReader(f"{base}/a.picpac", options=options(tmp_path, cache_dir=str(home), cache_limit=limit)) as remote:
        for i in range(len(local)):
            assert bytes(remote[i]["image"]) == bytes(local[i]["image"])
        assert 0 < remote.cache_usage() <= limit
        assert len(os.listdir(remote._folder)) < 19  # blocks were evicted
    assert {path: path.read_bytes() for path in theirs} == theirs


def test_a_server_ignoring_ranges_costs_no_more_memory_than_the_range(http_server, tmp_path):
    write(tmp_path / "www" / "big.picpac", n=6, size=8_000_000)  # 48 MB
    for mode, error in (("whole", "ignores range requests.*HTTP 200"), ("lying", "sent more than the")):
        base = http_server(mode)
        tracemalloc.start()
        try:
            with pytest.raises(RemoteReadError, match=f"{base}/big.picpac: the server {error}"):
                RemoteReader(f"{base}/big.picpac", options=options(tmp_path))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4_000_000, (mode, peak)


def test_a_server_that_serves_ranges_reads_as_the_local_file(http_server, tmp_path):
    local = write(tmp_path / "www" / "a.picpac", n=30, size=9_000)
    with RemoteReader(f"{http_server()}/a.picpac", options=options(tmp_path)) as remote:
        assert [bytes(r["image"]) for r in remote] == [bytes(r["image"]) for r in local]
        assert np.array_equal(remote.labels, local.labels)


def test_a_remote_index_names_shards_on_its_own_server_only(http_server, tmp_path):
    base, other = http_server(), http_server()
    www = tmp_path / "www"
    local = write(www / "ds" / "s0.picpac", n=3, size=100)
    write(www / "s1.picpac", n=2, size=100)
    os.mkfifo(tmp_path / "fifo")
    (www / "ds" / "good.shards").write_text(f"s0.picpac\n../s1.picpac\n{base}/ds/s0.picpac\n")
    assert read_index(f"{base}/ds/good.shards", options(tmp_path)) == [
        f"{base}/ds/s0.picpac", f"{base}/ds/../s1.picpac", f"{base}/ds/s0.picpac"]
    with open_database(f"{base}/ds/good.shards", remote=options(tmp_path)) as reader:
        assert len(reader) == 8 and bytes(reader[7]["image"]) == bytes(local[2]["image"])
    for name in (str(tmp_path / "fifo"), str(www / "ds" / "s0.picpac"), f"{other}/ds/s0.picpac",
                 f"{base}@127.0.0.2/ds/s0.picpac", "s3://bucket/s0.picpac", f"file://{www}/ds/s0.picpac"):
        (www / "ds" / "bad.shards").write_text(f"s0.picpac\n{name}\n")
        with pytest.raises(PicPacValueError, match=rf"bad\.shards: shard '{name}' is not on the index's own "
                                                   rf"server \({base}/\)"):
            read_index(f"{base}/ds/bad.shards", options(tmp_path))  # refused before any shard is opened
    with pytest.raises(PicPacValueError, match="is not on the index's own server"):
        open_database(f"{base}/ds/bad.shards", remote=options(tmp_path))


def test_temp_blocks_left_by_a_killed_writer_are_counted_and_removed_once_stale(http_server, tmp_path):
    local = write(tmp_path / "www" / "a.picpac", n=10, size=20_000)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process killed mid-write: its pid is gone
    with RemoteReader(f"{http_server()}/a.picpac", options=options(tmp_path)) as remote:
        assert bytes(remote[0]["image"]) == bytes(local[0]["image"])
        stored = remote.cache_usage()
        folder = remote._folder
        temps = {"b1.%d-7.tmp" % dead.pid: 100_000,  # its writer died: removed
                 "b2.%d-7.tmp" % os.getpid(): 200_000,  # a live pid, but untouched for an hour: removed
                 "b3.%d-7.tmp" % os.getpid(): 300_000,  # being written now: kept, and counted
                 "index.%d-8.tmp" % dead.pid: 400_000}
        for name, size in temps.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.truncate(size)
        hour_ago = os.path.getmtime(os.path.join(folder, "b0")) - 3600
        os.utime(os.path.join(folder, "b2.%d-7.tmp" % os.getpid()), (hour_ago, hour_ago))
        assert remote.cache_usage() == stored + 300_000
        assert sorted(n for n in os.listdir(folder) if n.endswith(".tmp")) == ["b3.%d-7.tmp" % os.getpid()]


def test_a_remote_index_of_unknown_size_is_read_whole_or_refused_as_too_large(http_server, tmp_path):
    base = http_server("unsized")
    www = tmp_path / "www"
    (www / "small.shards").write_text("s0.picpac\ns1.picpac\n")
    assert read_index(f"{base}/small.shards", options(tmp_path)) == [f"{base}/s0.picpac", f"{base}/s1.picpac"]
    limit = 2**24  # remote_text's: an index past it would be cut there, its last line a name it does not hold
    (www / "big.shards").write_bytes(b"# padding\n" * (limit // 10) + b"s0.picpac\n" * 10)
    assert (www / "big.shards").stat().st_size > limit
    with pytest.raises(PicPacValueError, match=rf"big\.shards: more than {limit} bytes, too large for a shard index "
                                               rf"\(at most {limit}\)"):
        read_index(f"{base}/big.shards", options(tmp_path))
    (www / "big.shards").write_bytes(b"#" * (limit - 21) + b"\ns0.picpac\ns1.picpac\n")  # the limit: read whole
    assert read_index(f"{base}/big.shards", options(tmp_path)) == [f"{base}/s0.picpac", f"{base}/s1.picpac"]
