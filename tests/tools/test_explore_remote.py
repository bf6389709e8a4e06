"""`picpac explore` on a database on object storage (a real S3 API server on loopback, moto's): the overview, a
record's thumbnail and an augmentation run read it through the URL."""
from __future__ import annotations

import itertools
import os
import re
import urllib.parse

import pytest

from picpac.file.remote import RemoteOptions
from helpers import make_db
from test_explore import Server

pytest.importorskip("starlette", reason="needs the explore extra: pip install -e '.[test]'")
_buckets = itertools.count()


def test_the_explorer_serves_a_url(s3_server, tmp_path):
    local = make_db(tmp_path / "a.picpac", n=12, size=(40, 30))
    url = s3_server.put(f"explore{next(_buckets)}-{os.getpid()}", "a.picpac", local)
    server = Server(url, remote=RemoteOptions(storage_options=s3_server.options, cache_dir=str(tmp_path / "cache")))
    try:
        html = server.text("/")
        assert re.search(r'<td id="records">(\d+)</td>', html).group(1) == "12"
        status, body, headers = server.get("/thumb/3.jpg")
        assert status == 200 and body[:2] == b"\xff\xd8"
        page = server.text("/augment?" + urllib.parse.urlencode({"config": "batch: 4\nresize_width: 20\n"
                                                                           "resize_height: 15\n"}))
        shots = re.findall(r'<img src="(/augment/[0-9a-f]{20}/\d\.png)"', page)
        assert len(shots) == 4 and server.get(shots[0])[0] == 200
    finally:
        server.stop()
