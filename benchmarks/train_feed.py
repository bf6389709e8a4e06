"""A training step loop fed by each loader (issues 27 and 28): does the input keep the model busy?

One model, one optimiser, the same W1 input (RandomResizedCrop 224 + h-flip over the 250 ImageNet JPEGs of
../shared/data/imagenet-250 repeated to --samples, normalised with ImageNet's mean and std on the device), fed by
  synthetic   one uint8 batch already on the device, normalised every step: the model's own rate, the ceiling
  gpu         TorchLoader(device=...): the device stage (docs/gpu.md) decodes the JPEGs on the GPU (nvJPEG), crops,
              flips and normalises there; CPU threads only read and plan
  picpac      TorchLoader(workers=W, pin_memory on CUDA) + DevicePrefetcher (uint8 over the bus), thread backend
              (the fused C path where this machine has it), and backend='process'
  DataLoader  torch DataLoader(num_workers=W, pin_memory on CUDA, spawned workers) over the files, decoding with
              cv2 and with PIL (benchmarks/loaders.py's datasets)
W = the usable cores but one (picpac's default; --workers sets it). First each picpac feed alone (decode-only
img/s, no model), then for each model of --model each feed trains --steps steps after a
warm-up; the loop waits for the device before it asks for the next batch, so the time until that batch is there
is the wait for input. Printed per feed: img/s, the share of the loop spent waiting for input, the cores busy
(CPU seconds of this process and its workers per second, the training loop's own thread included), and img/s as a
ratio to the synthetic rate. On CUDA: torchvision's models (ResNet-50 and ResNet-18 by default), bf16 autocast,
channels_last, cudnn.benchmark. On the CPU it is a smoke test (the suite runs it with --model tiny): the rates
say nothing there, the model being as slow as the input. Issue 27's target on a 16-core H100/H200 machine:
picpac's best >= 0.9 of the synthetic rate for ResNet-50, or the reason from measurement (cores x the per-core
decode rate of the workload). Issue 28's targets there, for the gpu feed: ResNet-50 >= 0.95 of its synthetic rate
and waiting <= 5%, ResNet-18 >= 0.75.

    python benchmarks/train_feed.py [--model resnet50,resnet18|tiny] [--batch 256] [--steps 40] [--warm 8]
                                    [--samples 4000] [--workers W] [--decode-batches 20]
                                    [--feeds synthetic,gpu,threads,process,cv2,pil]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import FileDataset, _MISSING, _worker_init, picpac_transforms, prepare  # noqa: E402

from picpac.image.decoding import REGION_DECODE as FUSED  # noqa: E402
from picpac.stream.job import default_workers  # noqa: E402

MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
FEEDS = ("synthetic", "gpu", "threads", "process", "cv2", "pil")


def model_of(name: str, device: Any) -> Any:
    import torch
    if name == "tiny":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(8, 1000))
    else:
        import torchvision.models
        model = getattr(torchvision.models, name)()
    return model.to(device, memory_format=torch.channels_last)


def train(model: Any, batches: Iterator[tuple[Any, Any]], device: Any, steps: int, warm: int) -> tuple[float, float]:
    """(img/s, share of the loop's time spent waiting for input) over ``steps`` steps after ``warm`` ones."""
    import torch
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    waited = images_seen = 0.0
    start = time.perf_counter()
    for step in range(warm + steps):
        if step == warm:
            sync()
            start, waited, images_seen = time.perf_counter(), 0.0, 0
        sync()  # the last step is done: what follows until the batch is there is the wait for input
        asked = time.perf_counter()
        images, labels = next(batches)
        sync()
        waited += time.perf_counter() - asked
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        images_seen += images.shape[0]
    sync()
    seconds = time.perf_counter() - start
    return images_seen / seconds, waited / seconds


def normaliser(device: Any) -> Callable[[Any, Any], tuple[Any, Any]]:
    """A batch of uint8 NCHW or NHWC host tensors as normalised float32 channels_last on ``device`` (the constants
    made once, as DevicePrefetcher keeps them)."""
    import torch
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def normalise(images: Any, labels: Any) -> tuple[Any, Any]:
        if images.shape[-1] == 3:  # NHWC: the permuted view is channels_last already
            images = images.permute(0, 3, 1, 2)
        images = ((images.to(device, non_blocking=True).float() - mean) / std).contiguous(
            memory_format=torch.channels_last)
        return images, labels.to(device, non_blocking=True).long() % 1000
    return normalise


def synthetic(batch: int, device: Any) -> Iterator[tuple[Any, Any]]:
    import torch
    images = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    normalise = normaliser(device)
    while True:
        yield normalise(images, labels)


def picpac_feed(db: str, batch: int, workers: int, backend: str, device: Any) -> tuple[Iterator, Callable]:
    import torch

    from picpac.adapters.torch import DevicePrefetcher, TorchLoader
    loader = TorchLoader(db, memory_format="channels_last", pin_memory=device.type == "cuda", loop=True,
                         shuffle=True, batch=batch, dtype="uint8", colorspace="RGB", workers=workers, backend=backend,
                         transforms=picpac_transforms("W1"))
    feed = DevicePrefetcher(loader, device, dtype=torch.float32, mean=MEAN, std=STD)

    def batches() -> Iterator[tuple[Any, Any]]:
        for images, labels, _ in feed:
            yield images, labels.long() % 1000
    return batches(), loader.stream.close


def device_feed(db: str, batch: int, workers: int, device: Any) -> tuple[Iterator, Callable]:
    """TorchLoader(device=...): the device stage decodes (nvJPEG on CUDA), crops, flips and normalises there."""
    from picpac.adapters.torch import TorchLoader
    loader = TorchLoader(db, device=str(device), memory_format="channels_last", loop=True, shuffle=True, batch=batch,
                         colorspace="RGB", mean=MEAN, std=STD, workers=workers, transforms=picpac_transforms("W1"))

    def batches() -> Iterator[tuple[Any, Any]]:
        for images, labels, _ in loader:
            yield images, labels % 1000
    return batches(), loader.stream.close


def cpu_seconds() -> float:
    """CPU seconds of this process and its live descendants (DataLoader and picpac workers), from /proc."""
    def stat(pid: int) -> list[str]:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(stat(int(entry))[1])
            except (OSError, IndexError, ValueError):
                pass
    family, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        family.add(pid)
        todo += [child for child, parent in parents.items() if parent == pid and child not in family]
    total = 0.0
    for pid in family:
        try:
            fields = stat(pid)
            total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def decode_only(batches: Iterator[tuple[Any, Any]], device: Any, count: int) -> float:
    """img/s of a feed alone (no model), over ``count`` batches after two."""
    import torch
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        next(batches)
    sync()
    start, seen = time.perf_counter(), 0
    for _ in range(count):
        seen += next(batches)[0].shape[0]
    sync()
    return seen / (time.perf_counter() - start)


def dataloader_feed(paths: list[str], labels: list[int], decoder: str, batch: int, workers: int,
                    device: Any) -> Iterator[tuple[Any, Any]]:
    from torch.utils.data import DataLoader
    loader = DataLoader(FileDataset(paths, labels, decoder, "W1"), batch_size=batch, shuffle=True, drop_last=True,
                        num_workers=workers, pin_memory=device.type == "cuda", persistent_workers=True,
                        worker_init_fn=_worker_init, multiprocessing_context="spawn")
    normalise = normaliser(device)
    while True:
        for images, targets in loader:
            yield normalise(images, targets)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50,resnet18",
                    help="comma-separated torchvision model names, or 'tiny' (a smoke test)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--feeds", default=",".join(FEEDS), help=f"comma-separated subset of {','.join(FEEDS)}")
    ap.add_argument("--decode-batches", type=int, default=20,
                    help="batches of each picpac feed timed without a model first (decode-only img/s; 0: none)")
    args = ap.parse_args()
    if _MISSING is not None:
        print(f"benchmarks/train_feed.py needs torch and Pillow ({_MISSING}): pip install torch==2.13.0 pillow "
              "(and torchvision for its models)", file=sys.stderr)
        return 2
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    feeds = [f for f in args.feeds.split(",") if f]
    unknown = sorted(set(feeds) - set(FEEDS))
    if unknown:
        ap.error(f"unknown feeds {unknown}: choose from {', '.join(FEEDS)}")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (a smoke test: rates mean nothing)"
    print(f"models {args.model} on {where}, batch {args.batch}, {args.steps} steps after {args.warm}; "
          f"{os.cpu_count()} cores, {args.workers} workers; fused C path {'on' if FUSED else 'off'}")
    with tempfile.TemporaryDirectory(prefix="picpac-train-") as tmp:
        paths, labels, _, db, note = prepare(tmp, max(args.samples, args.batch), False)
        print(f"data: {note}\n")
        if args.decode_batches:
            for name in [f for f in feeds if f in ("gpu", "threads", "process")]:
                batches, close = feed_of(name, db, paths, labels, args, device)
                try:
                    rate = decode_only(iter(batches), device, args.decode_batches)
                finally:
                    close()
                print(f"  decode only: {LABELS[name].format(w=args.workers):45s} {rate:9,.0f} img/s", flush=True)
        for model_name in args.model.split(","):
            table(model_name, feeds, db, paths, labels, args, device)
    return 0


