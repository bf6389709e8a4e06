"""The framework adapters' overhead (issue 13 item 7): W1 of benchmarks/loaders.py through each adapter
against the raw ImageStream, and the torch adapter against loaders.py's DataLoader contenders.

The workload, data and DataLoader contenders are loaders.py's, imported from it (not copied): W1
train (decode -> RandomResizedCrop 224 -> h-flip -> batch 64 uint8) over ../shared/data/imagenet-250
repeated to --samples (default 2,000).

Overhead. Every loader runs in a loader process of its own, a child that imports its framework (the
raw stream's imports none), makes its loader at its first pass and keeps it, and runs one pass, the
next epoch, each time it is told to: the loop of a training run's epochs. Each adapter is paired
with a raw-stream process of its own, and a control pairs two raw-stream processes:

  raw      picpac.ImageStream, loaders.py's W1 keys (threads=2, uint8, NHWC, BGR)
  torch    TorchLoader(memory_format='channels_last'), the same stream keys: uint8 tensors, int64 labels
  tf       tf_dataset(...), the same keys (prefetch(AUTOTUNE), its signature read from the first batch)
  jax      JaxLoader(..., pad=False), the same keys (jax.Arrays on the default device, double-buffered;
           pad=False as the raw stream: the default pad=True decodes the last batch's 48 fillers, 2.4%
           more work that is not the adapter's cost)
  control  a second raw stream: what the measure gives for two identical loaders (its noise)

Pass 1 (epoch 0) is timed from making the loader (its start-up counted), then --pairs pairs: in pair
i both loaders of each comparison run epoch i, one straight after the other (the raw stream first in
odd pairs, second in even ones; the comparisons' order rotates from pair to pair), so a pair's two
passes decode the same samples with the same augmentation, on a machine in the same state; only one
loader process runs at a time. A pair's ratio is the raw pass's time over the adapter's (the
adapter's rate / the raw stream's), and an adapter's ratio the median of its pairs', with a
distribution-free 95% confidence interval (:func:`median_interval`; 6 pairs at least) and the lowest
and highest pair. Target: each adapter >= 0.97 x the raw stream. Beside the rates: CPU seconds and
minor page faults per pass (the pairs' medians), the CPU split as passes + kept: the threads that
each pass starts and ends (the stream's decoding threads; TensorFlow's per-iterator threads, which
run the generator and so the batch assembly) and the threads kept across passes (the consumer's, the
framework's pools; read from /proc/self/task).

DataLoaders. --repeats rounds (default 11) of fresh processes, in the order below (reversed in even
rounds): the torch adapter's and the raw stream's pass 1 (start-up counted) and loaders.py's
DataLoader(num_workers=2) contenders (c) cv2 and (b) PIL, one pass each; the torch adapter and the
raw stream against each, the median of the rounds' ratios. A framework that cannot be imported is
skipped with a line saying so.

Step wait (with CUDA, or --step-wait DEVICE): :func:`step_wait`, how long a ResNet-50-like training
step waits for its batch, with and without DevicePrefetcher.

    python benchmarks/adapters.py [--samples 2000] [--pairs 30] [--repeats 11] [--adapters torch,tf,jax]
                                  [--no-control] [--no-dataloaders]
                                  [--step-wait DEVICE] [--steps 50]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
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
REPLY = "adapters-benchmark: "  # a loader process's answers on its stdout start with this


def stream_keys() -> dict:
    """loaders.run_picpac's ImageStream keys for W1."""
    return dict(loop=False, batch=BATCH, threads=WORKERS, dtype="uint8", order="NHWC", colorspace="BGR",
                shuffle=True, transforms=picpac_transforms(WORKLOAD))


