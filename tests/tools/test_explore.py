"""`picpac explore`: a real server on loopback, real HTTP requests, exact answers (docs/explore.md)."""
from __future__ import annotations

import html as html_module
import http.client
import io
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("jinja2")

import picpac  # noqa: E402
from picpac.sampling.folds import assign_folds, select  # noqa: E402
from picpac.stream.config import StreamConfig  # noqa: E402
from picpac.tools import info  # noqa: E402
from picpac.tools.explore import augment, thumbnails  # noqa: E402
from helpers import SHARED_DATA  # noqa: E402

COCO = SHARED_DATA / "coco128-train"
N = 128
HOSTILE_NOTE = "<script>alert('x')</script> & \"quotes\""


def build_db(tmp) -> str:
    """COCO128 (copied out of the read-only source) imported with its YOLO boxes, then rewritten with labels
    i % 3, a meta kind=odd/even, and record 5's meta holding markup."""
    if not COCO.is_dir():
        pytest.skip(f"{COCO} is not there")
    src = tmp / "coco"
    for part in ("images", "detection"):
        shutil.copytree(COCO / part, src / part)
    shutil.copy(COCO / "detection-classes.yaml", src)
    from picpac.tools.ingest import import_dataset

    imported = tmp / "imported.picpac"
    import_dataset(src / "images", imported, format="yolo", labels=src / "detection",
                   classes=src / "detection-classes.yaml", progress=False)
    db = tmp / "coco.picpac"
    with picpac.Reader(imported) as r, picpac.Writer(db, metadata={"classes": ["zero", "one", "two"]}) as w:
        assert len(r) == N
        for i in range(N):
            rec = r[i]
            meta = {**rec.meta, "kind": "odd" if i % 2 else "even", "n": i}
            if i == 5:
                meta["note"] = HOSTILE_NOTE
            w.append(image=bytes(rec["image"]), annotation=bytes(rec["annotation"]), label=i % 3, meta=meta)
    return str(db)


