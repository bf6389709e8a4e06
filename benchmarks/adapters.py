"""The framework adapters' overhead (issue 13 item 7): W1 of benchmarks/loaders.py through each adapter
against the raw ImageStream, and the torch adapter against loaders.py's DataLoader contenders.

The workload, data and DataLoader contenders are loaders.py's, imported from it (not copied): W1
train (decode -> RandomResizedCrop 224 -> h-flip -> batch 64 uint8) over ../shared/data/imagenet-250
repeated to --samples (default 2,000). Contenders, interleaved in every round so background load hits
them alike (in the order below in odd rounds, reversed in even ones, so a drift within a round favours
none); medians of --repeats rounds:

  raw     picpac.ImageStream, loaders.py's W1 keys (threads=2, uint8, NHWC, BGR), in this process
  child   the same, in a child process of its own (no framework imported): tf's and jax's baseline
  torch   TorchLoader(memory_format='channels_last'), the same stream keys: uint8 tensors, int64 labels
  tf      tf_dataset(...), the same keys (prefetch(AUTOTUNE), its signature read from the first batch)
  jax     JaxLoader(..., pad=False), the same keys (jax.Arrays on the default device, double-buffered;
          pad=False as the raw stream: the default pad=True decodes the last batch's 48 fillers, 2.4%
          more work that is not the adapter's cost)
  pil/cv2 loaders.py's DataLoader(num_workers=2) contenders (b) and (c)

Each loader runs --epochs passes (default 3), epoch 0, 1, ... as a training run does. Two rates:
pass 1, samples / wall time from creating the loader to its last batch (loaders.py's measure: the
loader's one-time start-up counted, for JAX the last batch ready on the device), and the passes after
it, samples / wall time from the end of pass 1 to the end of the last. The DataLoaders run pass 1 only
(loaders.py's contenders). Beside them, CPU seconds and minor page faults per pass, over the passes
after the first (for the DataLoaders, their one pass), the CPU split as passes + kept: the threads
and processes that each pass starts and ends (the stream's decoding threads; TensorFlow's
per-iterator threads, which run the generator and so the batch assembly; a DataLoader's worker
processes) and the threads kept across passes (the consumer's, the framework's pools; read from
/proc/self/task). TensorFlow, JAX and the DataLoaders run in a
child process of their own, started every round, the framework imported before the clock starts
(forking DataLoader workers from this process, once it has run the other loaders' threads, hung
them). Each adapter is compared with the raw stream in the same kind of process: torch with raw, tf
and jax with child. A framework that cannot be imported is skipped with a line saying so.

Target: each adapter >= 0.97 x the raw stream over the passes after the first, the rate a training
run sees for all its epochs but one; pass 1's ratio (start-up included) is printed beside it. A ratio
is the median over the rounds of each round's own ratio (the adapter against its baseline of the same
round, so a slow change of the machine's load between rounds cancels), with its 95% confidence
interval (:func:`median_interval`; it needs 6 rounds or more) and the lowest and highest round. The
torch adapter's pass 1 is compared with the DataLoaders'.

    python benchmarks/adapters.py [--samples 2000] [--repeats 5] [--epochs 3] [--adapters torch,tf,jax]
                                  [--no-dataloaders]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loaders  # noqa: E402  (W1's definition, the data and the DataLoader contenders)
from loaders import BATCH, SIZE, WORKERS, picpac_transforms  # noqa: E402

import picpac  # noqa: E402

TARGET = 0.97
WORKLOAD = "W1"
ADAPTERS = {"torch": "TorchLoader (torch)", "tf": "tf_dataset (tensorflow)", "jax": "JaxLoader (jax)"}
MODULES = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}


def stream_keys() -> dict:
    """loaders.run_picpac's ImageStream keys for W1."""
    return dict(loop=False, batch=BATCH, threads=WORKERS, dtype="uint8", order="NHWC", colorspace="BGR",
                shuffle=True, transforms=picpac_transforms(WORKLOAD))


