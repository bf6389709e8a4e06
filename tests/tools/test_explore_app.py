"""picpac.tools.explore.app, called as an ASGI app (no network: test_explore.py serves it over HTTP): the
security headers on every answer, the record page's fields, names and damage, pictures that cannot be made,
the refusals shown on the pages, and the helpers that name labels and fields."""
from __future__ import annotations

import asyncio
import json
import re
import struct
from urllib.parse import unquote, urlencode

import cv2
import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

import picpac  # noqa: E402
from picpac.tools.explore import app as app_module  # noqa: E402
from picpac.tools.explore.app import HEADERS, _integral, _kind, _label_text, build_app  # noqa: E402
from picpac.tools.explore.augment import DEFAULT_CONFIG  # noqa: E402

from helpers import damage_record, jpeg_bomb, png  # noqa: E402


def get(app, target: str, *, method: str = "GET", host: str = "127.0.0.1:8000") -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request through the app's ASGI interface."""
    path, _, query = target.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": unquote(path), "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", host.encode())], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def error_of(body: bytes) -> str | None:
    import html

    found = re.search(r'<div class="error" id="error">(.*?)</div>', body.decode(), re.S)
    return None if found is None else html.unescape(found.group(1))


PIXELS = np.random.default_rng(0).integers(0, 256, (6, 8, 3), np.uint8)


