"""The explorer's routes (Starlette). Read-only: every route is GET and serves a page or a picture made from
the one database; no URL holds a file path (record ids are ints checked against the record count, run
digests hex), so anything else is a 404. Errors are shown as escaped one-line messages, never tracebacks."""
from __future__ import annotations

import json
import math
import os
import pathlib
import re
import threading
from typing import Any
from urllib.parse import urlencode

import cv2
import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ...errors import CorruptRecordError, PicPacError
from ...file.layout import NO_GROUP
from ...file.remote import RemoteOptions
from ...image.headers import image_size
from .. import info as info_module
from .augment import DEFAULT_CONFIG, MAX_SECONDS, Augmenter, Names, RunFailed, RunStopped
from .controls import CONTROLS, MAX_FOLD_LINKS, control_values, edit_config, fold_links, parse_updates, reroll
from .index import MAX_SCAN, DbIndex, parse_filter
from .overview import bars, overview, probe_sizes
from .pages import render
from .thumbnails import LRUBytes, NoImage, annotated, thumbnail

PER_PAGE = 60
MAX_PER_PAGE = 500
MAX_TEXT_SHOWN = 20_000
MAX_CLASS_LINKS = 100
"""The grid links to the first this many labels (the label filter takes any)."""
GRID_FOLDS = 5
"""The folds the grid links to while it shows no split."""
SCRIPT = (pathlib.Path(__file__).parent / "static" / "explore.js").read_bytes()
"""The one script the pages load (the augmentation page's controls), served by the app itself."""
_DIGEST = re.compile(r"[0-9a-f]{20}")
ICON = cv2.imencode(".png", np.kron(np.eye(2, dtype=np.uint8), np.ones((8, 8), np.uint8))[:, :, None]
                    * np.array([204, 131, 79], np.uint8))[1].tobytes()