class Server:
    def __init__(self, db: str, **options):
        import uvicorn

        from picpac.tools.explore.app import build_app
        from picpac.tools.explore.server import allowed_hosts, bind

        self.app = build_app(db, allowed_hosts=allowed_hosts("127.0.0.1"), **options)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started and time.time() < deadline:
            time.sleep(0.02)
        assert self.server.started

    def get(self, path: str, host: str | None = None) -> tuple[int, bytes, dict]:
        """A GET of ``path`` sent exactly as given (no client-side normalisation)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host or f"127.0.0.1:{self.port}")
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return resp.status, body, dict(resp.getheaders())

    def text(self, path: str) -> str:
        status, body, _ = self.get(path)
        assert status == 200, (path, body[:500])
        return body.decode()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("explore"))


@pytest.fixture(scope="module")
def server(db):
    s = Server(db)
    yield s
    s.stop()


def grid_ids(html: str) -> list[int]:
    return [int(v) for v in re.findall(r'data-id="(\d+)"', html)]


def table(html: str, id_: str) -> str:
    return re.search(rf'<table id="{id_}">(.*?)</table>', html, re.S).group(1)


def counts(html: str, id_: str) -> list[int]:
    return [int(v) for v in re.findall(r'<td class="count">(\d+)</td>', table(html, id_))]


def test_overview_counts(server, db):
    html = server.text("/?split=4&seed=9")
    d = info.describe(db)
    assert re.search(r'<td id="records">(\d+)</td>', html).group(1) == str(N)
    assert re.search(r'<td id="damaged">(\d+)</td>', html).group(1) == "0"
    assert counts(html, "labels") == [43, 43, 42]
    assert ">zero<" in table(html, "labels") and ">two<" in table(html, "labels")
    assert sum(counts(html, "shapes")) == d["shapes"]["shapes"] == 929
    assert counts(html, "shapes") == [c["count"] for c in d["shapes"]["counts"]]
    with picpac.Reader(db) as r:
        folds = assign_folds(r.labels, r.groups, 4, 9)
    assert counts(html, "folds") == np.bincount(folds, minlength=4).tolist()
    assert sum(counts(html, "hist-width")) == sum(counts(html, "hist-aspect")) == N
    assert "max 640" in html  # COCO's widths


def test_grid_pagination(server):
    html = server.text("/grid?per=10&start=20")
    assert grid_ids(html) == list(range(20, 30))
    assert "128 records selected" in html
    last = server.text("/grid?per=50&start=100")
    assert grid_ids(last) == list(range(100, 128)) and 'id="next"' not in last
    first = server.text("/grid")
    assert grid_ids(first) == list(range(60))
    nxt = re.search(r'id="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert grid_ids(server.text(nxt)) == list(range(60, 120))


def test_grid_filters(server, db):
    assert grid_ids(server.text("/grid?label=1&per=500")) == list(range(1, N, 3))
    assert grid_ids(server.text("/grid?label=2&per=5&start=5")) == list(range(2, N, 3))[5:10]
    with picpac.Reader(db) as r:
        folds = assign_folds(r.labels, r.groups, 5, 2016)  # ImageStream's default seed
    held_out = select(folds, 5, 2, negate=True).tolist()
    assert grid_ids(server.text("/grid?split=5&fold=2&per=500")) == held_out
    both = server.text("/grid?split=5&fold=2&label=0&per=500")
    assert grid_ids(both) == [i for i in held_out if i % 3 == 0]
    assert grid_ids(server.text("/grid?meta=kind%3Dodd&per=500")) == list(range(1, N, 2))
    assert grid_ids(server.text("/grid?meta=n%3D7")) == [7]
    assert grid_ids(server.text("/grid?meta=kind%3Dodd&label=0&per=4")) == [3, 9, 15, 21]
    bad = server.get("/grid?split=3&fold=7")
    assert bad[0] == 200 and b"fold must be in [0, 2]" in bad[1] and grid_ids(bad[1].decode()) == []


def links(html: str, id_: str) -> dict[str, str]:
    """The text of each link of the paragraph ``id_`` and where it goes."""
    paragraph = re.search(rf'<p class="links" id="{id_}">(.*?)</p>', html, re.S).group(1)
    return {text: href.replace("&amp;", "&") for href, text in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>',
                                                                          paragraph)}


def test_grid_class_and_fold_links_filter_it(server, db):
    html = server.text("/grid?meta=kind%3Dodd")
    classes, folds = links(html, "class-links"), links(html, "fold-links")
    assert list(classes) == ["all", "0 zero", "1 one", "2 two"]
    assert list(folds) == ["all"] + [f"{f} of 5" for f in range(5)]
    assert "(43)" in html and "(42)" in html
    assert grid_ids(server.text(classes["1 one"])) == [1, 7, 13, 19, 25, 31, 37, 43, 49, 55, 61, 67, 73, 79, 85, 91,
                                                       97, 103, 109, 115, 121, 127]  # label 1 and meta kind=odd
    with picpac.Reader(db) as r:
        held_out = select(assign_folds(r.labels, r.groups, 5, 2016), 5, 3, negate=True).tolist()
    assert grid_ids(server.text(folds["3 of 5"] + "&meta=")) == held_out
    on = server.text(folds["3 of 5"])
    assert re.findall(r'class="on">([^<]*)</a>', on) == ["all", "3 of 5"]
    assert list(links(server.text("/grid?split=3&fold=1"), "fold-links")) == ["all", "0 of 3", "1 of 3", "2 of 3"]


def test_record_page_escapes_meta(server, db):
    html = server.text("/record/5")
    assert "&lt;script&gt;" in html and "<script>alert" not in html
    meta = re.search(r'<pre id="meta">(.*?)</pre>', html, re.S).group(1)
    import html as html_module
    with picpac.Reader(db) as r:
        rec = r[5]
        assert json.loads(html_module.unescape(meta)) == rec.meta
        rows = re.findall(r"<tr><td>(\w+)</td><td>(\d+)</td><td>([^<]*)</td></tr>", table(html, "fields"))
        assert [(name, int(size)) for name, size, _ in rows] == [(k, v.nbytes) for k, v in rec.fields.items()]
    assert re.fullmatch(r"JPEG \d+x\d+", rows[0][2]) and f"JPEG {rec.meta['width']}x{rec.meta['height']}" == rows[0][2]
    assert rows[1][2] == "JSON"
    assert '<td id="label">2 (two)</td>' in html
    assert server.get("/image/5.png")[0] == 200


def test_thumbnails_cached_and_bounded(server):
    status, body, headers = server.get("/thumb/7.jpg")
    assert status == 200 and headers["content-type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    from PIL import Image

    assert max(Image.open(io.BytesIO(body)).size) <= thumbnails.THUMB_SIDE
    cache = server.app.state.explorer.thumbs
    assert cache.get(("thumb", id(server.app.state.explorer.reader), 7)) == body
    lru = thumbnails.LRUBytes(limit=10)
    for k in range(5):
        lru.put(k, b"abcd")
    assert len(lru) == 2 and lru.size == 8 and lru.get(0) is None and lru.get(4) == b"abcd"


def test_augmentation_pixels_equal_the_stream(server, db):
    text = ("seed: 7\nbatch: 4\nresize_width: 96\nresize_height: 80\nperturb: true\npert_hflip: true\n"
            "pert_angle: 20\npert_color1: 10\npert_min_scale: 0.8\npert_max_scale: 1.3\nsplit: 3\nsplit_fold: 1\n")
    html = server.text("/augment?" + urllib.parse.urlencode({"config": text}))
    srcs = re.findall(r'<a href="(/augment/[0-9a-f]{20}/\d\.png)" class="exact">', html)
    drawn = re.findall(r'<img src="(/augment/[0-9a-f]{20}/\d-drawn\.png)"', html)  # (the records have annotations)
    assert len(srcs) == 4 and drawn == [src.replace(".png", "-drawn.png") for src in srcs]
    with picpac.ImageStream(db, seed=7, batch=4, resize_width=96, resize_height=80, perturb=True, pert_hflip=True,
                            pert_angle=20, pert_color1=10, pert_min_scale=0.8, pert_max_scale=1.3, split=3, split_fold=1,
                            loop=False, dtype="uint8", order="NHWC", colorspace="RGB") as stream:
        images, labels, _ = next(iter(stream))
    from PIL import Image

    for k, src in enumerate(srcs):
        status, body, headers = server.get(src)
        assert status == 200 and headers["content-type"] == "image/png"
        pixels = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
        assert pixels.shape == (80, 96, 3)
        np.testing.assert_array_equal(pixels, images[k])
        status, body, headers = server.get(drawn[k])
        assert status == 200 and headers["content-type"] == "image/png"
        over = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
        assert over.shape == (80, 96, 3) and 0 < (over != images[k]).any(2).mean() < 0.5  # the boxes and the label
    assert f"label {int(labels[0])}" in html


def reply(server, **query: str) -> tuple[int, dict]:
    status, body, headers = server.get("/augment.json?" + urllib.parse.urlencode(query))
    assert headers["content-type"] == "application/json"
    return status, json.loads(body)


def samples_of(server, answer: dict) -> list[np.ndarray]:
    from PIL import Image

    pngs = [server.get(f"/augment/{answer['digest']}/{s['k']}.png")[1] for s in answer["samples"]]
    return [np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for data in pngs]


def test_a_control_edits_the_configs_line_and_runs_it(server, db):
    text = "seed: 7  # mine\nbatch: 3\nresize_width: 64\nresize_height: 48\nperturb: true\npert_angle: 10\n"
    status, answer = reply(server, config=text, set=json.dumps({"pert_angle": 40, "pert_vflip": True}))
    assert status == 200 and answer["error"] is None
    assert answer["config"] == text.replace("pert_angle: 10", "pert_angle: 40") + "pert_vflip: true\n"
    assert answer["values"]["pert_angle"] == 40.0 and answer["values"]["pert_vflip"] is True
    with picpac.ImageStream(db, seed=7, batch=3, resize_width=64, resize_height=48, perturb=True, pert_angle=40,
                            pert_vflip=True, loop=False, dtype="uint8", order="NHWC", colorspace="RGB") as stream:
        images, labels, _ = next(iter(stream))
    assert [s["label"] for s in answer["samples"]] == [str(int(v)) for v in labels]
    assert all(s["shapes"].endswith(")") or "shape" in s["shapes"] for s in answer["samples"])
    for got, want in zip(samples_of(server, answer), images):
        np.testing.assert_array_equal(got, want)


def test_a_reroll_runs_the_config_with_a_new_seed(server):
    text = "seed: 7\nbatch: 2\nresize_width: 64\nresize_height: 48\nperturb: true\npert_angle: 90\n"
    _, first = reply(server, config=text)
    status, rolled = reply(server, config=text, reroll="1")
    seed = int(re.search(r"^seed: (\d+)$", rolled["config"], re.M).group(1))
    assert status == 200 and seed != 7 and rolled["values"]["seed"] == seed
    assert rolled["config"] == text.replace("seed: 7", f"seed: {seed}") and rolled["digest"] != first["digest"]
    assert any((a != b).any() for a, b in zip(samples_of(server, first), samples_of(server, rolled)))


def test_a_fold_link_runs_that_fold_without_a_script(server, db):
    text = "seed: 5\nbatch: 4\nshuffle: false\nresize_width: 32\nresize_height: 32\n"
    page = server.text("/augment?" + urllib.parse.urlencode({"config": text}))
    fold = links(page, "folds")["fold 2 of 5"]
    answer = server.text(html_module.unescape(fold))
    shown = html_module.unescape(re.search(r'rows="12">(.*?)</textarea>', answer, re.S).group(1))
    assert shown == text + "split: 5\nsplit_fold: 2\nsplit_negate: true\n"
    assert re.findall(r'class="on">([^<]*)</a>', answer) == ["fold 2 of 5"]
    with picpac.ImageStream(db, seed=5, batch=4, shuffle=False, split=5, split_fold=2, split_negate=True,
                            resize_width=32, resize_height=32, loop=False) as stream:
        labels = next(iter(stream))[1]
    assert re.findall(r"<br>label (\d+)", answer) == [str(int(v)) for v in labels]


TRAVERSALS = ["/../../etc/passwd", "/record/../../etc/passwd", "/record/..%2f..%2fetc%2fpasswd",
              "/thumb/..%2F..%2Fetc%2Fpasswd.jpg", "/%2e%2e/%2e%2e/etc/passwd", "/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
              "/image/..%252f..%252fetc%252fpasswd.png", "//etc/passwd", "/etc/passwd", "/static/../pyproject.toml",
              "/record/-1", f"/record/{N}", "/record/99999999999999999999999", "/record/1e3", "/record/0x1",
              "/thumb/abc.jpg", f"/image/{N}.png", "/augment/..%2f..%2fetc/0.png", "/augment/0123456789abcdef0123/0.png",
              "/augment/../../etc/passwd", "/grid/../../etc/passwd", "/record/5/../../../etc/passwd",
              "/coco.picpac", "/imported.picpac", "/%00", "/record/%00"]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_paths_outside_the_app_are_404(server, path):
    status, body, _ = server.get(path)
    assert status == 404, path
    assert b"root:" not in body and b"Traceback" not in body and b"[project]" not in body


HOSTILE = {
    "mixin: /etc/passwd": "config key 'mixin' is not allowed",
    "db: /etc/passwd": "config key 'db' is not allowed",
    "label_path: /etc/passwd": "config key 'label_path' is not allowed",
    "dump: 5": "config key 'dump' is not allowed",
    "workers: 1000": "config key 'workers' is not allowed",
    "!!python/object/apply:os.system ['touch /tmp/pwned']": "neither JSON nor YAML",
    "transforms: !!python/object/apply:os.system ['id']": "neither JSON nor YAML",
    "transforms: [{type: augment.flip, file: /etc/passwd}]": "key 'file' is not allowed",
    "batch: 100000": "'batch' (the samples shown) must be an int in [1, 32]",
    "max_pixels: 0": "'max_pixels' must be an int in [1, 16,777,216]",
    "resize_width: 30000\nresize_height: 30000": "max_pixels",
    "resize_width: 4000\nresize_height: 4000\nbatch: 32": "per run",
    "[1, 2]": "must be a mapping",
    '{"pert_angle": "__import__(\'os\')"}': "'pert_angle' must be a number",
    "pert_angle: 1\n" * 1 + "x" * 30000: "characters long",
    # one side given: the other follows each image's aspect ratio (COCO's 640x480 and others)
    '{"resize_width": 32766}': "config key 'resize_width' makes the database's 359x640 images 32766x58413 "
                               "(1,913,960,358 pixels), more than max_pixels=16,777,216 (the explorer's bound",
    "resize_height: 8000": "config key 'resize_height' makes the database's",
    "max_size: 8000\nmin_size: 8000": "config key 'min_size' and 'max_size' makes",
    "transforms: [{type: augment.scale, min: 50, max: 50}]":
        "config key 'transforms' (Scale(low=50.0, high=50.0, random=True)) makes the database's",
    "transforms: [{type: augment.blur, sigma: 1}, {type: augment.scale, min: 50, max: 50}]": "Scale(low=50.0",
    "resize_width: 2000\nbatch: 32": "32 samples of up to 7,130,000 pixels are more than the explorer's 256 MiB",
}


def error_of(body: bytes) -> str:
    """The error line of a page, as text."""
    import html as html_module

    return html_module.unescape(re.search(r'<div class="error" id="error">(.*?)</div>', body.decode(), re.S).group(1))


@pytest.mark.parametrize("text", list(HOSTILE), ids=range(len(HOSTILE)))
def test_hostile_config_is_refused_with_a_message(server, text):
    status, body, _ = server.get("/augment?" + urllib.parse.urlencode({"config": text}))
    html = body.decode()
    assert status == 400
    assert HOSTILE[text] in error_of(body)
    assert "Traceback" not in html and "<script>" not in html


def test_load_config_keeps_output_fixed_and_gives_the_parsed_config():
    config, parsed = augment.load_config('{"resize_width": 32, "resize_height": 32, "seed": 3}')
    assert config["dtype"] == "uint8" and config["order"] == "NHWC" and config["max_pixels"] == augment.MAX_PIXELS
    assert parsed == StreamConfig.from_dict(config) and parsed["resize_width"] == 32 and parsed["pert_border"] == "constant"


def test_host_header_and_security_headers(server):
    status, _, _ = server.get("/", host="evil.example")
    assert status == 400  # DNS rebinding: only loopback names are answered
    status, _, headers = server.get("/grid?per=1")
    assert status == 200 and "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def test_cli_binds_loopback_and_prints_the_port(db):
    proc = subprocess.Popen([sys.executable, "-c", "from picpac.tools.cli import main; main()", "explore", db,
                             "--port", "0", "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
        if not match:
            proc.kill()
            pytest.fail(f"no URL printed: {line!r}; stderr: {proc.communicate(timeout=10)[1][-2000:]}")
        port = int(match.group(1))
        listening = [row.split()[1] for row in open("/proc/net/tcp").read().splitlines()[1:]
                     if row.split()[3] == "0A" and int(row.split()[1].split(":")[1], 16) == port]
        assert listening == [f"0100007F:{port:04X}"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/grid?per=3", timeout=30) as resp:
            assert grid_ids(resp.read().decode()) == [0, 1, 2]
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/record/{N}", timeout=30)
        assert exc.value.code == 404
    finally:
        proc.terminate()
        proc.wait(10)


def test_non_loopback_hosts_are_flagged():
    from picpac.tools.explore.server import allowed_hosts, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert allowed_hosts("0.0.0.0") is None and "localhost" in allowed_hosts("127.0.0.1")


def test_core_import_loads_no_web_framework():
    code = ("import sys, picpac, picpac.tools.cli\n"
            "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def labelled_db(path, labels: list[float]) -> str:
    """Small PNGs (24x16, distinct pixels) with these labels: values the Writer takes."""
    import cv2

    with picpac.Writer(path) as w:
        for i, label in enumerate(labels):
            pixels = np.full((16, 24, 3), 10 * i, np.uint8)
            w.append(image=cv2.imencode(".png", pixels)[1].tobytes(), label=label)
    return str(path)


def test_nan_and_infinite_labels_are_shown_on_every_page(tmp_path):
    s = Server(labelled_db(tmp_path / "odd.picpac", [float("nan"), float("inf"), float("-inf"), 0.5, 2.0]))
    try:
        html = s.text("/grid")
        assert grid_ids(html) == [0, 1, 2, 3, 4]
        assert re.findall(r"<br>label ([^<]*)</div>", html) == ["nan", "inf", "-inf", "0.5", "2"]
        for i, shown in enumerate(["nan", "inf", "-inf", "0.5", "2"]):
            assert f'<td id="label">{shown}</td>' in s.text(f"/record/{i}")
        assert grid_ids(s.text("/grid?label=inf")) == [1] and grid_ids(s.text("/grid?label=nan")) == []
        overview = s.text("/")
        assert "continuous: min -inf" not in overview and "continuous: min 0.5, max 2.0" in overview
        assert "3 labels are NaN or infinite" in overview
    finally:
        s.stop()


def test_labels_too_close_for_ten_bins_make_an_overview(tmp_path):
    s = Server(labelled_db(tmp_path / "tiny.picpac", [0.0, 5e-324]))
    try:
        assert "continuous: min 0.0, max 5e-324" in s.text("/")
    finally:
        s.stop()


def test_a_resize_of_one_side_is_refused_before_a_run_starts(server):
    """resize_width alone scales each image's height by its aspect ratio: refused from the database's sizes,
    with no run process started."""
    augmenter = server.app.state.explorer.augmenter
    started = augmenter.started
    status, body, _ = server.get("/augment?" + urllib.parse.urlencode({"config": '{"resize_width": 32766}'}))
    assert status == 400 and "more than max_pixels=16,777,216" in error_of(body)
    assert augmenter.started == started


BLURS = json.dumps({"batch": 1, "resize_width": 4000, "resize_height": 3000,
                    "transforms": [{"type": "augment.blur", "sigma": 250}] * 40})
"""A run of ~1 KB that takes hours: forty blurs of sigma 250 over 12 megapixels."""
SMALL = "batch: 2\nresize_width: 32\nresize_height: 24\nseed: 5\n"


def augment_path(text: str) -> str:
    return "/augment?" + urllib.parse.urlencode({"config": text})


def runs() -> list[int]:
    """The pids of this process's children that are augmentation runs (and not yet reaped)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"picpac.tools.explore.augment" in command:
            found.append(int(entry))
    return found