LABELS = {"synthetic": "synthetic (one batch on the device)",
          "gpu": "picpac device stage (device=...)",
          "threads": "picpac threads {w} + DevicePrefetcher",
          "process": "picpac backend=process {w} + DevicePrefetcher",
          "cv2": "DataLoader + cv2, {w} workers",
          "pil": "DataLoader + PIL, {w} workers"}


def feed_of(name: str, db: str, paths: list[str], labels: list[int], args: Any, device: Any
            ) -> tuple[Iterable, Callable[[], None]]:
    """One feed's batches and what closes it."""
    if name == "synthetic":
        return synthetic(args.batch, device), lambda: None
    if name == "gpu":
        return device_feed(db, args.batch, args.workers, device)
    if name in ("threads", "process"):
        return picpac_feed(db, args.batch, args.workers, "thread" if name == "threads" else "process", device)
    return dataloader_feed(paths, labels, name, args.batch, args.workers, device), lambda: None


def table(model_name: str, feeds: list[str], db: str, paths: list[str], labels: list[int], args: Any,
          device: Any) -> None:
    """Each feed training ``model_name``: img/s, the share of time waiting for input, the cores busy, and the ratio
    to the synthetic rate."""
    model = model_of(model_name, device)
    print(f"{model_name}:")
    results: list[tuple[str, float, float, float]] = []
    for name in feeds:
        batches, close = feed_of(name, db, paths, labels, args, device)
        label = LABELS[name].format(w=args.workers)
        try:
            cpu, wall = cpu_seconds(), time.perf_counter()
            rate, wait = train(model, iter(batches), device, args.steps, args.warm)
            cores = (cpu_seconds() - cpu) / (time.perf_counter() - wall)
        finally:
            close()
            del batches
        results.append((label, rate, wait, cores))
        print(f"  {label:45s} {rate:9,.0f} img/s   waiting {wait:5.0%}   {cores:5.1f} cores busy", flush=True)
    ceiling = dict((label, rate) for label, rate, _, _ in results).get(LABELS["synthetic"])
    print(f"\n{model_name + ': feed':45s} {'img/s':>9s}   {'waiting':>7s}   {'cores':>5s}   {'vs synthetic':>12s}")
    for label, rate, wait, cores in results:
        ratio = f"{rate / ceiling:11.2f}x" if ceiling else "           -"
        print(f"{label:45s} {rate:9,.0f}   {wait:7.0%}   {cores:5.1f}   {ratio}")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