"""/favicon.ico: 16x16, two squares in the pages' blue (a browser asks for it; without it, its console shows a 404)."""
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self'; "
                               "style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _SecurityHeaders:
    """Adds HEADERS to every response (pages, pictures, 404s)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      *[(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]]
            await send(message)

        await self.app(scope, receive, sending)


class _JSON(JSONResponse):
    """JSON with every non-ASCII character escaped: text that is no valid Unicode (a name with lone surrogates, from a
    file's JSON) stays valid JSON instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


class Explorer:
    """The state one server shares: the database's index, the caches, the augmenter."""

    def __init__(self, path: str | os.PathLike, augment_seconds: float = MAX_SECONDS,
                 remote: RemoteOptions | None = None):
        self.index = DbIndex(os.fspath(path), remote)
        self.reader = self.index.reader
        self.name = os.path.basename(self.reader.path)
        self.thumbs = LRUBytes()
        storage = {"storage_options": remote.storage_options} if remote is not None else {}
        self.classes_of = info_module.what_classes_name(self.reader.metadata.get("source"))
        names = Names(tuple(self.reader.fields), tuple(self.reader.classes), self.classes_of)
        self.annotated = bool({"annotation", "mask"} & set(self.reader.fields))
        """Whether the records have annotations to draw (the augmentation page then draws them by default)."""
        self.augmenter = Augmenter(self.reader.path, lambda: self.sizes()["sizes"], augment_seconds, storage, names)
        self._overview: dict[str, Any] | None = None
        self._sizes: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def sizes(self) -> dict[str, Any]:
        """The image sizes of a sample of the records (overview.probe_sizes), probed once."""
        with self._lock:
            if self._sizes is None:
                self._sizes = probe_sizes(self.reader)
            return self._sizes

    def overview(self) -> dict[str, Any]:
        sizes = self.sizes()
        with self._lock:
            if self._overview is None:
                self._overview = overview(self.index, sizes)
            return self._overview

    def class_links(self) -> list[dict[str, Any]]:
        """The grid's class links: each label of the records (the first MAX_CLASS_LINKS), its name and count."""
        classes = self.reader.classes if self.classes_of == "labels" else []
        return [{"label": str(int(v)), "name": classes[int(v)] if 0 <= v < len(classes) else "", "count": int(n)}
                for v, n in zip(self.index.label_values[:MAX_CLASS_LINKS], self.index.label_counts)]

    def record_id(self, request: Request) -> int:
        i = request.path_params["i"]
        if not 0 <= i < len(self.reader):
            raise HTTPException(404)
        return i

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        """A page as UTF-8; text that is no valid Unicode (a name with lone surrogates, from a file's JSON) escaped
        (``\\udcff``) rather than failing the page."""
        html = render(name, db_name=self.name, **values)
        return HTMLResponse(html.encode("utf-8", "backslashreplace"), status_code=status)


def _integral(value: float) -> bool:
    return math.isfinite(value) and value == int(value)


def _label_text(value: float) -> str:
    """``3`` for an integral label, else the float as Python writes it (``0.5``, ``nan``, ``inf``)."""
    return str(int(value)) if _integral(value) else repr(value)


def build_app(path: str | os.PathLike, *, allowed_hosts: list[str] | None = None,
              augment_seconds: float = MAX_SECONDS, remote: RemoteOptions | None = None) -> Starlette:
    """The explorer's ASGI app for the database at ``path`` (a file, a URL read with ``remote``'s options, or
    shards); ``allowed_hosts``: the Host headers it answers (a guard against DNS rebinding; None: any);
    ``augment_seconds``: an augmentation run's time limit."""
    ex = Explorer(path, augment_seconds, remote)

    def home(request: Request) -> Response:
        q = request.query_params
        split_text, seed_text = q.get("split", "5"), q.get("seed", "2016")
        d = ex.overview()
        error = None
        try:
            f = parse_filter({"split": split_text, "seed": seed_text})
            split = max(f.split, 1)
            folds = ex.index.fold_counts(split, f.seed)
        except PicPacError as exc:
            error, split, folds, f = str(exc), 5, ex.index.fold_counts(5), parse_filter({})
        counts = bars(d["labels"]["counts"]) if d["labels"]["integral"] else []
        shapes = bars(d["shapes"]["counts"]) if d["shapes"] else []
        return ex.page("overview", d=d, labels=counts, shapes=shapes, folds=folds, split=split, seed=f.seed,
                       error=error)

    def grid(request: Request) -> Response:
        q = dict(request.query_params)
        shown = {k: q.get(k, "") for k in ("label", "split", "fold", "seed", "meta")}
        per_text = q.get("per", str(PER_PAGE))
        per = int(per_text) if per_text.isdigit() and 1 <= int(per_text) <= MAX_PER_PAGE else PER_PAGE
        start_text = q.get("start", "0")
        start = int(start_text) if start_text.isdigit() and int(start_text) < 2**62 else 0
        error, ids, total, after = None, [], None, None
        try:
            f = parse_filter(q)
            ids, after, total = ex.index.page(f, start, per)
        except PicPacError as exc:
            error = str(exc)

        def link(position: int) -> str:
            return urlencode({**{k: v for k, v in shown.items() if v}, "per": per, "start": position})

        def filtered(**changes: str) -> str:
            return urlencode({**{k: v for k, v in {**shown, **changes}.items() if v}, "per": per})

        previous = max(start - per, 0) if start > 0 and total is not None else None
        labels = [_label_text(ex.index.labels.item(i)) for i in ids]
        folds = int(shown["split"]) if shown["split"].isdigit() and int(shown["split"]) > 1 else GRID_FOLDS
        return ex.page("grid", q=shown, per=per, ids=ids, labels=labels, total=total, start=start, next=after,
                       prev=previous, link=link, max_scan=MAX_SCAN, error=error, filtered=filtered,
                       classes=ex.class_links(), folds=min(folds, MAX_FOLD_LINKS), split=folds)

    def record(request: Request) -> Response:
        i = ex.record_id(request)
        reader = ex.reader
        entry = reader.index[i]
        group, label = int(entry["group"]), float(entry["label"])
        info = {"label": _label_text(label), "name": None, "group": None if group == NO_GROUP else group,
                "offset": int(entry["offset"]), "size": int(entry["size"]), "checksum": f"{int(entry['checksum']):08x}",
                "fields": [], "meta": "", "annotation": None}
        classes = reader.classes
        if ex.classes_of == "labels" and _integral(label) \
                and 0 <= label < len(classes):
            info["name"] = classes[int(label)] or None
        error = None
        try:
            rec = reader.read(i, check=True)
            info["meta"] = json.dumps(rec.meta, indent=2, ensure_ascii=False, sort_keys=True)
            for name, view in rec.fields.items():
                info["fields"].append({"name": name, "bytes": view.nbytes, "kind": _kind(reader, name, view)})
            if "annotation" in rec and bytes(rec["annotation"][:1]) in (b"{", b"["):
                text = bytes(rec["annotation"][:MAX_TEXT_SHOWN]).decode("utf-8", "replace")
                info["annotation"] = text + (" ..." if rec["annotation"].nbytes > MAX_TEXT_SHOWN else "")
        except (CorruptRecordError, ValueError) as exc:
            error = f"record {i} is damaged: {exc}"
        return ex.page("record", i=i, n=len(reader), r=info, error=error)

    def thumb(request: Request) -> Response:
        i = ex.record_id(request)
        try:
            return Response(thumbnail(ex.reader, i, ex.thumbs), media_type="image/jpeg")
        except (NoImage, PicPacError, ValueError):
            raise HTTPException(404) from None

    def image(request: Request) -> Response:
        i = ex.record_id(request)
        try:
            return Response(annotated(ex.reader, i), media_type="image/png")
        except (NoImage, PicPacError, ValueError):
            raise HTTPException(404) from None

    async def attempt(request: Request) -> tuple[int, dict[str, Any]]:
        """A request's run: its config text (``config``, else the default) with its edit (``set``, a JSON object)
        and re-roll (``reroll=1``) made; (status, what the page shows)."""
        q = request.query_params
        text = q.get("config", DEFAULT_CONFIG)
        error, digest, samples = None, "", []
        try:
            updates = parse_updates(q["set"]) if "set" in q else {}
            if q.get("reroll") == "1":
                updates.update(reroll())
            if updates:
                text = edit_config(text, updates)
            digest, samples = await ex.augmenter.run(text, request.is_disconnected)
        except RunStopped as exc:  # a run that ended without its answer: not a refused config
            error = str(exc)
        except PicPacError as exc:
            error = f"config refused: {exc}"
        except RunFailed as exc:  # a failure inside the stream: its message, never a traceback
            error = f"the stream failed: {exc}"
        except Exception as exc:
            error = f"the stream failed: {type(exc).__name__}: {exc}"
        samples = [{**s, "label": _label_text(s["label"])} for s in samples]
        return (200 if error is None else 400), _shown(text, digest, samples, error)

    async def augment(request: Request) -> Response:
        q = request.query_params
        draw = q["draw"] == "1" if "draw" in q else ex.annotated
        status, shown = await attempt(request) if {"config", "set", "reroll"} & set(q) else (200, _shown(DEFAULT_CONFIG))
        return ex.page("augment", status=status, text=shown.pop("config"), **shown, controls=CONTROLS, draw=draw,
                       json=json.dumps)

    async def augment_json(request: Request) -> Response:
        status, shown = await attempt(request)
        return _JSON(shown, status_code=status)

    def augment_png(drawn: bool) -> Any:
        def png(request: Request) -> Response:
            digest, k = request.path_params["digest"], request.path_params["k"]
            data = ex.augmenter.png(digest, k, drawn) if _DIGEST.fullmatch(digest) else None
            if data is None:
                raise HTTPException(404)
            return Response(data, media_type="image/png")
        return png

    def script(request: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript")

    def icon(request: Request) -> Response:
        return Response(ICON, media_type="image/png")

    async def not_found(request: Request, exc: Exception) -> Response:
        return ex.page("not_found", status=404)

    async def failed(request: Request, exc: Exception) -> Response:
        """Any other failure: one escaped line, never a traceback, with the headers every page has (Starlette sends
        this answer past the middleware)."""
        response = ex.page("failed", status=500, error=f"{type(exc).__name__}: {exc}"[:500])
        response.headers.update(HEADERS)
        return response

    routes = [Route("/", home), Route("/grid", grid), Route("/record/{i:int}", record),
              Route("/thumb/{i:int}.jpg", thumb), Route("/image/{i:int}.png", image),
              Route("/augment", augment), Route("/augment.json", augment_json),
              Route("/augment/{digest:str}/{k:int}.png", augment_png(False)),
              Route("/augment/{digest:str}/{k:int}-drawn.png", augment_png(True)), Route("/static/explore.js", script),
              Route("/favicon.ico", icon)]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={404: not_found, 405: not_found, Exception: failed})
    app.state.explorer = ex
    return app


def _shown(text: str, digest: str = "", samples: list[dict[str, Any]] | None = None,
           error: str | None = None) -> dict[str, Any]:
    """What the augmentation page shows of a config text and its run (also /augment.json's answer)."""
    return {"config": text, "values": control_values(text), "folds": fold_links(text), "digest": digest,
            "samples": samples or [], "error": error}


def _kind(reader: Any, name: str, view: memoryview) -> str:
    """What a field holds: an array, an image (format, width x height), JSON, or bytes."""
    if name in reader.arrays:
        spec = reader.arrays[name]
        return f"array {'x'.join(map(str, spec.shape))} {spec.dtype.name}"
    head = bytes(view[:8])
    size = image_size(view)
    formats = {b"\xff\xd8": "JPEG", b"\x89P": "PNG", b"BM": "BMP", b"GI": "GIF", b"RI": "WebP"}
    if size is not None:
        return f"{formats.get(head[:2], 'image')} {size[0]}x{size[1]}"
    if head[:1] in (b"{", b"["):
        return "JSON"
    return "bytes"