def passes(name: str, db: str, epochs: int) -> Iterator[Iterator[int]]:
    """Loader ``name`` over ``db``, made when this generator starts: its passes, epochs 0 to ``epochs - 1``,
    each an iterator of the batches' real sample counts."""
    keys = stream_keys()
    if name in ("raw", "child"):
        with picpac.ImageStream(db, **keys) as stream:
            for epoch in range(epochs):
                stream.set_epoch(epoch)
                yield (len(images) for images, labels, pad in stream)
    elif name == "torch":
        import torch
        from picpac.adapters.torch import TorchLoader
        keys.pop("order")

        def counts(loader: Any) -> Iterator[int]:
            for images, labels, pad in loader:
                assert images.dtype == torch.uint8 and tuple(images.shape[1:]) == (3, SIZE, SIZE)
                yield len(images)
        with TorchLoader(db, memory_format="channels_last", **keys) as loader:
            for epoch in range(epochs):
                loader.set_epoch(epoch)
                yield counts(loader)
    elif name == "tf":
        from picpac.adapters.tf import tf_dataset
        dataset = tf_dataset(db, **keys)  # each iteration of it is the stream's next epoch
        for _ in range(epochs):
            yield (int(images.shape[0]) for images, labels, pad in dataset)
    elif name == "jax":
        from picpac.adapters.jax import JaxLoader

        def ready(loader: Any) -> Iterator[int]:
            for images, labels, pad in loader:
                yield int(images.shape[0])
            images.block_until_ready()  # the pass ends with its last batch on the device
        with JaxLoader(db, pad=False, **keys) as loader:
            for epoch in range(epochs):
                loader.set_epoch(epoch)
                yield ready(loader)
    else:
        raise ValueError(name)


def run_passes(name: str, db: str, samples: int, epochs: int) -> dict[str, float]:
    """``epochs`` passes of W1 through one loader ``name`` in this process: the first pass's img/s, timed
    from creating the loader (start-up included), the seconds to its first batch, and the img/s of the
    passes after it (the loader made, each new pass started by the loop, as a training run's epochs),
    with their CPU and page faults per pass (:func:`usage_between`)."""
    t0 = time.perf_counter()
    ends, first, marks = [], None, []
    for counts in passes(name, db, epochs):
        n = 0
        for count in counts:
            n += count
            first = first or time.perf_counter() - t0
        assert n == samples, f"{name} pass {len(ends) + 1} delivered {n} of {samples} samples"
        ends.append(time.perf_counter())
        if len(ends) in (1, epochs):
            marks.append(usage())
    return {"rate": samples / (ends[0] - t0), "first": first, "later": samples * (epochs - 1) / (ends[-1] - ends[0]),
            **usage_between(*marks, epochs - 1)}


def usage() -> dict[str, Any]:
    """This process's CPU seconds and minor page faults so far, its finished children's (a DataLoader's
    workers), and each of its living threads' CPU seconds (Linux's ``/proc/self/task``; none elsewhere)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    threads = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                threads[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # it ended meanwhile
            pass
    return {"cpu": own.ru_utime + own.ru_stime, "children": children.ru_utime + children.ru_stime,
            "faults": own.ru_minflt + children.ru_minflt, "threads": threads}


def usage_between(start: dict[str, Any], end: dict[str, Any], runs: int) -> dict[str, float]:
    """Per pass of the ``runs`` passes between two :func:`usage` marks: CPU seconds, minor page faults,
    and the CPU split into ``kept``, this process's threads alive at ``end`` (the consumer's, the
    framework's pools), and ``passes``, the rest of it: the threads that ended between the marks (the
    stream's decoding threads, which each pass starts and joins before its last batch is given; a
    framework's per-iterator threads) and the finished child processes (a DataLoader's workers)."""
    own = end["cpu"] - start["cpu"]
    kept = sum(seconds - start["threads"].get(tid, 0.0) for tid, seconds in end["threads"].items())
    children = end["children"] - start["children"]
    return {"cpu": (own + children) / runs, "faults": (end["faults"] - start["faults"]) / runs,
            "passes": (own - kept + children) / runs, "kept": kept / runs}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free ``confidence`` interval of the median of ``values`` (sorted): the order
    statistics ``values[k]`` and ``values[n - 1 - k]`` with the largest ``k`` for which a binomial(n, 1/2)
    count falls below ``k + 1`` with probability at most ``(1 - confidence) / 2``; None when ``n`` is too
    small for any (fewer than 6 at 95%)."""
    n, tail, k = len(values), (1 - confidence) / 2, -1
    below = 0.0  # P(binomial(n, 1/2) <= k + 1)
    while True:
        below += math.comb(n, k + 1) / 2 ** n
        if below > tail:
            break
        k += 1
    return None if k < 0 else (values[k], values[n - 1 - k])