@pytest.fixture
def db(tmp_path):
    """Record 0: a PNG labelled 1 with shapes; 1: bytes that are no image, labelled 7 (past the classes); 2: a JPEG
    bomb; 3: a PNG labelled 0.5 with a long JSON annotation; 4: damaged."""
    path = tmp_path / "db.picpac"
    shapes = {"shapes": [{"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "label": 1}]}
    with picpac.Writer(path, metadata={"classes": ["cat", "<dog>"]}) as w:
        w.append(image=png(PIXELS), annotation=json.dumps(shapes).encode(), label=1, meta={"note": "<b>"})
        w.append(image=b"plain bytes", label=7, group=12)
        w.append(image=jpeg_bomb(9000, 9000))
        w.append(image=png(PIXELS), annotation=json.dumps({"shapes": [], "pad": "x" * 300}).encode(), label=0.5)
        w.append(image=png(PIXELS), meta={"n": 4})
    damage_record(path, 4, at=22)  # its meta
    return path


@pytest.fixture
def app(db):
    built = build_app(db, allowed_hosts=["127.0.0.1", "localhost"])
    yield built
    built.state.explorer.index.close()


@pytest.mark.parametrize("target", ["/", "/grid", "/record/0", "/thumb/0.jpg", "/image/0.png", "/augment",
                                    "/record/99", "/nowhere", "/thumb/1.jpg", "/static/explore.js",
                                    "/augment.json?set=x", "/favicon.ico"])
def test_every_answer_carries_the_security_headers(app, target):
    status, headers, _ = get(app, target)
    assert status in (200, 400, 404)
    for name, value in HEADERS.items():
        assert headers[name.lower()] == value, (target, name)


def test_the_one_script_is_the_apps_own_file_and_the_policy_runs_no_other(app):
    status, headers, body = get(app, "/static/explore.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert body == (app_module.pathlib.Path(app_module.__file__).parent / "static" / "explore.js").read_bytes()
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'" and policy["connect-src"] == "'self'"
    for target in ("/static/other.js", "/static/", "/static/explore.js/x", "/static/%2e%2e/app.py"):
        assert get(app, target)[0] == 404, target


def test_a_post_is_not_found(app):
    status, headers, body = get(app, "/grid", method="POST")
    assert status == 404 and b"<h1>Not found</h1>" in body and headers["x-content-type-options"] == "nosniff"


def test_only_the_allowed_hosts_are_answered(app, db):
    assert get(app, "/grid", host="localhost")[0] == 200
    assert get(app, "/grid", host="evil.example")[0] == 400
    anyone = build_app(db, allowed_hosts=None)
    try:
        assert get(anyone, "/grid", host="evil.example")[0] == 200
    finally:
        anyone.state.explorer.index.close()


def test_the_record_page_names_its_fields_and_its_class(app):
    status, _, body = get(app, "/record/0")
    html = body.decode()
    assert status == 200 and error_of(body) is None
    assert '<td id="label">1 (&lt;dog&gt;)</td>' in html
    rows = re.findall(r"<tr><td>(\w+)</td><td>(\d+)</td><td>([^<]*)</td></tr>", html)
    assert [(name, kind) for name, _, kind in rows] == [("image", "PNG 8x6"), ("annotation", "JSON")]
    assert "&#34;note&#34;: &#34;&lt;b&gt;&#34;" in html
    label_7 = get(app, "/record/1")[2].decode()
    assert '<td id="label">7</td>' in label_7 and "<tr><th>group</th><td>12</td></tr>" in label_7
    assert '<td id="label">0.5</td>' in get(app, "/record/3")[2].decode()


def test_a_long_annotation_is_cut_where_shown(app, monkeypatch):
    monkeypatch.setattr(app_module, "MAX_TEXT_SHOWN", 40)
    html = get(app, "/record/3")[2].decode()
    shown = re.search(r'<pre id="annotation">(.*?)</pre>', html, re.S).group(1)
    import html as html_module

    assert html_module.unescape(shown) == json.dumps({"shapes": [], "pad": "x" * 300})[:40] + " ..."
    assert '"' not in shown


def test_a_damaged_record_is_shown_with_what_is_wrong(app, db):
    status, _, body = get(app, "/record/4")
    assert status == 200
    assert error_of(body).startswith(f"record 4 is damaged: {db}: record 4 ")


@pytest.mark.parametrize("target", ["/thumb/1.jpg", "/image/1.png", "/thumb/2.jpg", "/image/2.png",
                                    "/augment/0123456789abcdef0123/0.png", "/augment/XYZ/0.png", "/record/5"])
def test_pictures_that_cannot_be_made_are_not_found(app, target):
    status, headers, body = get(app, target)
    assert status == 404 and headers["content-type"].startswith("text/html") and b"<h1>Not found</h1>" in body


def test_pictures_that_can(app):
    status, headers, body = get(app, "/thumb/0.jpg")
    assert status == 200 and headers["content-type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    status, headers, body = get(app, "/image/3.png")
    assert status == 200 and headers["content-type"] == "image/png"
    assert np.array_equal(cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR), PIXELS)


def test_a_bad_split_on_the_overview_is_shown_and_five_folds_given(app):
    status, _, body = get(app, "/?" + urlencode({"split": "0", "seed": "3"}))
    assert status == 200 and error_of(body) == "split must be an integer in [1, 1000], got '0'"
    assert len(re.findall(r">fold \d+</a>", body.decode())) == 5


def test_the_grid_takes_a_bad_page_size_or_start_as_the_defaults(app):
    for query in ("per=0", "per=501", "per=-1&start=-3", "start=x", f"start={2**62}"):
        html = get(app, "/grid?" + query)[2].decode()
        assert re.findall(r'data-id="(\d+)"', html) == ["0", "1", "2", "3", "4"], query
        assert "showing 0-5" in html


def test_the_grid_shows_a_bad_filter_as_its_error(app):
    status, _, body = get(app, "/grid?label=cat")
    assert status == 200 and error_of(body) == "label must be a number, got 'cat'"
    assert re.findall(r'data-id="(\d+)"', body.decode()) == []


def test_the_augment_page_without_a_config_shows_the_default(app):
    status, _, body = get(app, "/augment")
    assert status == 200 and error_of(body) is None
    assert re.search(r'<textarea name="config" id="config" rows="12">(.*?)</textarea>', body.decode(), re.S).group(1) \
        == DEFAULT_CONFIG


def test_an_edit_a_page_may_not_send_is_a_400_in_json(app):
    status, headers, body = get(app, "/augment.json?" + urlencode({"config": "seed: 1", "set": '{"mixin": "/x"}'}))
    reply = json.loads(body)
    assert status == 400 and headers["content-type"] == "application/json"
    assert reply["error"].startswith("config refused: an edit may set only the page's controls")
    assert (reply["config"], reply["digest"], reply["samples"]) == ("seed: 1", "", [])
    assert reply["values"]["seed"] == 1 and len(reply["folds"]) == 6


def test_the_grid_has_no_class_links_when_labels_are_not_classes(app):
    html = get(app, "/grid")[2].decode()  # labels 1, 7, 0, 0.5, 0: not all integers
    assert 'id="class-links"' not in html and len(re.findall(r"of 5</a>", html)) == 5


def test_a_refused_config_is_a_400_saying_so(app):
    status, _, body = get(app, "/augment?" + urlencode({"config": "db: /etc/passwd"}))
    assert status == 400 and error_of(body).startswith("config refused: config key 'db' is not allowed")


@pytest.mark.parametrize("value, integral, text", [(3.0, True, "3"), (-2.0, True, "-2"), (0.5, False, "0.5"),
                                                   (float("nan"), False, "nan"), (float("inf"), False, "inf"),
                                                   (1e20, True, "100000000000000000000"), (-0.0, True, "0")])
def test_labels_as_shown(value, integral, text):
    assert _integral(value) is integral and _label_text(value) == text


def bmp_core(width: int, height: int) -> bytes:
    return b"BM" + bytes(12) + struct.pack("<IHHHH", 12, width, height, 1, 24)


@pytest.mark.parametrize("data, kind", [
    (png(PIXELS), "PNG 8x6"),
    (cv2.imencode(".jpg", PIXELS)[1].tobytes(), "JPEG 8x6"),
    (cv2.imencode(".webp", PIXELS)[1].tobytes(), "WebP 8x6"),
    (bmp_core(5, 4), "BMP 5x4"),
    (b"GIF89a" + struct.pack("<HH", 3, 2) + bytes(8), "GIF 3x2"),
    (cv2.imencode(".tif", PIXELS)[1].tobytes(), "image 8x6"),
    (b'[1, 2]', "JSON"), (b'{"a": 1}', "JSON"),
    (b"\x89PNG but no header", "bytes"), (b"", "bytes"),
])
def test_kind_names_what_a_field_holds(tmp_path, data, kind):
    with picpac.Writer(tmp_path / "db") as w:
        w.append(field=data or b"")
    with picpac.Reader(tmp_path / "db") as r:
        assert _kind(r, "field", r[0]["field"]) == kind


def test_kind_of_an_array_field(tmp_path):
    picpac.write_arrays(tmp_path / "db", np.zeros((1, 6, 5, 3), np.float32))
    with picpac.Reader(tmp_path / "db") as r:
        assert _kind(r, "image", r[0]["image"]) == "array 6x5x3 float32"


def test_the_favicon_is_a_png_the_app_serves_itself(app):
    status, headers, body = get(app, "/favicon.ico")
    icon = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert status == 200 and headers["content-type"] == "image/png" and icon.shape == (16, 16, 3)


def test_a_class_name_that_is_no_valid_unicode_is_shown_escaped(tmp_path):
    """A name with a lone surrogate (valid JSON, "\\udcff", but no UTF-8) in a file's class table: every page, picture
    and JSON answer shows it escaped, never a 500."""
    path = tmp_path / "names.picpac"
    shapes = {"shapes": [{"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "label": 1}]}
    with picpac.Writer(path, metadata={"classes": ["cat", "bad\udcff"]}) as w:
        w.append(image=png(PIXELS), annotation=json.dumps(shapes).encode(), label=1)
    built = build_app(path)
    try:
        status, _, body = get(built, "/record/0")
        assert status == 200 and "bad\\udcff" in body.decode()
        assert get(built, "/grid")[0] == 200 and get(built, "/")[0] == 200 and get(built, "/image/0.png")[0] == 200
        config = "annotate: json\ntask: detect\nbatch: 1\nresize_width: 32\nresize_height: 32\nshuffle: false"
        status, _, body = get(built, "/augment.json?" + urlencode({"config": config}))
        assert status == 200 and json.loads(body)["error"] is None
    finally:
        built.state.explorer.index.close()


def test_a_failure_is_an_escaped_page_with_the_security_headers(app, monkeypatch):
    """Starlette sends the answer to an unexpected exception past the middleware: it carries the headers itself."""
    def boom(*args, **kwargs):
        raise RuntimeError("<script>no</script>")
    monkeypatch.setattr(app.state.explorer, "overview", boom)
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "", "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
    with pytest.raises(RuntimeError):  # (re-raised after the answer is sent, for the server's log)
        asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 500 and all(headers[k.lower()] == v for k, v in HEADERS.items())
    assert error_of(body) == "RuntimeError: <script>no</script>" and "<script>no" not in body.decode()
