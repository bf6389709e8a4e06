"""picpac.ImageStream against PyTorch DataLoaders and the one-core ceiling (issue 5, items 1-2).

Data: ../shared/data/imagenet-250 (250 ImageNet JPEGs, about 500x375) repeated to --samples
(default 2,000); with --large, the same images upscaled 4x (cv2.INTER_CUBIC) and re-encoded once at
JPEG quality 90 (about 2000x1500) into a temporary folder, where only the ceiling and picpac run by
default (--contenders picks others). The shared folder is only read.

Workloads (every image uint8, batches of 64):
  W1 train: decode -> RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) -> random h-flip
  W2 val:   decode -> resize the shorter side to 256 -> centre crop 224

Contenders, interleaved in every repeat so background load hits them alike; medians of --repeats:
  (a) ceiling: one plain Python loop on one core, cv2.imdecode + the transform in cv2, bytes in memory
  (b) torch DataLoader(num_workers=2, batch_size=64), a Dataset reading the files with PIL + PIL transforms
  (c) the same DataLoader, reading the files with cv2 + the cv2 transforms of (a)
  (d) picpac.ImageStream(threads=2, dtype="uint8", order="NHWC", colorspace="BGR"), transforms
      [RandomResizedCrop(224, 224), Flip(horizontal=0.5)] / [Resize(shorter=256), CenterCrop(224, 224)]
  (f) a thread pool: concurrent.futures.ThreadPoolExecutor(2) mapping cv2.imdecode + the transform of (a) over the
      bytes in memory, in order, stacked into batches of 64 (what a Grain or tf.data pipeline of cv2 calls does)
  (h) (f) with every resize cv2.INTER_LINEAR (the cheapest cv2 transform; picpac's W2 is bilinear too, one warp)
  (g) (d) with fused=False: the Python path (picpac's kernels, no fused C call)

A rate is samples / wall time of one full pass, from creating the DataLoader or ImageStream to its
last batch: DataLoader workers (persistent_workers=False) start afresh every epoch and that cost is
counted, as users see it. Targets: picpac >= 0.9 x (2 x ceiling), >= 1.1 x (c), >= 1.6 x (b).
After the timings, one picpac W1 pass runs under cProfile (every worker thread) and the top 10
functions by own time are printed (--no-profile skips it).

torch and Pillow are not picpac dependencies: pip install torch==2.13.0 pillow (exit 2 without them).

    python benchmarks/loaders.py [--samples 2000] [--repeats 3] [--large] [--contenders ...] [--no-profile]
                                 [--baseline CHECKOUT] [--one-core] [--fresh]

--fresh runs every measurement of (a), (d), (e), (f), (g) and (h) in a fresh interpreter (one pass to warm up, then the
timed pass), so that no measurement inherits another's heap, threads or caches.

--one-core prints only issue 27's line instead: one-core cv2.imdecode + cv2.resize to 224x224 against
ImageStream(threads=1 and 2, resize 224x224, uint8) on the fused C path and on the Python path (fused=False).

--baseline CHECKOUT adds (e): the same picpac pass with the picpac package of another checkout (say a git
worktree of an earlier commit, its extension built or copied in place), interleaved with the others over the
same database; the results print (d) / (e), the change between the two commits. Then (d) and (e) both run in
a child interpreter that imports the checkout's picpac and times its second pass (the first warms it up).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import io
import math
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

import picpac
from picpac.transforms import CenterCrop, Flip, RandomResizedCrop, Resize

try:
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset
except ImportError as _exc:  # reported by main(): the module itself stays importable
    torch = Image = DataLoader = None
    Dataset = object
    _MISSING: ImportError | None = _exc
else:
    _MISSING = None

DATA = Path(os.environ.get("PICPAC_BENCH_DATA") or
            Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250")
"""The 250 JPEGs; PICPAC_BENCH_DATA names a copy where ../shared is not beside the checkout (a GPU machine)."""
SIZE, SHORTER, BATCH, WORKERS = 224, 256, 64, 2
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
WORKLOADS = {
    "W1": "W1 train: decode -> RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) -> h-flip p=0.5 -> batch 64 uint8",
    "W2": "W2 val: decode -> resize shorter side 256 -> centre crop 224 -> batch 64 uint8",
}
CONTENDERS = {
    "ceiling": "(a) ceiling: 1-core cv2 loop, bytes in memory",
    "pil": "(b) DataLoader(num_workers=2) + PIL",
    "cv2": "(c) DataLoader(num_workers=2) + cv2",
    "picpac": "(d) picpac ImageStream(threads=2)",
    "baseline": "(e) (d) with --baseline's picpac",
    "pool": "(f) ThreadPoolExecutor(2) + cv2",
    "pool-linear": "(h) (f) with INTER_LINEAR",
    "python": "(g) (d) with fused=False",
}
TARGETS = [("ceiling", 2.0, 0.9, "picpac / (2 x ceiling)"), ("cv2", 1.0, 1.1, "picpac / (c) DataLoader+cv2"),
           ("pil", 1.0, 1.6, "picpac / (b) DataLoader+PIL"), ("pool", 1.0, 1.15, "picpac / (f) thread pool + cv2"),
           ("pool-linear", 1.0, 1.15, "picpac / (h) thread pool, INTER_LINEAR"),
           ("python", 1.0, 1.0, "picpac / (g) fused=False"), ("baseline", 1.0, 0.97, "picpac / (e) --baseline")]


# -- torchvision's RandomResizedCrop window, shared by every non-picpac contender -----------------
def rrc_window(w: int, h: int, rng: random.Random | Any) -> tuple[int, int, int, int]:
    """(x, y, width, height) of the crop, drawn as torchvision's RandomResizedCrop.get_params does."""
    area = w * h
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    aspect = w / h
    if aspect < min(RATIO):
        cw, ch = w, int(round(w / min(RATIO)))
    elif aspect > max(RATIO):
        cw, ch = int(round(h * max(RATIO))), h
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def shorter_size(w: int, h: int) -> tuple[int, int]:
    """torchvision's Resize(256) output size (width, height)."""
    return (SHORTER, int(SHORTER * h / w)) if w <= h else (int(SHORTER * w / h), SHORTER)


