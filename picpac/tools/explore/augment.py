"""The explorer's live augmentation: a stream config typed into a page, checked and run through ImageStream.

The text is data, never code: it is parsed with ``json.loads`` or YAML's safe loader only (without aliases, which
expand a short text into millions of nodes; at most MAX_NODES nodes, counted while parsing), every key must be
one of the augmentation, size and split keys below (no key that names a file, such as ``db`` or
``mixin``, and none that changes how the server runs: workers, backend, dump, ...), and
StreamConfig.from_dict checks every value. The explorer then bounds the work:

* before a run (of a config not in the cache), the size of every image its steps make, from the database's
  image sizes (the overview's probe) and every size key and transform: each within ``max_pixels`` (at most
  MAX_PIXELS), and a batch of the outputs within MAX_OUTPUT_BYTES; at most MAX_SAMPLES samples;
* the run itself goes in a child process (a fresh interpreter: nothing of the server's is copied), whose
  memory is capped (RLIMIT_DATA, MAX_RUN_BYTES beyond what it holds at its start) and which is killed at
  the request's time limit (MAX_SECONDS) or as soon as the client goes away. Whatever it allocated goes
  with it; one run at a time;
* the run refuses PNGs that add up to more than MAX_OUTPUT_BYTES (the estimate does not see every size), and
  the server reads at most that much of its reply (and REPLY_MARGIN), killing it past them.

The output keys are fixed (uint8, NHWC, RGB), so each served PNG holds exactly the stream's pixels for
that config and seed. Beside it, each sample is served drawn: its annotations (masks, shapes with their classes,
keypoints) and its label over it, as `picpac dump` draws them."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import resource
import selectors
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import yaml

from ...errors import PicPacError, PicPacValueError, closest
from ...image.transforms import Crop, LimitSize, Resize, RoundSize, Sample
from ...stream.config import KEYS, LEGACY, StreamConfig
from ...stream.image_stream import ImageStream
from ...stream.processor import Processor
from ..drawing import class_name
from ..dump import annotated_config, drawn_samples, names_annotations, shape_labels
from .thumbnails import LRUBytes

MAX_TEXT = 20_000
MAX_SAMPLES = 32
MAX_PIXELS = 2**24
MAX_OUTPUT_BYTES = 256 << 20
"""A run's outputs: the estimate refuses a batch of more (4 bytes a pixel), the run PNGs that add up to more."""
REPLY_MARGIN = 1 << 20
"""What a run's reply holds beyond its PNGs (labels and sizes, pickled): the server reads no more than both."""
STDERR_TAIL = 4096
"""The bytes of a run's stderr the server keeps (the last ones): its last line names why it ended."""
MAX_DEPTH = 8
MAX_NODES = 2_000
"""The most values (mappings, lists and scalars) a config may hold: what a page's text parses to is bounded before any
work."""
MAX_SECONDS = 30.0
"""A run's time limit: past it, its process is killed."""
MAX_RUN_BYTES = 2 << 30
"""The memory a run's process may allocate beyond what it holds when it starts."""
START_BYTES = 1 << 30
"""What a run's process is taken to hold at its start where /proc does not say."""
RUN_THREADS = 2
"""OpenCV's threads in a run's process (each thread's stack counts in its memory cap)."""
LOCK_WAIT = 30.0
"""How long a request waits for the run before it to end."""
_POLL = 0.05

DEFAULT_CONFIG = """\
seed: 2016
batch: 8
resize_width: 160
resize_height: 160
perturb: true
pert_hflip: true
pert_angle: 15
pert_min_scale: 0.8
pert_max_scale: 1.2
pert_color1: 20
"""

ALLOWED = frozenset({
    "seed", "batch", "shuffle", "reshuffle", "split", "split_fold", "split_negate", "stratify", "oversample",
    "channels", "reduced_decode", "region_decode", "fused", "max_pixels", "resize_width", "resize_height",
    "resize_shorter", "min_size",
    "max_size", "crop_width", "crop_height", "round_div", "round_mod", "perturb", "pert_color1", "pert_color2",
    "pert_color3", "pert_colorspace", "pert_angle", "pert_min_scale", "pert_max_scale", "pert_hflip",
    "pert_vflip", "pert_border", "transforms", "annotate", "anno_type", "anno_min_ratio", "point_radius",
    "anno_color1", "anno_color2", "anno_color3", "anno_thickness", "anno_copy", "task", "min_box_area",
    "max_boxes", "image_field", "annotation_field"})
