"""How much of a thread-backend stream's wall time holds the GIL, and the thread scaling that allows (issue 27, item 2).

The GIL-held share is measured with gilknocker (a maintained tool, `pip install gilknocker`): a native
thread tries to take the GIL every --interval microseconds and reports the share of its time spent waiting,
which is the share of wall time some Python thread held it. Before the stream, three workloads of known
share calibrate it: a thread that sleeps (about 0), a thread looping in Python (about 1) and one that
loops for 2 ms and sleeps for 2 ms (about 0.5); a run whose calibration is off says so.

Then one pass of each workload of benchmarks/loaders.py (W1: RandomResizedCrop 224 + h-flip, W2: resize
shorter side 256 + centre crop 224; uint8 NHWC batches of 64 over the 250 ImageNet JPEGs repeated to
--samples) per thread count. For each it prints img/s, the GIL-held share h, the GIL-held time per sample,
and 1 / h at one thread: the most that any number of threads can speed the stream up, since the GIL-held
parts of the samples run one at a time (the issue's target for W1: h <= 1/20, a bound of >= 20x). Each
workload runs on the Python path (fused=False) and, where this machine has it, the fused C path (fused=True).

With ``--stage`` it measures the device stage's thread instead (issue 38, item 5): W1 samples of the 250 JPEGs are
planned once (on CUDA where torch sees it; else device='cpu', their JPEGs decoded as on CUDA: nvImageCodec's regions
over its CPU backend), then the stage makes batches of --batch of them in one thread while gilknocker watches: the
GIL-held time per sample (torch kernels and waits for the GPU release the GIL; what is left is Python and torch's
dispatch), and the torch operators per batch (torch's profiler).

    python benchmarks/gil.py [--samples 2000] [--threads 1,2] [--interval 200]
    python benchmarks/gil.py --stage [--batch 250] [--repeats 8] [--device cuda|cpu]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import BATCH, SIZE, picpac_transforms, prepare  # noqa: E402

import picpac  # noqa: E402

try:
    from gilknocker import KnockKnock
except ImportError as _exc:  # reported by main(): the module itself stays importable
    KnockKnock = None
    _MISSING: ImportError | None = _exc
else:
    _MISSING = None

CALIBRATION = (("sleeping thread", 0.0), ("Python loop", 1.0), ("2 ms loop / 2 ms sleep", 0.5))
TOLERANCE = 0.15
"""How far a calibration share may be from its expected value before the run is flagged."""


def held_share(work, interval: int) -> tuple[float, float]:
    """(GIL-held share of wall time, seconds) while ``work()`` runs in this thread."""
    knocker = KnockKnock(interval)
    knocker.start()
    start = time.perf_counter()
    try:
        work()
    finally:
        seconds = time.perf_counter() - start
        knocker.stop()
    return knocker.contention_metric, seconds


def calibration(kind: str, seconds: float = 1.0) -> None:
    """A thread whose GIL-held share is known (CALIBRATION), joined before returning."""
    def run() -> None:
        end = time.perf_counter() + seconds
        while (now := time.perf_counter()) < end:
            if kind == "sleeping thread":
                time.sleep(0.01)
            elif kind == "Python loop":
                sum(range(1000))
            else:
                busy = now + 0.002
                while time.perf_counter() < busy:
                    sum(range(100))
                time.sleep(0.002)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def one_pass(db: str, samples: int, workload: str, threads: int, fused: bool) -> None:
    with picpac.ImageStream(db, loop=False, batch=BATCH, threads=threads, dtype="uint8", order="NHWC",
                            colorspace="BGR", shuffle=workload == "W1", fused=fused,
                            transforms=picpac_transforms(workload)) as stream:
        n = sum(len(images) for images, _, _ in stream)
    stats = stream.stats()
    assert n == samples, f"a pass delivered {n} of {samples} samples"
    assert stats["path"] == "sample" and (stats["fused_reason"] is None) == fused, stats["fused_reason"]


def stage_share(batch: int, repeats: int, interval: int, device: str | None) -> None:
    """The device stage's GIL-held time per sample and torch operators per batch, on planned W1 samples."""
    import torch
    from device_stage import emulate_cuda_decoding

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        emulate_cuda_decoding()
    wait = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def batches(n: int) -> None:
        for _ in range(n):
            stage(planned)
            wait()
    with tempfile.TemporaryDirectory(prefix="picpac-gil-") as tmp:
        *_, db, note = prepare(tmp, 250, False)
        with picpac.ImageStream(db, device=device, batch=batch, loop=False, dtype="uint8", order="NHWC",
                                transforms=picpac_transforms("W1")) as s:
            job = s._pipeline.job
            planned = [job((i, i, 0, 0, i % 250, 0.0))[0] for i in range(batch)]
            stage = job.stage
            batches(1)  # warm
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                batches(1)
            ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
            share, seconds = held_share(lambda: batches(repeats), interval)
    held = share * seconds / (repeats * batch) * 1e6
    print(f"device stage on {device} ({stage.decoder_name}), W1 batches of {batch} planned samples ({note}):")
    print(f"  {repeats * batch / seconds:,.0f} img/s on one thread; GIL held {share:.3f} of the time: "
          f"{held:.1f} us per sample; {ops} torch operators per batch ({ops / batch:.1f} per sample)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--interval", type=int, default=200, help="gilknocker's polling interval in microseconds")
    ap.add_argument("--stage", action="store_true", help="the device stage's thread (device='cpu', as on CUDA)")
    ap.add_argument("--batch", type=int, default=250, help="--stage: samples per batch")
    ap.add_argument("--repeats", type=int, default=8, help="--stage: batches measured")
    ap.add_argument("--device", default=None, help="--stage: cuda or cpu (default: cuda where torch sees one)")
    args = ap.parse_args()
    if _MISSING is not None:
        print(f"benchmarks/gil.py needs gilknocker, which is not a picpac dependency ({_MISSING}).\n"
              "Install it with: pip install gilknocker", file=sys.stderr)
        return 2
    if args.stage:
        stage_share(args.batch, args.repeats, args.interval, args.device)
        return 0
    counts = [int(t) for t in args.threads.split(",")]
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, picpac from "
          f"{os.path.dirname(picpac.__file__)}, region decoding {'on' if picpac.image.REGION_DECODE else 'off'}; "
          f"gilknocker polling every {args.interval} us; load average {os.getloadavg()[0]:.2f}")
    print("\ncalibration (GIL-held share, expected):")
    off = []
    for kind, expected in CALIBRATION:
        share, _ = held_share(lambda: calibration(kind), args.interval)
        off += [kind] if abs(share - expected) > TOLERANCE else []
        print(f"  {kind:26s} {share:5.2f}   expected {expected:.1f}")
    if off:
        print(f"  CALIBRATION OFF for {', '.join(off)}: the shares below are not to be trusted (a loaded machine?)")
    with tempfile.TemporaryDirectory(prefix="picpac-gil-") as tmp:
        *_, db, note = prepare(tmp, args.samples, False)
        print(f"\ndata: {note}; batches of {BATCH}, {SIZE}x{SIZE} uint8")
        paths = (False, True) if picpac.image.REGION_DECODE else (False,)
        for workload in ("W1", "W2"):
            one_pass(db, args.samples, workload, counts[0], paths[-1])  # warm the page cache and the code
            print(f"\n{workload}: path    threads  img/s   GIL-held share   GIL-held ms/sample   thread bound 1/share")
            for fused in paths:
                for threads in counts:
                    share, seconds = held_share(lambda: one_pass(db, args.samples, workload, threads, fused),
                                                args.interval)
                    held = share * seconds / args.samples * 1e3
                    bound = f"{1 / share:6.1f}x" if threads == 1 and share > 0 else ""
                    print(f"    {'fused' if fused else 'python':7s} {threads:7d} {args.samples / seconds:7.0f}   "
                          f"{share:14.3f}   {held:18.3f}   {bound}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
