"""Remote reads have a deadline (file/remote.py, the stream's ``timeout``): a server that trickles one byte every
2 s fails the read within the bound, naming the URL and the setting. Real servers on 127.0.0.1, each in a child
process: a file server for fsspec's http, and a proxy in front of moto's S3 server for s3fs."""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.errors import RemoteReadError, RemoteTimeoutError
from picpac.file.remote import RemoteOptions, RemoteReader

from helpers import make_db, payload

pytest.importorskip("aiohttp", reason="reading http:// needs aiohttp: pip install -e '.[test]'")

BLOCK = 2**16
_buckets = itertools.count()

# Serves the files under ROOT (ranges honoured) or relays every request to UPSTREAM; once the file SLOW
# exists, the body of every GET answer goes out one byte every 2 s (the headers at once).
TRICKLE = r"""
import http.client, http.server, os, re, sys, time

source, slow = sys.argv[1], sys.argv[2]


class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self):
        if source.startswith("http://"):
            host = source[len("http://"):]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            upstream = http.client.HTTPConnection(host, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream.request(self.command, self.path, body=body, headers={**headers, "Host": host})
            reply = upstream.getresponse()
            data = reply.read()
            skip = {"transfer-encoding", "connection"} | ({"content-length"} if self.command != "HEAD" else set())
            return reply.status, [(k, v) for k, v in reply.getheaders() if k.lower() not in skip], data
        path = os.path.join(source, self.path.lstrip("/"))
        if not os.path.isfile(path):
            return 404, [], b""
        data = open(path, "rb").read()
        wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not wanted:
            return 200, [("Content-Length", str(len(data)))], (data if self.command == "GET" else b"")
        start, stop = int(wanted[1]), min(int(wanted[2]) + 1, len(data))
        return 206, [("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")], data[start:stop]

    def reply(self, with_body):
        status, headers, data = self.answer()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if not any(key.lower() == "content-length" for key, _ in headers):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not with_body:
            return
        try:
            if self.command == "GET" and os.path.exists(slow):
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(2)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_HEAD(self):
        self.reply(False)

    def do_GET(self):
        self.reply(True)

    def do_PUT(self):
        self.reply(True)

    def do_POST(self):
        self.reply(True)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def trickle(tmp_path):
    """``serve(source) -> (base URL, slow)``: a server of the folder or before the upstream URL ``source``,
    whose answers trickle once the file ``slow`` is made."""
    servers = []

    def serve(source: str) -> tuple[str, Path]:
        slow = tmp_path / f"slow-{len(servers)}"
        process = subprocess.Popen([sys.executable, "-c", TRICKLE, source, str(slow)], stdout=subprocess.PIPE, text=True)
        servers.append(process)
        return f"http://127.0.0.1:{int(process.stdout.readline())}", slow
    yield serve
    for process in servers:
        process.kill()
        process.wait()


def write(path: Path, n: int = 20, size: int = 20_000) -> picpac.Reader:
    path.parent.mkdir(parents=True, exist_ok=True)
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=payload(i, size + i), label=i % 4)
    return picpac.Reader(path)


def options(tmp_path, **kw) -> RemoteOptions:
    return RemoteOptions(**{"cache_dir": str(tmp_path / "cache"), "block_size": BLOCK, "backoff": 0.01, **kw})


def s3_url(s3_server, tmp_path, proxy: str) -> tuple[str, dict]:
    """The file ``tmp_path / "www/a.picpac"`` put on moto, and storage options that reach it through ``proxy``."""
    url = s3_server.put(f"t{next(_buckets)}-{os.getpid()}", "a.picpac", tmp_path / "www" / "a.picpac")
    return url, {**s3_server.options, "endpoint_url": proxy}


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_a_trickling_server_fails_the_read_within_the_timeout(trickle, s3_server, tmp_path, scheme):
    local = write(tmp_path / "www" / "a.picpac")
    if scheme == "http":
        base, slow = trickle(str(tmp_path / "www"))
        url, storage = f"{base}/a.picpac", {}
    else:
        base, slow = trickle(s3_server.url)
        url, storage = s3_url(s3_server, tmp_path, base)
    remote = RemoteReader(url, options=options(tmp_path, timeout=2, retries=1, storage_options=storage))
    assert bytes(remote[0]["image"]) == bytes(local[0]["image"])  # at full speed until the server slows
    slow.touch()
    start = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as info:
        remote[len(local) - 1]
    took = time.monotonic() - start
    message = str(info.value)
    assert message.startswith(f"{url}: reading bytes ") and "failed 2 times" in message
    assert "no complete answer within 2 s (timeout=2)" in message and "allow more time (timeout)" in message
    assert isinstance(info.value, RemoteReadError) and isinstance(info.value, TimeoutError)
    assert 4 <= took < 4 + 3  # two attempts of 2 s, a 10 ms wait between them
    stalled = re.match(rf"{re.escape(url)}: reading bytes (\d+-\d+) failed", message)[1]
    offset, size = remote._offsets.item(3), remote._sizes.item(3)
    block = next(b for b in remote._blocks(offset, size) if not os.path.exists(remote._block_path(b)))
    wanted = f"{block * BLOCK}-{min((block + 1) * BLOCK, os.path.getsize(tmp_path / 'www' / 'a.picpac'))}"
    assert wanted != stalled
    start = time.monotonic()  # for timeout seconds, the reads behind it fail at once (another block here)
    with pytest.raises(RemoteTimeoutError) as fast:
        remote[3]
    assert time.monotonic() - start < 0.5
    message = str(fast.value)
    assert message.startswith(f"{url}: reading bytes {wanted} was not attempted: the server stalled on every "
                              f"attempt (2) of reading bytes {stalled} "), message
    assert "no complete answer within 2 s (timeout=2)" in message and "allow more time (timeout)" in message
    assert fast.value.__cause__ is info.value
    slow.unlink()
    time.sleep(2)
    assert bytes(remote[3]["image"]) == bytes(local[3]["image"])  # then the server is asked again
    remote.close()


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_the_stream_bounds_remote_reads_with_its_timeout_key(trickle, tmp_path, backend):
    (tmp_path / "www").mkdir()
    make_db(tmp_path / "www" / "a.picpac", 30, size=(40, 30))
    base, slow = trickle(str(tmp_path / "www"))
    url = f"{base}/a.picpac"
    stream = picpac.ImageStream(url, batch=5, loop=False, shuffle=False, timeout=1.5, remote_retries=1, workers=2,
                                backend=backend, cache_dir=str(tmp_path / "cache"), remote_block_size="64KiB")
    assert stream.config["timeout"] == 1.5
    slow.touch()  # the index is read; every record's block now trickles
    start = time.monotonic()
    with pytest.raises(RemoteTimeoutError, match=rf"^{url}: reading bytes .*timeout=1\.5"):
        next(stream)
    assert time.monotonic() - start < 3 + 4  # two attempts of 1.5 s (the workers wait for them, and then some)
    stream.close()


def test_the_default_bounds_every_request():
    assert RemoteOptions().timeout == 30 and RemoteOptions().deadline() < 6 * 30 + 7
    for bad in (0, -1, float("inf"), float("nan"), True, "5"):
        with pytest.raises(picpac.PicPacValueError, match="timeout must be > 0"):
            RemoteOptions(timeout=bad)
    assert np.isclose(RemoteOptions(timeout=2, retries=2, backoff=0.5).deadline(), 3 * 2 + 0.5 + 1.0)