"""The keys a page's config may hold: what a sample looks like, never where data comes from or how the server runs."""
FIXED = {"dtype": "uint8", "order": "NHWC", "colorspace": "RGB", "loop": False, "pad": False, "workers": 2,
         "backend": "thread", "mean": None, "std": None, "onehot": 0, "cache": False, "dump": 0}
"""What the explorer sets itself: the output layout of the served PNGs and a small worker pool."""
_PATH_WORDS = ("path", "file", "dir", "db", "mixin", "url")


class ConfigRefused(PicPacValueError):
    """A page's config that the explorer does not run; the message says why."""


class _BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing aliases (``*name``: each repeats what its anchor holds, so a few KB expand to
    millions of nodes) and any node past MAX_NODES, as it composes them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise ConfigRefused("the config uses a YAML alias (*name); the explorer does not expand them: write the "
                                "value out")
        self.nodes = getattr(self, "nodes", 0) + 1
        if self.nodes > MAX_NODES:
            raise ConfigRefused(f"the config holds more than {MAX_NODES:,} values; the explorer runs smaller ones")
        return super().compose_node(parent, index)


def _count_values(value: Any) -> int:
    """The mappings, lists and scalars in ``value`` (walked without recursion)."""
    count, pending = 0, [value]
    while pending and count <= MAX_NODES:
        item = pending.pop()
        count += 1
        if isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count


def parse_text(text: str) -> dict[str, Any]:
    """The mapping a page's config text holds (JSON when it starts with ``{``, else YAML without aliases), after the
    bounds on its length and its count of values; ConfigRefused otherwise. Its keys and values are not checked yet."""
    if len(text) > MAX_TEXT:
        raise ConfigRefused(f"the config is {len(text):,} characters long; at most {MAX_TEXT:,} are accepted")
    try:
        value = json.loads(text) if text.lstrip().startswith("{") else yaml.load(text, _BoundedLoader)
    except ConfigRefused:
        raise
    except RecursionError:
        raise ConfigRefused("the config is nested too deeply") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigRefused(f"the config is neither JSON nor YAML: {str(exc).splitlines()[0][:200]}") from None
    if _count_values(value) > MAX_NODES:
        raise ConfigRefused(f"the config holds more than {MAX_NODES:,} values; the explorer runs smaller ones")
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigRefused(f"the config must be a mapping of keys to values, got {type(value).__name__}")
    return dict(value)