def passes(name: str, db: str) -> Iterator[Iterator[int]]:
    """Loader ``name`` over ``db``, made when this generator starts: its passes, epochs 0, 1, 2, ...,
    each an iterator of the batches' real sample counts."""
    keys = stream_keys()
    epochs = itertools.count()
    if name == "raw":
        with picpac.ImageStream(db, **keys) as stream:
            for epoch in epochs:
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
            for epoch in epochs:
                loader.set_epoch(epoch)
                yield counts(loader)
    elif name == "tf":
        from picpac.adapters.tf import tf_dataset
        dataset = tf_dataset(db, **keys)  # each iteration of it is the stream's next epoch
        for _ in epochs:
            yield (int(images.shape[0]) for images, labels, pad in dataset)
    elif name == "jax":
        from picpac.adapters.jax import JaxLoader

        def ready(loader: Any) -> Iterator[int]:
            for images, labels, pad in loader:
                yield int(images.shape[0])
            images.block_until_ready()  # the pass ends with its last batch on the device
        with JaxLoader(db, pad=False, **keys) as loader:
            for epoch in epochs:
                loader.set_epoch(epoch)
                yield ready(loader)
    else:
        raise ValueError(name)


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


def usage_between(start: dict[str, Any], end: dict[str, Any]) -> dict[str, float]:
    """CPU seconds and minor page faults between two :func:`usage` marks, the CPU split into ``kept``,
    this process's threads alive at ``end`` (the consumer's, the framework's pools), and ``passes``, the
    rest of it: the threads that ended between the marks (the stream's decoding threads, which each pass
    starts and joins before its last batch is given; a framework's per-iterator threads) and the
    finished child processes (a DataLoader's workers)."""
    own = end["cpu"] - start["cpu"]
    kept = sum(seconds - start["threads"].get(tid, 0.0) for tid, seconds in end["threads"].items())
    children = end["children"] - start["children"]
    return {"cpu": own + children, "faults": end["faults"] - start["faults"], "passes": own - kept + children,
            "kept": kept}


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


# -- loader processes --------------------------------------------------------------------------------------
def answer(message: dict) -> None:
    print(REPLY + json.dumps(message), flush=True)


def serve(name: str, db: str, samples: int) -> int:
    """A loader process: imports ``name``'s framework, answers that it is ready, then runs one pass, the
    loader's next epoch, for each line on stdin, answering with the pass's seconds (from the command;
    the first pass's include making the loader), seconds to its first batch, and :func:`usage_between`."""
    if name == "torch":
        import torch
        torch.set_num_threads(1)  # as the DataLoader contenders' processes (the adapter runs no torch op)
    elif name != "raw":
        __import__(MODULES[name])
    if name == "jax":
        import jax
        jax.numpy.zeros(1).block_until_ready()  # the backend started before any pass, as torch's is
    answer({})
    loader = passes(name, db)  # the loader is made at the first pass
    for _ in sys.stdin:
        start, t0 = usage(), time.perf_counter()
        n, first = 0, None
        for count in next(loader):
            n += count
            first = first or time.perf_counter() - t0
        seconds = time.perf_counter() - t0
        assert n == samples, f"{name}: a pass delivered {n} of {samples} samples"
        answer({"seconds": seconds, "first": first, **usage_between(start, usage())})
    loader.close()
    return 0