def test_a_run_past_the_time_limit_is_stopped_and_answered(db):
    s = Server(db, augment_seconds=3)
    try:
        start = time.monotonic()
        status, body, _ = s.get(augment_path(BLURS))
        took = time.monotonic() - start
        assert status == 400 and error_of(body).startswith("the run took longer than the explorer's time limit of 3 s "
                                                           "a run, so it was stopped")  # not "config refused"
        assert 3 <= took < 20, took
        assert runs() == []  # the run's process is gone
        start = time.monotonic()
        assert len(re.findall(r'<img src="/augment/', s.text(augment_path(SMALL)))) == 2  # the next one runs
        assert time.monotonic() - start < 20
    finally:
        s.stop()


def test_a_client_that_goes_away_stops_its_run(db):
    import socket

    s = Server(db, augment_seconds=600)
    try:
        client = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        client.sendall(f"GET {augment_path(BLURS)} HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
        deadline = time.monotonic() + 20
        while not runs():  # the run started
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        client.close()
        start = time.monotonic()
        html = s.text(augment_path(SMALL))  # the lock is free at once: this run goes
        assert len(re.findall(r'<img src="/augment/', html)) == 2 and time.monotonic() - start < 20
        assert runs() == []
    finally:
        s.stop()


HIDDEN_RESIZE = json.dumps({"batch": 2, "seed": 3, "resize_width": 64, "resize_height": 64, "transforms": [
    {"type": "sometimes", "chance": 1, "transforms": [{"type": "augment.blur", "sigma": 1},
                                                      {"type": "resize", "size": 1500}]}]})
"""A resize the estimate cannot see (the blur before it reads pixels, so the dry run stops at the sometimes):
outputs of 64x64 estimated, two 1500x1500 PNGs of 1.8 MB made."""


def test_a_size_step_the_estimate_cannot_see_is_refused_past_the_output_limit(server, monkeypatch):
    monkeypatch.setattr(augment, "MAX_OUTPUT_BYTES", 1 << 20)  # read at each run, by the run and the estimate
    augmenter = server.app.state.explorer.augmenter
    started = augmenter.started
    status, body, _ = server.get(augment_path(HIDDEN_RESIZE))
    assert status == 400 and augmenter.started == started + 1  # the estimate let it through; the run refused it
    assert re.fullmatch(r"config refused: the run's PNGs add up to [\d,]+ bytes after 1 of 2 samples, more than the "
                        r"explorer's 1 MiB per run; lower 'batch' or the size \(.*sometimes.*\)", error_of(body))


def rchar() -> int:
    """The bytes this process has read so far (all its threads, every file and pipe)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_reply_is_read_within_its_bound_and_stderr_to_its_tail():
    """The server reads a run's stdout up to a bound and kills the process past it (whatever the process
    writes), and keeps only the last STDERR_TAIL bytes of its stderr."""
    flood = "import sys; sys.stderr.write('x' * 100_000 + '\\nthe last line\\n'); sys.stdout.buffer.write(b'y' * 2**26)"
    process = subprocess.Popen([sys.executable, "-c", flood], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    before = rchar()
    with pytest.raises(augment.RunStopped, match=r"the run's reply passed 1,048,576 bytes \(the explorer's bound"):
        augment.exchange(process, b"", 1 << 20)
    assert rchar() - before < 4 << 20  # of the 64 MiB written
    assert process.returncode == -9
    quiet = "import sys; sys.stderr.write('x' * 100_000 + '\\nthe last line\\n'); print('the reply')"
    process = subprocess.Popen([sys.executable, "-c", quiet], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    out, err = augment.exchange(process, b"", 1 << 20)
    assert out == b"the reply\n" and len(err) == augment.STDERR_TAIL and err.endswith(b"x\nthe last line\n")
    assert process.returncode == 0


@pytest.mark.parametrize("mib", [64, 200])
def test_a_run_over_its_memory_limit_is_answered_naming_the_limit(server, monkeypatch, mib):
    """Outputs of 4000x3000 (two of 36 MB each, and their copies) pass the estimate and a run's memory cap does
    not hold them: OpenCV's allocation (64 MiB) or NumPy's (200 MiB, on the Python path, whose per-sample arrays
    are stacked into a batch: the fused path writes each sample into its batch and needs less) fails, a failure
    inside the stream."""
    monkeypatch.setattr(augment, "MAX_RUN_BYTES", mib << 20)  # read at each run
    status, body, _ = server.get(augment_path(json.dumps({"batch": 2, "seed": mib, "resize_width": 4000,
                                                          "resize_height": 3000, "fused": mib != 200})))
    message = error_of(body)
    assert status == 400 and message.startswith("the stream failed: "), message
    assert message.endswith(f"(the run is over the explorer's memory limit of {mib} MiB)"), message


def test_a_run_process_that_dies_is_answered_with_its_last_error_line(server, monkeypatch, tmp_path):
    """A run's process that ends with no answer (here its OpenCV fails to import): the page says so with the
    last line of its stderr, and not as a refused config."""
    (tmp_path / "cv2.py").write_text("raise ImportError('this cv2 is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the run's process is a fresh interpreter: it takes this cv2
    status, body, _ = server.get(augment_path("batch: 1\nseed: 41\nresize_width: 16\nresize_height: 16\n"))
    assert status == 400
    assert error_of(body) == ("the run's process ended with exit code 1 and no answer: "
                              "ImportError: this cv2 is broken")


def test_a_cached_config_is_answered_without_its_cost_estimate(server, monkeypatch):
    estimates = []
    check_cost = augment.check_cost
    monkeypatch.setattr(augment, "check_cost", lambda *args: estimates.append(args) or check_cost(*args))
    augmenter = server.app.state.explorer.augmenter
    started = augmenter.started
    text = augment_path("batch: 1\nseed: 43\nresize_width: 16\nresize_height: 16\n")
    first = server.text(text)
    assert server.text(text) == first and len(re.findall(r'<img src="/augment/', first)) == 1
    assert len(estimates) == 1 and augmenter.started == started + 1


def test_without_proc_a_run_is_capped_at_a_fixed_size(tmp_path):
    """Where /proc/self/status is not there (not Linux), a run's memory cap does not count what it holds at its
    start: it is START_BYTES plus its allowance."""
    code = ("import resource\nfrom picpac.tools.explore import augment\n"
            f"augment._limit_memory(64 << 20, status={str(tmp_path / 'status')!r})\n"
            "print(resource.getrlimit(resource.RLIMIT_DATA)[0], augment.START_BYTES + (64 << 20))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    limit, expected = out.stdout.split()
    assert limit == expected