def load_config(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the config a page's text gives, with FIXED; every key of it parsed), after every check; ConfigRefused or
    another PicPacError otherwise."""
    config = parse_text(text)
    for key in config:
        if not isinstance(key, str):
            raise ConfigRefused(f"config keys must be strings, got {key!r:.80}")
        if key not in ALLOWED:
            close = closest(key, ALLOWED)
            if close is not None and key not in KEYS and key not in LEGACY:  # a typo, not a key the explorer refuses
                raise ConfigRefused(f"unknown config key {key[:80]!r}; did you mean {close!r}?")
            why = ("it names a file or a database" if any(w in key.lower() for w in _PATH_WORDS)
                   else "it is not an augmentation, size or split key")
            raise ConfigRefused(f"config key {key[:80]!r} is not allowed in the explorer ({why}); allowed: "
                                + ", ".join(sorted(ALLOWED)))
    _check_nested(config.get("transforms"), "transforms", 0)
    config.setdefault("batch", 8)
    if config["batch"] is True or not isinstance(config["batch"], int) or not 1 <= config["batch"] <= MAX_SAMPLES:
        raise ConfigRefused(f"config key 'batch' (the samples shown) must be an int in [1, {MAX_SAMPLES}], "
                            f"got {config['batch']!r:.40}")
    pixels = config.setdefault("max_pixels", MAX_PIXELS)
    if pixels is True or not isinstance(pixels, int) or not 1 <= pixels <= MAX_PIXELS:
        raise ConfigRefused(f"config key 'max_pixels' must be an int in [1, {MAX_PIXELS:,}] in the explorer, "
                            f"got {pixels!r:.40}")
    config.update(FIXED)
    return config, StreamConfig.from_dict(config)


_SIZE_KEYS = {LimitSize: ("min_size", "max_size"), Resize: ("resize_width", "resize_height", "resize_shorter"),
              Crop: ("crop_width", "crop_height"), RoundSize: ("round_div", "round_mod")}
"""The config keys of the steps the stream builds from size keys (the other steps it builds keep the size)."""


class _NoPixels(Exception):
    """A step of the dry run read the pixels, which it has not."""


def _no_pixels(reduction: int, region: Any) -> None:
    raise _NoPixels


def check_cost(c: StreamConfig, sizes: list[tuple[int, int]]) -> None:
    """ConfigRefused when a run of the parsed config ``c`` on images of these ``sizes`` (width, height) would
    make an image of more than ``max_pixels`` at any step, or a batch of more than MAX_OUTPUT_BYTES.

    Each size goes through the run's steps without pixels (a Sample of that size with no image): the geometry
    of every step that changes the size is exact (resize keys with one side scale the other by the image's
    aspect ratio; crop, pad and scale steps; ``transforms``), random ones at one draw; a step that reads pixels
    leaves the size as it is. Without sizes, an output size the config fixes is checked."""
    processor = Processor.of(c)
    steps = processor.fixed + processor.random
    transforms = {id(step) for step in processor.transforms}
    names = []
    for step in steps:
        keys = [] if id(step) in transforms else [key for key in _SIZE_KEYS.get(type(step), ()) if c[key]]
        names.append(f"config key {' and '.join(map(repr, keys))}" if keys else f"config key 'transforms' ({step!r})")
    peak = None  # (pixels, the step's name, the database's size, the size the step made)
    output = 0
    limit, a = c.decode.max_pixels, c.augment
    for width, height in sorted(set(sizes)):
        if limit and width * height > limit:
            continue  # the stream refuses such an image before any step
        sample = Sample(None, 0.0, 0, size=(width, height), decoder=_no_pixels)
        rng = np.random.default_rng(c.order.seed)
        for name, step in zip(names, steps):
            before = sample.size
            try:
                sample = step(sample, rng)
            except Exception:  # _NoPixels, or a step that needs what a dry run lacks: the run itself tells
                pass
            w, h = sample.size
            if sample.size != before and (peak is None or w * h > peak[0]):
                peak = (w * h, name, (width, height), (w, h))
        output = max(output, sample.size[0] * sample.size[1])
    if peak is not None and peak[0] > limit:
        pixels, name, (width, height), (w, h) = peak
        raise ConfigRefused(f"{name} makes the database's {width}x{height} images {w}x{h} ({pixels:,} pixels), "
                            f"more than max_pixels={limit:,} (the explorer's bound on every image a run "
                            "makes); lower it")
    fixed = (a.crop_width or a.resize_width, a.crop_height or a.resize_height)
    if not sizes and all(fixed):
        output = fixed[0] * fixed[1]
    if c.order.batch * output * 4 > MAX_OUTPUT_BYTES:
        raise ConfigRefused(f"{c.order.batch} samples of up to {output:,} pixels are more than the explorer's "
                            f"{MAX_OUTPUT_BYTES >> 20} MiB per run; lower 'batch' or the size")


def _check_nested(value: Any, where: str, depth: int) -> None:
    """Transform dicts hold numbers, strings, lists and dicts, no key naming a file, nested at most MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise ConfigRefused(f"config key {where!r} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or any(w in key.lower() for w in _PATH_WORDS):
                raise ConfigRefused(f"config key {where!r}: key {str(key)[:80]!r} is not allowed in the explorer "
                                    "(it names a file)")
            _check_nested(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_nested(item, where, depth + 1)


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:20]


class RunStopped(PicPacError):
    """A run that ended without its answer (its time limit, its reply's size, its process's end): not a refused
    config; the message says why."""


class Abandoned(RunStopped):
    """The client went away before its run ended: the run was stopped."""


class RunFailed(Exception):
    """The stream failed inside the run (not a PicPacError): its message."""


@dataclass(frozen=True)
class Names:
    """What a run needs to know of its database to draw a sample: its fields (to read the annotations it has),
    its class names and what they name (info.what_classes_name: "labels", "shapes" or "masks")."""

    fields: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    classes_of: str = "labels"


class Augmenter:
    """Runs configs on one database, one at a time, each in a child process bounded in time and memory, and
    keeps the PNGs of recent runs (bounded). ``sizes``: the database's image sizes (a sample), for the
    estimate of a run's cost; ``seconds``: a run's time limit; ``names``: what the drawn samples need."""

    def __init__(self, path: str, sizes: Callable[[], list[tuple[int, int]]], seconds: float = MAX_SECONDS,
                 keys: dict[str, Any] | None = None, names: Names = Names()):
        self.path, self.sizes, self.seconds, self.names = path, sizes, seconds, names
        self.keys = keys or {}
        """Stream keys every run takes, whatever a page asks (how to read a database on object storage)."""
        self.cache = LRUBytes(MAX_OUTPUT_BYTES)
        self.started = 0
        """The run processes started so far."""
        self._runs: dict[str, list[dict[str, Any]]] = {}
        self._lock = asyncio.Lock()

    async def run(self, text: str, gone: Callable[[], Awaitable[bool]]) -> tuple[str, list[dict[str, Any]]]:
        """(digest, samples) for a page's config text; each sample: its index k, label, the classes of its shapes
        (text), PNG size. ``gone``: whether the client went away (the run then stops: Abandoned)."""
        config, parsed = await asyncio.to_thread(load_config, text)
        digest = config_digest(config)
        if digest in self._runs and all(self.cache.get((digest, s["k"], drawn)) for s in self._runs[digest]
                                        for drawn in (False, True)):
            return digest, self._runs[digest]
        await asyncio.to_thread(lambda: check_cost(parsed, self.sizes()))
        try:
            await asyncio.wait_for(self._lock.acquire(), LOCK_WAIT)
        except TimeoutError:
            raise PicPacError("the explorer is busy with another augmentation run; try again") from None
        try:
            outputs = await self._in_child(config, gone)
        finally:
            self._lock.release()
        samples = []
        for k, output in enumerate(outputs):
            self.cache.put((digest, k, False), output.pop("png"))
            self.cache.put((digest, k, True), output.pop("drawn"))
            samples.append({"k": k, **output})
        if len(self._runs) > 64:
            self._runs.clear()
        self._runs[digest] = samples
        return digest, samples

    async def _in_child(self, config: dict[str, Any], gone: Callable[[], Awaitable[bool]]) -> list[tuple]:
        """The run's outputs from a child process, killed at the time limit or when the client is gone."""
        process = subprocess.Popen([sys.executable, "-c", f"from {__name__} import child; child()"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.started += 1
        message = pickle.dumps((self.path, {**config, **self.keys}, MAX_RUN_BYTES, MAX_OUTPUT_BYTES,
                                self.names))
        answer = asyncio.ensure_future(asyncio.to_thread(exchange, process, message,
                                                         MAX_OUTPUT_BYTES + REPLY_MARGIN))
        try:
            deadline = time.monotonic() + self.seconds
            while not answer.done():
                if time.monotonic() > deadline:
                    raise RunStopped(f"the run took longer than the explorer's time limit of {self.seconds:g} s a "
                                     "run, so it was stopped; make it cheaper (fewer or smaller steps, a smaller "
                                     "'batch' or size)")
                if await gone():
                    raise Abandoned("the client went away, so its run was stopped")
                await asyncio.wait({answer}, timeout=_POLL)
            out, err = answer.result()
        finally:
            if process.poll() is None:
                process.kill()
            await asyncio.wait({answer})  # the exchange ends with the process
        try:
            kind, value = pickle.loads(out)
        except Exception:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            why = f": {lines[-1][:500]}" if lines else \
                f" (over the explorer's memory limit of {MAX_RUN_BYTES >> 20:,} MiB a run?)"
            raise RunStopped(f"the run's process ended with exit code {process.returncode} and no answer{why}") \
                from None
        if kind == "refused":
            raise PicPacError(value)
        if kind == "failed":
            raise RunFailed(value)
        return value

    def png(self, digest: str, k: int, drawn: bool = False) -> bytes | None:
        """Sample ``k`` of run ``digest``: the stream's pixels, or ``drawn``; None when it is not in the cache."""
        return self.cache.get((digest, k, drawn))


def exchange(process: subprocess.Popen, message: bytes, limit: int) -> tuple[bytearray, bytes]:
    """(stdout, the last STDERR_TAIL bytes of stderr) of ``process`` once it ends, ``message`` written to its
    stdin: communicate() with a bound, for the process is killed as soon as its stdout passes ``limit`` bytes
    (RunStopped)."""
    with process:  # closes the pipes and waits for the process, however this ends
        try:
            process.stdin.write(message)
            process.stdin.close()
        except BrokenPipeError:  # it ended before it read: its stderr says why
            pass
        out, err = bytearray(), b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stderr:
                        err = (err + chunk)[-STDERR_TAIL:]
                    else:
                        out += chunk
                        if len(out) > limit:
                            process.kill()
                            raise RunStopped(f"the run's reply passed {limit:,} bytes (the explorer's bound on a "
                                             "run's PNGs and their labels), so it was stopped; lower 'batch' or "
                                             "the size")
    return out, err  # not copied: it may hold MAX_OUTPUT_BYTES


def _limit_memory(extra: int, status: str = "/proc/self/status") -> None:
    """Cap this process's data (heap and private maps: every array) at what it holds now (VmData of ``status``;
    START_BYTES where that is not there) plus ``extra``."""
    try:
        with open(status) as f:
            held = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    except (OSError, StopIteration):
        held = START_BYTES
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = held + extra if hard == resource.RLIM_INFINITY else min(held + extra, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def child() -> None:
    """A run's process: reads (path, config, memory, output bytes, Names) pickled from stdin and writes the pickled
    reply to stdout: ("ok", [{png, drawn, label, shapes, width, height}, ...]) for the first batch of ``config``
    (``png``: the sample's pixels, ``drawn``: with its annotations drawn, ``shapes``: their classes as text),
    ("refused", message) for a PicPacError or PNGs of more than ``output`` bytes, ("failed", message) for anything
    else."""
    path, config, memory, output, names = pickle.load(sys.stdin.buffer)
    out, sys.stdout = sys.stdout.buffer, sys.stderr  # stdout carries the reply alone
    try:
        cv2.setNumThreads(RUN_THREADS)
        _limit_memory(memory)
        with ImageStream(path, **annotated_config(config, names.fields)) as stream:
            batch = next(iter(stream))
            c = stream.config
        classes = list(names.classes)
        drawn = drawn_samples(batch, c, classes, names.classes_of, shape_masks=names_annotations(config))
        table = batch[len(batch) - 2 - len(c.decode.raw)]
        outputs, total = [], 0
        for k, (image, (picture, _, label)) in enumerate(zip(np.asarray(batch[0]), drawn)):
            png, drawn_png = encode_png(image), cv2.imencode(".png", picture)[1].tobytes()
            total += len(png) + len(drawn_png)
            if total > output:
                raise PicPacError(f"the run's PNGs add up to {total:,} bytes after {k + 1} of "
                                  f"{len(drawn)} samples, more than the explorer's {output >> 20:,} MiB per run; "
                                  "lower 'batch' or the size (the estimate before a run does not see a size step "
                                  "after a pixel step inside sometimes, some_of or one_of)")
            shapes = shape_caption(shape_labels(table[k, 1:]), classes if names.classes_of == "shapes" else [])
            outputs.append({"png": png, "drawn": drawn_png, "label": label, "shapes": shapes,
                            "width": image.shape[1], "height": image.shape[0]})
        reply: tuple[str, Any] = ("ok", outputs)
    except Exception as exc:
        text = str(exc) if isinstance(exc, PicPacError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, MemoryError) or "Insufficient memory" in text:
            text += f" (the run is over the explorer's memory limit of {memory >> 20:,} MiB)"
        reply = ("refused" if isinstance(exc, PicPacError) else "failed", text)
    out.write(pickle.dumps(reply))
    out.flush()


def shape_caption(labels: np.ndarray, classes: list[str], most: int = 6) -> str:
    """The classes of a sample's shapes as text, the commonest first: "3 shapes: 0 person x2, 16 dog"."""
    if not len(labels):
        return ""
    values, counts = np.unique(labels, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:most]
    named = [class_name(float(values[i]), classes) + (f" x{counts[i]}" if counts[i] > 1 else "") for i in order]
    more = ", ..." if len(values) > most else ""
    return f"{len(labels)} shape{'s' if len(labels) > 1 else ''}: {', '.join(named)}{more}"


def encode_png(image: np.ndarray) -> bytes:
    """An (H, W, C) uint8 RGB(A) or gray sample as PNG, pixel for pixel."""
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    elif image.ndim == 3 and image.shape[2] == 3:
        image = image[:, :, ::-1]
    elif image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, [2, 1, 0, 3]]
    return cv2.imencode(".png", np.ascontiguousarray(image))[1].tobytes()