def run_child(name: str, source: str, samples: int, epochs: int) -> dict[str, float]:
    """``name``'s passes in a fresh child process, its framework imported there before the clock starts."""
    out = subprocess.run([sys.executable, __file__, "--child", name, "--db", source, "--samples", str(samples),
                          "--epochs", str(epochs)], capture_output=True, text=True, check=False,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if out.returncode != 0:
        raise SystemExit(f"the {name} child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(name: str, source: str, samples: int, epochs: int) -> int:
    if name in ("cv2", "pil"):  # a fresh process: its DataLoader forks no thread state of this benchmark's
        loaders.torch.set_num_threads(1)
        paths, labels = json.loads(Path(source).read_text())

        start = usage()
        rate, first = loaders.run_dataloader(paths, labels, name, WORKLOAD)
        print(json.dumps({"rate": rate, "first": first, "later": float("nan"), **usage_between(start, usage(), 1)}))
        return 0
    if name != "child":
        __import__(MODULES[name])
    if name == "jax":
        import jax
        jax.numpy.zeros(1).block_until_ready()  # the backend started before the clock, as torch's is
    print(json.dumps(run_passes(name, source, samples, epochs)))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3, help="passes through each loader (>= 2)")
    ap.add_argument("--adapters", default="torch,tf,jax")
    ap.add_argument("--no-dataloaders", action="store_true", help="skip loaders.py's DataLoader contenders")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.epochs < 2:
        ap.error("--epochs: at least 2 (the target is on the passes after the first)")
    if args.child:
        return child(args.child, args.db, args.samples, args.epochs)

    adapters = []
    for name in args.adapters.split(","):
        if name not in ADAPTERS:
            ap.error(f"unknown adapter {name!r}: torch, tf, jax")
        if importlib.util.find_spec(MODULES[name]) is None:
            print(f"skipped: {ADAPTERS[name]}: {MODULES[name]} is not installed (pip install 'picpac[{name}]')")
        else:
            adapters.append(name)
    dataloaders = [] if args.no_dataloaders or "torch" not in adapters or loaders._MISSING is not None else ["cv2", "pil"]
    if not args.no_dataloaders and not dataloaders:
        print("skipped: the DataLoader contenders (they need torch and Pillow: pip install torch==2.13.0 pillow)")
    if dataloaders:
        loaders.torch.set_num_threads(1)
    names = ["raw"] + (["child"] if {"tf", "jax"} & set(adapters) else []) + adapters + dataloaders
    label = {"raw": "raw picpac.ImageStream(threads=2)", "child": "the same, in a child process", **ADAPTERS,
             "cv2": loaders.CONTENDERS["cv2"], "pil": loaders.CONTENDERS["pil"]}
    later = f"passes 2-{args.epochs}" if args.epochs > 2 else "pass 2"

    with tempfile.TemporaryDirectory(prefix="picpac-adapters-") as tmp:
        t = time.perf_counter()
        paths, labels, jpegs, db, note = loaders.prepare(tmp, args.samples, False)
        lists = os.path.join(tmp, "files.json")  # the DataLoader children's file list
        Path(lists).write_text(json.dumps([paths, labels]))
        print(f"data: {note} (prepared in {time.perf_counter() - t:.0f} s)")
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average before the runs "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} (shared machine: other work runs beside these)")
        print(f"workload: {loaders.WORKLOADS[WORKLOAD]}; each loader runs {args.epochs} passes (epochs); pass 1 "
              f"is timed from creating the loader; the DataLoaders run pass 1 only; tf, jax and the DataLoaders "
              f"in a child process each (framework imported first)")
        print(f"runs: {args.repeats} rounds, in each: {' '.join(names)} (reversed in even rounds); medians "
              "reported\n", flush=True)
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for r in range(args.repeats):
            for n in names if r % 2 == 0 else names[::-1]:
                if n in ("raw", "torch"):
                    result = run_passes(n, db, args.samples, args.epochs)
                else:
                    result = run_child(n, lists if n in dataloaders else db, args.samples, args.epochs)
                runs[n].append(result)
                print(f"  round {r + 1}/{args.repeats} {n:5s} pass 1 {result['rate']:5.0f} img/s (first batch after "
                      f"{result['first']:.2f} s)" + ("" if n in dataloaders else
                                                     f", {later} {result['later']:5.0f} img/s"), flush=True)

    def med(n: str, key: str) -> float:
        return statistics.median(v[key] for v in runs[n])

    def ratios(n: str, base: str, key: str) -> list[float]:
        """Each round's ``n`` / ``base`` (``key``: 'rate', pass 1, or 'later'), sorted."""
        return sorted(a[key] / b[key] for a, b in zip(runs[n], runs[base]))
    print(f"\nresults: {args.samples} samples, median of {args.repeats}; load average after the runs "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"  {'':44s} {'pass 1':>9s}  {'first batch':>11s}  {later:>11s}  {'CPU/pass = passes + kept':>25s}  "
          f"{'faults/pass':>11s}")
    for n in names:
        steady = "" if n in dataloaders else f"{med(n, 'later'):7.0f} img/s"
        spread = ", ".join(f"{v['rate']:.0f}" + ("" if n in dataloaders else f"/{v['later']:.0f}") for v in runs[n])
        print(f"  {label[n]:44s} {med(n, 'rate'):5.0f} img/s  {med(n, 'first'):9.2f} s  {steady:>11s}  "
              f"{med(n, 'cpu'):6.2f} s = {med(n, 'passes'):5.2f} + {med(n, 'kept'):4.2f} s  {med(n, 'faults'):11,.0f}   "
              f"runs [{spread}]")
    print(f"\n  the target is on {later}: the epochs of a training run after the first, whose pass 1 also pays "
          f"the loader's one-time start-up")
    print(f"  ratios: the median of the {args.repeats} rounds' own ratios (its 95% confidence interval; the lowest and "
          "highest round)")

    def summary(values: list[float]) -> str:
        interval = median_interval(values)
        within = "CI n/a" if interval is None else f"CI {interval[0]:.3f}-{interval[1]:.3f}"
        return f"{statistics.median(values):5.3f} ({within}; {values[0]:.3f}-{values[-1]:.3f})"
    for n in adapters:
        base = "raw" if n == "torch" else "child"
        steady = ratios(n, base, "later")
        ratio = statistics.median(steady)
        print(f"  {label[n]:26s} / raw stream{' (child)' if base == 'child' else '        '}   {later}: {summary(steady)}"
              f"   target >= {TARGET}   {'PASS' if ratio >= TARGET else 'FAIL'}   (pass 1, start-up included: "
              f"{summary(ratios(n, base, 'rate'))})")
    for n in dataloaders:
        print(f"  {label['torch']:26s} / {label[n]}   pass 1: {statistics.median(ratios('torch', n, 'rate')):5.2f}")
    print("\nnot measured here: the GPU step wait (DevicePrefetcher's copy overlapping the step); this machine has "
          "no GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