# -- cv2 transforms: the ceiling and contender (c) ---------------------------------------------------
def cv2_decode(data: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError("cannot decode")
    return img


def cv2_resize(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = img.shape[:2]
    shrink = size[0] * size[1] < w * h
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


def cv2_w1(img: np.ndarray, rng: random.Random | Any) -> np.ndarray:
    h, w = img.shape[:2]
    x, y, cw, ch = rrc_window(w, h, rng)
    out = cv2_resize(img[y:y + ch, x:x + cw], (SIZE, SIZE))
    return cv2.flip(out, 1) if rng.random() < 0.5 else out


def cv2_w2(img: np.ndarray, rng: Any = None) -> np.ndarray:
    h, w = img.shape[:2]
    img = cv2_resize(img, shorter_size(w, h))
    h, w = img.shape[:2]
    top, left = int(round((h - SIZE) / 2)), int(round((w - SIZE) / 2))
    return np.ascontiguousarray(img[top:top + SIZE, left:left + SIZE])


CV2_TRANSFORMS = {"W1": cv2_w1, "W2": cv2_w2}


def linear_w1(img: np.ndarray, rng: random.Random | Any) -> np.ndarray:
    h, w = img.shape[:2]
    x, y, cw, ch = rrc_window(w, h, rng)
    out = cv2.resize(img[y:y + ch, x:x + cw], (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
    return cv2.flip(out, 1) if rng.random() < 0.5 else out


def linear_w2(img: np.ndarray, rng: Any = None) -> np.ndarray:
    h, w = img.shape[:2]
    img = cv2.resize(img, shorter_size(w, h), interpolation=cv2.INTER_LINEAR)
    h, w = img.shape[:2]
    top, left = int(round((h - SIZE) / 2)), int(round((w - SIZE) / 2))
    return np.ascontiguousarray(img[top:top + SIZE, left:left + SIZE])


LINEAR_TRANSFORMS = {"W1": linear_w1, "W2": linear_w2}


# -- PIL transforms: contender (b) --------------------------------------------------------------------
def pil_load(path: str) -> Any:
    with open(path, "rb") as f:  # torchvision's default pil_loader
        img = Image.open(f)
        return img.convert("RGB")


def pil_w1(img: Any, rng: random.Random | Any) -> np.ndarray:
    x, y, cw, ch = rrc_window(*img.size, rng)
    img = img.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return np.array(img)


def pil_w2(img: Any, rng: Any = None) -> np.ndarray:
    img = img.resize(shorter_size(*img.size), Image.BILINEAR)
    w, h = img.size
    top, left = int(round((h - SIZE) / 2)), int(round((w - SIZE) / 2))
    return np.array(img.crop((left, top, left + SIZE, top + SIZE)))


PIL_TRANSFORMS = {"W1": pil_w1, "W2": pil_w2}


class FileDataset(Dataset):
    """Map-style dataset over image files: (uint8 HWC array, label); random draws from ``random``,
    which the DataLoader seeds differently in every worker."""

    def __init__(self, paths: list[str], labels: list[int], backend: str, workload: str):
        self.paths, self.labels, self.backend, self.workload = paths, labels, backend, workload

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        if self.backend == "pil":
            image = PIL_TRANSFORMS[self.workload](pil_load(self.paths[i]), random)
        else:
            with open(self.paths[i], "rb") as f:
                image = CV2_TRANSFORMS[self.workload](cv2_decode(f.read()), random)
        return image, self.labels[i]


def _worker_init(worker_id: int) -> None:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)


# -- the contenders: each returns (img/s, seconds to the first batch) ----------------------------------
def run_ceiling(jpegs: list[bytes], workload: str, times: dict[str, float] | None = None) -> tuple[float, float]:
    transform, rng = CV2_TRANSFORMS[workload], random.Random(0)
    decode_s = transform_s = batch_s = 0.0
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # one core: no OpenCV worker threads inside resize
    try:
        t0 = time.perf_counter()
        first, batch = None, []
        for data in jpegs:
            t1 = time.perf_counter()
            img = cv2_decode(data)
            t2 = time.perf_counter()
            batch.append(transform(img, rng))
            t3 = time.perf_counter()
            decode_s, transform_s = decode_s + t2 - t1, transform_s + t3 - t2
            if len(batch) == BATCH:
                np.stack(batch)
                batch = []
                first = first or time.perf_counter() - t0
                batch_s += time.perf_counter() - t3
        if batch:
            np.stack(batch)
        elapsed = time.perf_counter() - t0
    finally:
        cv2.setNumThreads(threads)
    if times is not None:
        for key, value in (("decode", decode_s), ("transform", transform_s), ("stack", batch_s)):
            times.setdefault(key, []).append(1000 * value / len(jpegs))
    return len(jpegs) / elapsed, first or elapsed


def run_pool(jpegs: list[bytes], workload: str, linear: bool = False) -> tuple[float, float]:
    """(f): ThreadPoolExecutor(WORKERS) over decode + transform, results in order, stacked into batches; ``linear``:
    (h), every resize INTER_LINEAR."""
    transform = (LINEAR_TRANSFORMS if linear else CV2_TRANSFORMS)[workload]
    rngs = threading.local()

    def one(data: bytes) -> np.ndarray:
        if not hasattr(rngs, "rng"):
            rngs.rng = random.Random(threading.get_ident())
        return transform(cv2_decode(data), rngs.rng)

    t0 = time.perf_counter()
    first, n = None, 0
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        images = pool.map(one, jpegs)
        while True:
            batch = [image for _, image in zip(range(BATCH), images)]
            if not batch:
                break
            np.stack(batch)
            n += len(batch)
            first = first or time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    assert n == len(jpegs)
    return n / elapsed, first


def run_dataloader(paths: list[str], labels: list[int], backend: str, workload: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    loader = DataLoader(FileDataset(paths, labels, backend, workload), batch_size=BATCH, shuffle=workload == "W1",
                        num_workers=WORKERS, persistent_workers=False, worker_init_fn=_worker_init)
    n, first = 0, None
    for images, _ in loader:  # iter() starts the workers; exhausting it shuts them down
        assert images.dtype == torch.uint8 and tuple(images.shape[1:]) == (SIZE, SIZE, 3)
        n += len(images)
        first = first or time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    assert n == len(paths), f"DataLoader pass delivered {n} of {len(paths)} samples"
    return n / elapsed, first


def picpac_transforms(workload: str) -> list:
    if workload == "W1":
        return [RandomResizedCrop(SIZE, SIZE), Flip(horizontal=0.5)]
    return [Resize(shorter=SHORTER), CenterCrop(SIZE, SIZE)]


def run_picpac(db: str, samples: int, workload: str, fused: bool = True) -> tuple[float, float]:
    t0 = time.perf_counter()
    with picpac.ImageStream(db, loop=False, batch=BATCH, threads=WORKERS, dtype="uint8", order="NHWC",
                            colorspace="BGR", shuffle=workload == "W1", fused=fused,
                            transforms=picpac_transforms(workload)) as stream:
        n, first = 0, None
        for images, _, _ in stream:
            assert images.dtype == np.uint8 and images.shape[1:] == (SIZE, SIZE, 3)
            n += len(images)
            first = first or time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    assert n == samples, f"picpac pass delivered {n} of {samples} samples"
    return n / elapsed, first


def run_checkout(checkout: str, db: str, samples: int, workload: str, contender: str = "picpac") -> tuple[float, float]:
    """A contender's second pass in a child interpreter that imports picpac from ``checkout`` (--fresh: this one)."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-pass", db, str(samples), workload,
                          contender], env=env, capture_output=True, text=True, check=True, cwd=checkout).stdout.split()
    if out[0] != os.path.join(os.path.abspath(checkout), "picpac"):
        raise SystemExit(f"{checkout}: the child imported picpac from {out[0]}")
    return float(out[1]), float(out[2])


def child_pass(db: str, samples: int, workload: str, contender: str) -> tuple[float, float]:
    """One warm-up pass of a contender, then the timed one (--child-pass, in a fresh interpreter)."""
    if contender in ("picpac", "python", "baseline"):
        run = lambda: run_picpac(db, samples, workload, fused=contender != "python")  # noqa: E731
    else:
        with picpac.Reader(db) as reader:
            jpegs = [bytes(reader[i]["image"]) for i in range(len(reader))]
        run = (lambda: run_pool(jpegs, workload, contender == "pool-linear")) if contender.startswith("pool") else (  # noqa: E731
            lambda: run_ceiling(jpegs, workload))
    run()
    return run()


def profile_picpac(db: str, samples: int, workload: str, top: int = 10) -> str:
    """One picpac pass with a cProfile.Profile in every thread (main and workers), merged."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start(frame: Any, event: str, arg: Any) -> None:  # first event of a new thread
        prof = cProfile.Profile()
        with lock:
            profiles.append(prof)
        prof.enable()  # replaces this hook in this thread

    main = cProfile.Profile()
    threading.setprofile(start)
    try:
        main.enable()
        rate, _ = run_picpac(db, samples, workload)
        main.disable()
    finally:
        threading.setprofile(None)
    out = io.StringIO()
    stats = pstats.Stats(main, stream=out)
    for prof in profiles:
        stats.add(prof)
    stats.sort_stats("tottime").print_stats(top)
    body = out.getvalue()
    body = body[body.find("   ncalls"):] if "   ncalls" in body else body
    return (f"cProfile of one picpac {workload} pass ({rate:.0f} img/s under the profiler), main + {len(profiles)} "
            f"worker threads merged, top {top} by own time (tottime: seconds summed over threads):\n{body.rstrip()}")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform
        return platform.processor() or platform.machine()


# -- data -------------------------------------------------------------------------------------------------
def prepare(tmp: str, samples: int, large: bool) -> tuple[list[str], list[int], list[bytes], str, str]:
    files = sorted(DATA.glob("*.JPEG"))
    if not files:
        raise SystemExit(f"no JPEGs in {DATA}: this benchmark needs ../shared/data/imagenet-250")
    classes: dict[str, int] = {}
    table = DATA / "labels.tsv"
    if table.exists():
        for line in table.read_text().splitlines()[1:]:
            name, index, *_ = line.split("\t")
            classes[name] = int(index)
    note = f"{len(files)} JPEGs of imagenet-250"
    sizes = []
    if large:
        folder = Path(tmp) / "large"
        folder.mkdir()
        t = time.perf_counter()
        for f in files:
            img = cv2_decode(f.read_bytes())
            big = cv2.resize(img, (4 * img.shape[1], 4 * img.shape[0]), interpolation=cv2.INTER_CUBIC)
            target = folder / f.name
            if not cv2.imwrite(str(target), big, [cv2.IMWRITE_JPEG_QUALITY, 90]):
                raise SystemExit(f"cannot write {target}")
            sizes.append(big.shape[:2])
        sources = sorted(folder.glob("*.JPEG"))
        note += f", upscaled 4x (INTER_CUBIC) and re-encoded at quality 90 in {time.perf_counter() - t:.0f} s"
    else:
        sources = files
        sizes = [cv2_decode(f.read_bytes()).shape[:2] for f in files]
    note += f" (median {statistics.median(s[1] for s in sizes):.0f}x{statistics.median(s[0] for s in sizes):.0f})"
    repeat = samples // len(sources) + 1
    paths = ([str(p) for p in sources] * repeat)[:samples]
    labels = [classes.get(Path(p).name, i % 1000) for i, p in enumerate(paths)]
    contents = {p: Path(p).read_bytes() for p in set(paths)}
    jpegs = [contents[p] for p in paths]  # shared bytes objects: in memory once per file
    db = os.path.join(tmp, "loaders.picpac")
    with picpac.Writer(db) as w:
        for data, label in zip(jpegs, labels):
            w.append(image=data, label=label)
    mib = sum(len(contents[p]) for p in contents) / len(contents) / 2 ** 20
    note += f", repeated to {samples} samples; {mib:.2f} MiB per JPEG on average; picpac DB {os.path.getsize(db) / 2 ** 20:.0f} MiB"
    return paths, labels, jpegs, db, note


def decode_rates(jpegs: list[bytes]) -> tuple[float, float]:
    """One-core img/s of decoding every JPEG whole: cv2.imdecode, and PIL as torchvision's pil_loader does."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        t0 = time.perf_counter()
        for data in jpegs:
            cv2_decode(data)
        t1 = time.perf_counter()
        for data in jpegs:
            Image.open(io.BytesIO(data)).convert("RGB")
        t2 = time.perf_counter()
    finally:
        cv2.setNumThreads(threads)
    return len(jpegs) / (t1 - t0), len(jpegs) / (t2 - t1)


def bare_loop(jpegs: list[bytes]) -> float:
    """One-core img/s of the plainest loop: cv2.imdecode + cv2.resize to SIZE x SIZE (INTER_AREA), no batches."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        t0 = time.perf_counter()
        for data in jpegs:
            cv2.resize(cv2_decode(data), (SIZE, SIZE), interpolation=cv2.INTER_AREA)
        return len(jpegs) / (time.perf_counter() - t0)
    finally:
        cv2.setNumThreads(threads)


def resize_rate(db: str, samples: int, threads: int, fused: bool) -> float:
    """img/s of one ImageStream pass decoding and resizing to SIZE x SIZE, uint8 (the bare loop's work)."""
    t0 = time.perf_counter()
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=BATCH, threads=threads, dtype="uint8",
                            order="NHWC", colorspace="BGR", resize_width=SIZE, resize_height=SIZE,
                            fused=fused) as stream:
        n = sum(len(images) for images, _, _ in stream)
    assert n == samples, f"a pass delivered {n} of {samples} samples"
    return n / (time.perf_counter() - t0)


def one_core(jpegs: list[bytes], db: str, samples: int, repeats: int) -> None:
    """Issue 27 item 1: ImageStream(threads=1, 2) against the one-core bare loop, fused and Python paths, one run."""
    paths = ([("fused", True)] if picpac.image.REGION_DECODE else []) + [("python", False)]
    rows: dict[str, list[float]] = {}
    for _ in range(repeats):  # interleaved: background load hits every row alike
        rows.setdefault("bare loop", []).append(bare_loop(jpegs))
        for name, fused in paths:
            for threads in (1, 2):
                rows.setdefault(f"{name} threads={threads}", []).append(resize_rate(db, samples, threads, fused))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"decode + resize to {SIZE}x{SIZE}, uint8, median of {repeats} (target threads=1 >= 0.95x, threads=2 >= "
          f"1.8x the bare loop):")
    print(f"  bare loop: cv2.imdecode + cv2.resize(INTER_AREA), one core   {med['bare loop']:7.0f} img/s")
    for name, _ in paths:
        for threads, target in ((1, 0.95), (2, 1.8)):
            rate = med[f"{name} threads={threads}"]
            ratio = rate / med["bare loop"]
            verdict = "PASS" if ratio >= target else "FAIL"
            print(f"  ImageStream {name:6s} threads={threads}   {rate:7.0f} img/s   {ratio:5.2f}x   "
                  f"target >= {target}   {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large", action="store_true", help="images upscaled 4x (the 'decode less' item); "
                    "only the ceiling and picpac run unless --contenders says otherwise")
    ap.add_argument("--contenders", default=None,
                    help="comma-separated subset of ceiling,pil,cv2,picpac (default: all; ceiling,picpac with --large)")
    ap.add_argument("--workloads", default="W1,W2", help="comma-separated subset of W1,W2")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile of one picpac W1 pass")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="also run (d) with the picpac package of this checkout")
    ap.add_argument("--one-core", action="store_true", help="only issue 27's line: ImageStream threads=1 and 2 "
                    "(fused and Python paths) against the one-core imdecode + resize loop")
    ap.add_argument("--fresh", action="store_true", help="every measurement of (a), (d), (e), (f), (g) and (h) in "
                    "a fresh interpreter")
    args = ap.parse_args()
    if _MISSING is not None:
        print(f"benchmarks/loaders.py needs PyTorch and Pillow, which are not picpac dependencies "
              f"({_MISSING}).\nInstall them with: pip install torch==2.13.0 pillow", file=sys.stderr)
        return 2
    names = (args.contenders or ("ceiling,picpac" if args.large else ",".join(c for c in CONTENDERS if c != "baseline"))
             ).split(",")
    if args.baseline:
        if not os.path.isfile(os.path.join(args.baseline, "picpac", "__init__.py")):
            ap.error(f"--baseline {args.baseline}: no picpac package there")
        names = [n for n in names if n != "baseline"] + ["baseline"]
    elif "baseline" in names:
        ap.error("the baseline contender needs --baseline CHECKOUT")
    workloads = args.workloads.split(",")
    bad = [n for n in names if n not in CONTENDERS] + [w for w in workloads if w not in WORKLOADS]
    if bad or args.samples < 1 or args.repeats < 1:
        ap.error(f"unknown contender/workload {bad}" if bad else "--samples and --repeats must be >= 1")
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(prefix="picpac-loaders-") as tmp:
        t = time.perf_counter()
        paths, labels, jpegs, db, note = prepare(tmp, args.samples, args.large)
        print(f"data: {note} (prepared in {time.perf_counter() - t:.0f} s)")
        if args.one_core:
            one_core(jpegs, db, args.samples, args.repeats)
            return 0
        print(f"machine: {cpu_name()}, {os.cpu_count()} cores (os.cpu_count), Python {sys.version.split()[0]}, "
              f"torch {torch.__version__}, Pillow {Image.__version__}, OpenCV {cv2.__version__}, "
              f"numpy {np.__version__}, picpac kernels {picpac.image.kernels.variant()}, multiprocessing start method "
              f"{torch.multiprocessing.get_start_method()}, load average before the runs "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} (shared machine: other work runs beside these)")
        print("timing: img/s = samples / wall time of one full pass (every sample once, last batch short), from "
              "creating the DataLoader/ImageStream to its last batch, so DataLoader worker start-up and shutdown "
              "(num_workers=2, persistent_workers=False: new workers every epoch, torch.set_num_threads(1) and "
              "cv2.setNumThreads(1) in each) and ImageStream start-up are counted; the ceiling runs with "
              "cv2.setNumThreads(1) and stacks its batches too")
        print("colour: picpac and the cv2 contenders return BGR (OpenCV's native order, no conversion), the PIL "
              "contender RGB (PIL's native order); shuffle on for W1, off for W2; the RandomResizedCrop window "
              "follows torchvision's algorithm in every contender")
        print(f"runs: {args.repeats} repeats, contenders interleaved within each repeat "
              f"(order per repeat: one-core decode rates, then {', '.join(f'{w}: ' + ' '.join(names) for w in workloads)}); medians reported\n",
              flush=True)

        runs: dict[tuple[str, str], list[tuple[float, float]]] = {(w, n): [] for w in workloads for n in names}
        stage_ms: dict[str, dict[str, list[float]]] = {w: {} for w in workloads}
        decodes = []
        for r in range(args.repeats):
            decodes.append(decode_rates(jpegs))
            for w in workloads:
                here = str(Path(__file__).resolve().parents[1])
                for n in names:
                    if n == "baseline":
                        result = run_checkout(args.baseline, db, args.samples, w)
                    elif args.fresh and n in ("ceiling", "picpac", "python", "pool", "pool-linear"):
                        result = run_checkout(here, db, args.samples, w, n)
                    elif n == "ceiling":
                        result = run_ceiling(jpegs, w, stage_ms[w])
                    elif n in ("picpac", "python"):
                        result = run_checkout(here, db, args.samples, w, n) if args.baseline else \
                            run_picpac(db, args.samples, w, fused=n == "picpac")
                    elif n.startswith("pool"):
                        result = run_pool(jpegs, w, n == "pool-linear")
                    else:
                        result = run_dataloader(paths, labels, n, w)
                    runs[w, n].append(result)
                    print(f"  repeat {r + 1}/{args.repeats} {w} {n:8s} {result[0]:7.0f} img/s  "
                          f"(first batch after {result[1]:.2f} s)", flush=True)

        print(f"\nresults: {args.samples} samples{' (--large)' if args.large else ''}, median of {args.repeats}; "
              f"load average after the runs {' '.join(f'{v:.2f}' for v in os.getloadavg())}; picpac region "
              f"decoding {'on' if picpac.image.REGION_DECODE else 'off (picpac.image._jpeg not built)'}")
        print(f"one-core whole-image decode of these JPEGs: cv2.imdecode "
              f"{statistics.median(d[0] for d in decodes):.0f} img/s, PIL open + convert('RGB') "
              f"{statistics.median(d[1] for d in decodes):.0f} img/s")
        for w in workloads:
            med = {n: statistics.median(v[0] for v in runs[w, n]) for n in names}
            first = {n: statistics.median(v[1] for v in runs[w, n]) for n in names}
            print(f"\n{WORKLOADS[w]}")
            for n in names:
                spread = ", ".join(f"{v[0]:.0f}" for v in runs[w, n])
                print(f"  {CONTENDERS[n]:48s} {med[n]:7.0f} img/s   first batch {first[n]:5.2f} s   runs [{spread}]")
            if stage_ms[w]:
                parts = ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in stage_ms[w].items())
                print(f"  ceiling per image: {parts}")
            if "picpac" in med:
                for base, factor, target, label in TARGETS:
                    if base in med:
                        ratio = med["picpac"] / (factor * med[base])
                        print(f"  {label:36s} {ratio:5.2f}   target >= {target}   {'PASS' if ratio >= target else 'FAIL'}")
        if not args.no_profile and "W1" in workloads:
            print()
            print(profile_picpac(db, args.samples, "W1"))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-pass"]:  # run_checkout's child: one contender, with the picpac on PYTHONPATH
        rate, first = child_pass(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        print(os.path.dirname(picpac.__file__), rate, first)
        sys.exit(0)
    sys.exit(main())