class LoaderProcess:
    """One loader process (:func:`serve`), ``name``'s, run pass by pass; its stderr goes to ``log``."""

    def __init__(self, name: str, db: str, samples: int, log: Path):
        self.name, self.log = name, log
        self.stderr = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", name, "--db", db, "--samples", str(samples)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))

    def answer(self) -> dict[str, float]:
        """The process's next answer (the first: that it is ready)."""
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        self.close()
        raise SystemExit(f"the {self.name} loader process failed ({self.process.returncode}):\n"
                         f"{self.log.read_text()[-3000:]}")

    def run_pass(self) -> dict[str, float]:
        try:
            self.process.stdin.write("pass\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died: answer() says why
            pass
        return self.answer()

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


def overhead(comparisons: list[str], db: str, samples: int, pairs: int, tmp: Path) -> dict[str, tuple[list, list]]:
    """Pass 1 and ``pairs`` pairs of passes of each comparison's two loader processes, the raw stream's
    and the adapter's (the control's: a second raw stream's), printed as they come:
    ``{comparison: (the raw stream's passes, the adapter's)}``, pass 1 first."""
    runs: dict[str, tuple[list, list]] = {c: ([], []) for c in comparisons}
    with contextlib.ExitStack() as stack:
        processes = {c: tuple(stack.enter_context(contextlib.closing(
            LoaderProcess(name, db, samples, tmp / f"{c}-{side}.log"))) for side, name in
            enumerate(("raw", "raw" if c == "control" else c))) for c in comparisons}
        for pair in processes.values():  # every framework imported before any pass runs
            for process in pair:
                process.answer()
        for i in range(pairs + 1):
            k = i % len(comparisons)
            for c in comparisons[k:] + comparisons[:k]:
                for side in (0, 1) if i % 2 else (1, 0):  # the raw stream first in odd pairs
                    runs[c][side].append(processes[c][side].run_pass())
            ratios = "  ".join(f"{c} {runs[c][0][i]['seconds'] / runs[c][1][i]['seconds']:.3f}" for c in comparisons)
            rates = [samples / runs[c][side][i]["seconds"] for c in comparisons for side in (0, 1)]
            print(f"  {'pass 1' if i == 0 else f'pair {i}/{pairs}':11s} {ratios}   (passes {min(rates):.0f}-"
                  f"{max(rates):.0f} img/s)", flush=True)
    return runs


# -- DataLoader contenders ---------------------------------------------------------------------------------
def dataloader_child(name: str, lists: str) -> int:
    """One DataLoader contender's pass in this fresh process (its DataLoader forks no thread state of the
    benchmark's), printed as :func:`answer`."""
    loaders.torch.set_num_threads(1)
    paths, labels = json.loads(Path(lists).read_text())
    start = usage()
    rate, first = loaders.run_dataloader(paths, labels, name, WORKLOAD)
    answer({"seconds": len(paths) / rate, "first": first, **usage_between(start, usage())})
    return 0


def run_dataloader(name: str, lists: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--dataloader", name, "--db", lists], capture_output=True,
                         text=True, check=False)
    replies = [line for line in out.stdout.splitlines() if line.startswith(REPLY)]
    if out.returncode != 0 or not replies:
        raise SystemExit(f"the {name} DataLoader process failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(replies[-1][len(REPLY):])


def against_dataloaders(dataloaders: list[str], db: str, lists: str, samples: int, repeats: int,
                        tmp: Path) -> dict[str, list]:
    """``repeats`` rounds of the torch adapter's and the raw stream's pass 1 and each DataLoader contender's
    pass, each in a fresh process (in the order given, reversed in even rounds), printed as they come."""
    names = ["torch", "raw", *dataloaders]
    runs: dict[str, list] = {n: [] for n in names}
    for r in range(repeats):
        for n in names if r % 2 == 0 else names[::-1]:
            if n in ("torch", "raw"):
                with contextlib.closing(LoaderProcess(n, db, samples, tmp / f"dataloaders-{n}.log")) as loader:
                    loader.answer()
                    result = loader.run_pass()
            else:
                result = run_dataloader(n, lists)
            runs[n].append(result)
            print(f"  round {r + 1}/{repeats} {n:5s} pass 1 {samples / result['seconds']:5.0f} img/s (first batch "
                  f"after {result['first']:.2f} s)", flush=True)
    return runs


# -- the GPU step wait ---------------------------------------------------------------------------------------
def step_wait(db: str, device: str, steps: int) -> dict[str, float]:
    """A ResNet-50-like training loop on ``device`` fed by TorchLoader (uint8, channels_last, W1): the
    median seconds a step waits for its batch, from asking for it to its images ready on the device as
    float32, with DevicePrefetcher (batch k+1 copied and converted on a side stream while step k runs)
    and without it (each batch copied and converted when its step asks for it, the same conversion).
    The model is torchvision's resnet50 when torchvision is installed, else a stack of convolutions."""
    import torch
    from picpac.adapters.torch import DevicePrefetcher, TorchLoader
    try:
        from torchvision.models import resnet50
        model = resnet50()
    except ImportError:
        widths = (3, 64, 256, 512, 1024, 2048)
        layers = [m for c_in, c_out in zip(widths, widths[1:]) for m in (torch.nn.Conv2d(c_in, c_out, 3, 2, 1),
                                                                        torch.nn.ReLU())]
        model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(widths[-1], 1000))
    model = model.to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # the step's own stream: waiting for it leaves a side stream's copy of the next batch running
    ready = torch.cuda.current_stream().synchronize if torch.device(device).type == "cuda" else (lambda: None)
    keys = {**stream_keys(), "loop": True}
    keys.pop("order")
    waits = {}
    for prefetch in (False, True):
        with TorchLoader(db, memory_format="channels_last", **keys) as loader:
            placed = DevicePrefetcher(loader, device, dtype=torch.float32)
            batches = iter(placed if prefetch else loader)
            times = []
            for step in range(steps + 1):
                ready()  # the last step done
                t = time.perf_counter()
                batch = next(batches)
                images, labels, pad = batch if prefetch else placed.to_device(batch)
                ready()
                if step:  # step 0 waits for the stream's start-up
                    times.append(time.perf_counter() - t)
                loss = torch.nn.functional.cross_entropy(model(images), labels % 1000)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            waits["with" if prefetch else "without"] = statistics.median(times)
    return waits


# -- the report ------------------------------------------------------------------------------------------------
def summary(values: list[float]) -> str:
    """The median of ``values``, its 95% confidence interval and their lowest and highest."""
    values = sorted(values)
    interval = median_interval(values)
    within = "CI n/a" if interval is None else f"CI {interval[0]:.3f}-{interval[1]:.3f}"
    return f"{statistics.median(values):5.3f} ({within}; {values[0]:.3f}-{values[-1]:.3f})"


def row(label: str, samples: int, firsts: list[dict], later: list[dict]) -> str:
    """A loader's line: its pass 1 rate and seconds to the first batch (the medians of ``firsts``), the
    median rate of the passes after it (``later``, if any) and their median CPU and faults per pass
    (``firsts``' without them)."""
    def med(passes: list[dict], key: str) -> float:
        return statistics.median(p[key] for p in passes)
    costs = later or firsts
    steady = f"{samples / med(later, 'seconds'):7.0f} img/s" if later else ""
    return (f"  {label:44s} {samples / med(firsts, 'seconds'):5.0f} img/s  {med(firsts, 'first'):9.2f} s  "
            f"{steady:>11s}  {med(costs, 'cpu'):6.2f} s = {med(costs, 'passes'):5.2f} + {med(costs, 'kept'):4.2f} s  "
            f"{med(costs, 'faults'):11,.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=30, help="pairs of passes of each comparison after pass 1")
    ap.add_argument("--repeats", type=int, default=11, help="rounds of the DataLoader comparison")
    ap.add_argument("--adapters", default="torch,tf,jax")
    ap.add_argument("--no-control", action="store_true", help="skip the raw stream / raw stream control")
    ap.add_argument("--no-dataloaders", action="store_true", help="skip loaders.py's DataLoader contenders")
    ap.add_argument("--step-wait", metavar="DEVICE", help="the device of the step-wait loop (default: cuda when "
                    "torch has it; else the loop is skipped)")
    ap.add_argument("--steps", type=int, default=50, help="steps of the step-wait loop, with and without prefetch")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--dataloader", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve, args.db, args.samples)
    if args.dataloader:
        return dataloader_child(args.dataloader, args.db)
    if args.pairs < 1 or args.repeats < 1:
        ap.error("--pairs and --repeats: at least 1")

    adapters = []
    for name in filter(None, args.adapters.split(",")):
        if name not in ADAPTERS:
            ap.error(f"unknown adapter {name!r}: torch, tf, jax")
        if importlib.util.find_spec(MODULES[name]) is None:
            print(f"skipped: {ADAPTERS[name]}: {MODULES[name]} is not installed (pip install 'picpac[{name}]')")
        else:
            adapters.append(name)
    comparisons = adapters + ([] if args.no_control else ["control"])
    with_dataloaders = not args.no_dataloaders and "torch" in adapters and loaders._MISSING is None
    dataloaders = ["cv2", "pil"] if with_dataloaders else []
    if not args.no_dataloaders and not dataloaders:
        print("skipped: the DataLoader contenders (they need torch and Pillow: pip install torch==2.13.0 pillow)")
    label = {**ADAPTERS, "control": "control: the raw stream, a second process", "cv2": loaders.CONTENDERS["cv2"],
             "pil": loaders.CONTENDERS["pil"]}
    runs: dict[str, tuple[list, list]] = {}
    rounds: dict[str, list] = {}
    waits: dict[str, float] | None = None
    with tempfile.TemporaryDirectory(prefix="picpac-adapters-") as tmp:
        t = time.perf_counter()
        paths, labels, jpegs, db, note = loaders.prepare(tmp, args.samples, False)
        lists = os.path.join(tmp, "files.json")  # the DataLoader processes' file list
        Path(lists).write_text(json.dumps([paths, labels]))
        print(f"data: {note} (prepared in {time.perf_counter() - t:.0f} s)")
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average before the runs "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} (shared machine: other work runs beside these)")
        print(f"workload: {loaders.WORKLOADS[WORKLOAD]}")
        if comparisons:
            print(f"\noverhead: each of {', '.join(comparisons)} against a raw stream of its own, one loader process "
                  f"each: pass 1 (epoch 0, start-up counted), then {args.pairs} pairs of passes (pair i: epoch i of "
                  "both, back to back); each figure the raw pass's time / the other's\n", flush=True)
            runs = overhead(comparisons, db, args.samples, args.pairs, Path(tmp))
        if dataloaders:
            print(f"\nDataLoaders: {args.repeats} rounds of torch raw {' '.join(dataloaders)} (reversed in even "
                  "rounds), pass 1 each in a fresh process\n", flush=True)
            rounds = against_dataloaders(dataloaders, db, lists, args.samples, args.repeats, Path(tmp))
        device = args.step_wait
        if device is None and "torch" in adapters:
            import torch
            device = "cuda" if torch.cuda.is_available() else None
        waits = step_wait(db, device, args.steps) if device else None

    later = f"passes 2-{args.pairs + 1}"
    print(f"\nresults: {args.samples} samples; load average after the runs "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"  {'':44s} {'pass 1':>9s}  {'first batch':>11s}  {later:>11s}  {'CPU/pass = passes + kept':>25s}  "
          f"{'faults/pass':>11s}")
    for c, (raw, other) in runs.items():
        print(row(label[c], args.samples, other[:1], other[1:]))
        print(row("  its raw picpac.ImageStream(threads=2)", args.samples, raw[:1], raw[1:]))
    fresh = {"torch": "TorchLoader (torch), fresh processes", "raw": "raw picpac.ImageStream, fresh processes"}
    for n, passes_ in rounds.items():
        print(row(f"{fresh[n] if n in fresh else label[n]} ({args.repeats} rounds)", args.samples, passes_, []))

    if runs:
        print(f"\n  ratios: the rate's / its raw stream's, over the {args.pairs} pairs: the median (its 95% confidence "
              "interval; the lowest and highest pair)")
    for c, (raw, other) in runs.items():
        ratios = [a["seconds"] / b["seconds"] for a, b in zip(raw[1:], other[1:])]
        pass_1 = raw[0]["seconds"] / other[0]["seconds"]
        if c == "control":
            print(f"  {'control (raw / raw)':26s} {later}: {summary(ratios)}   (two identical loaders: the measure's "
                  f"own spread; pass 1: {pass_1:.3f})")
            continue
        verdict = "PASS" if statistics.median(ratios) >= TARGET else "FAIL"
        print(f"  {label[c]:26s} {later}: {summary(ratios)}   target >= {TARGET}   {verdict}   (pass 1, start-up "
              f"counted: {pass_1:.3f})")
    for n, loader in itertools.product(dataloaders, ("torch", "raw")):
        ratios = sorted(b["seconds"] / a["seconds"] for a, b in zip(rounds[loader], rounds[n]))
        name = label["torch"] if loader == "torch" else "raw picpac.ImageStream"
        print(f"  {name:26s} / {label[n]}   pass 1: {statistics.median(ratios):5.2f} (rounds "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f})")
    if waits is None:
        print("\nnot measured here: the step wait (no CUDA device; --step-wait cpu runs the loop on the CPU)")
    else:
        print(f"\nstep wait, a ResNet-50-like loop on {device}, median of {args.steps} steps: "
              f"{1000 * waits['without']:.1f} ms without DevicePrefetcher, {1000 * waits['with']:.1f} ms with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
