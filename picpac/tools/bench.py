"""`picpac bench`: stream a database for a while and say how fast, where the time goes, and why."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import PicPacValueError
from ..stream.image_stream import ImageStream
from ..stream.job import usable_cores

WORKER_STAGES = ("read", "decode", "transform")
CONSUMER_STAGES = ("batch", "wait")
RAN_FULLY = 0.75
"""A worker thread on a core for less than this share of its time on samples was kept waiting."""
IDLE = 0.5
"""Cores idle on average: with fewer, no core stood idle, and threads that waited waited for a core, not the GIL."""


def idle_seconds() -> float | None:
    """Seconds the cores this process may run on have stood idle since boot (Linux's /proc/stat: idle and iowait),
    or None where that is not known."""
    try:
        mine = os.sched_getaffinity(0)
        with open("/proc/stat") as f:
            ticks = sum(int(fields[4]) + int(fields[5]) for fields in map(str.split, f)
                        if fields[0][:3] == "cpu" and fields[0][3:].isdigit() and int(fields[0][3:]) in mine)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return None


def parse_value(text: str) -> Any:
    """A ``key=value`` value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``["batch=64", "resize_width=224"]`` -> config dict; a pair without '=' raises naming it."""
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PicPacValueError(f"stream setting {pair!r} is not key=value (e.g. resize_width=224)")
        config[key.strip()] = parse_value(value.strip())
    return config


def measure(db: str, config: Mapping[str, Any], seconds: float,
            tick: Callable[[float, int], None] | None = None) -> dict[str, Any]:
    """Stream ``db`` for ``seconds`` (after a first batch to warm up) and return the measurements."""
    with ImageStream(db, **{"loop": True, **config, "profile": True}) as stream:
        batches = iter(stream)
        next(batches)
        warm = stream.stats()
        idle = idle_seconds()
        start = time.perf_counter()
        samples, last_tick, in_next = 0, start, 0.0
        while (now := time.perf_counter()) - start < seconds:
            samples += len(next(batches)[0])
            in_next += time.perf_counter() - now
            if tick is not None and now - last_tick >= 0.5:
                tick(now - start, samples)
                last_tick = now
        elapsed = time.perf_counter() - start
        idle_now = idle_seconds()
        stats = stream.stats()
        workers, backend = stats["worker_count"], stream.config.parallelism.backend
    if "stages" not in stats:
        raise PicPacValueError(f"stage times come from the per-sample path on threads; this stream runs the "
                               f"{stats.get('path', 'batch')} path with backend={backend!r} "
                               "(pass backend=thread vectorize=false to profile it)")
    stages = {k: stats["stages"][k] - warm["stages"][k] for k in stats["stages"]}
    busy = {k: v - warm["workers"].get(k, 0.0) for k, v in stats["workers"].items()}
    cpu = {k: v - warm["cpu"].get(k, 0.0) for k, v in stats["cpu"].items()}
    counts = {k: stats.get(k, 0) - warm.get(k, 0)
              for k in ("fused_samples", "python_samples", "device_decoded", "cpu_decoded")}
    measured = backend != "process"
    """With backend=process the stage clocks run in the worker processes and are not sent back: only the
    consumer's time in next() (waiting for batches and assembling them) is measured, here."""
    if not measured:
        stages = {**dict.fromkeys(WORKER_STAGES), "batch": None, "wait": None}
        busy, cpu = {}, {}
    return {"samples": samples, "seconds": elapsed, "rate": samples / elapsed, "stages": stages, "busy": busy,
            "cpu": cpu, "cores": usable_cores(), "workers": workers,
            "idle_cores": None if idle is None or idle_now is None else (idle_now - idle) / elapsed,
            "processed": stats["processed"] - warm["processed"],
            "backend": backend, "workers_measured": measured, "in_next": in_next, "path": stats["path"],
            "fused_reason": stats["fused_reason"], **counts, "workers_reason": stats["workers_reason"],
            "device": stream.config.parallelism.device, "device_decoder": stats.get("device_decoder")}


def path(result: dict[str, Any]) -> str:
    """Which way the samples went, in words: the batch path, the fused C path (and how many of the samples), or
    Python and why."""
    if result["path"] == "batch":
        return "batch (whole batches of array records in NumPy)"
    if result.get("device") is not None:
        on, off = result["device_decoded"], result["cpu_decoded"]
        return (f"the device stage on {result['device']} ({result['device_decoder']}): {on:,} of {on + off:,} samples "
                f"decoded there, {off:,} on the CPU; the workers read and plan")
    if result["fused_reason"] is not None:
        return f"Python per sample (no fused C path: {result['fused_reason']})"
    fused, python = result["fused_samples"], result["python_samples"]
    return (f"fused C, one call per sample without the GIL: {fused:,} of {fused + python:,} samples "
            f"({python:,} took the Python path: not JPEG, or a step that reads the pixels)")


def waited(result: dict[str, Any]) -> tuple[float, float] | None:
    """(share of their time on samples the worker threads ran on a core, cores they used), where they were kept
    waiting (ran for less than RAN_FULLY of it); else None."""
    busy, cpu = sum(result["busy"].values()), sum(result["cpu"].values())
    if len(result["busy"]) < 2 or busy <= 0:
        return None
    ran, used = cpu / busy, cpu / result["seconds"]
    return None if ran >= RAN_FULLY else (ran, used)


def contended(result: dict[str, Any]) -> str | None:
    """Why the worker threads waited for a core, or None: no core stood idle while they waited, so other work (other
    processes) held the cores, whatever the GIL did."""
    kept, idle = waited(result), result.get("idle_cores")
    if kept is None or idle is None or idle >= IDLE:
        return None
    ran, used = kept
    return (f"contention: the worker threads ran on a core only {ran:.0%} of the time they spent on samples and used "
            f"{used:.1f} of {result['cores']} cores, while no core stood idle ({idle:.1f} idle on average): other "
            "processes hold the cores. More threads or backend=process will not help; free the cores (or give the "
            "stream fewer workers than the cores left)")


def gil_bound(result: dict[str, Any]) -> str | None:
    """Why the worker threads are held back by the GIL, or None: from each thread's CPU time against its time on
    samples. Threads that ran on a core for much less of that time than they spent, while cores stood idle,
    waited for the GIL (where no core stood idle they waited for a core: :func:`contended`)."""
    kept = waited(result)
    if kept is None or contended(result) is not None:
        return None
    ran, used = kept
    if used > result["cores"] - 1 + 0.5:
        return None
    fix = "the fused C path" if result["fused_reason"] is not None else "fewer Python steps per sample"
    why = f" ({result['fused_reason']})" if result["fused_reason"] is not None else ""
    return (f"the GIL: the worker threads ran on a core only {ran:.0%} of the time they spent on samples and used "
            f"{used:.1f} of {result['cores']} cores, so they queued for the GIL; more threads will not help. Fix: "
            f"{fix}{why}, or backend=process (workers=auto measures this and picks)")


def bound(result: dict[str, Any]) -> str:
    """Which stage limits the throughput, in words (only what was measured)."""
    if not result.get("workers_measured", True):
        share = result["in_next"] / result["seconds"]
        if share < 0.1:
            return (f"the consumer: it spent only {share:.0%} of the time waiting for batches, so the code using "
                    "the batches sets the pace; more workers will not help")
        return (f"the workers (the consumer spent {share:.0%} of the time waiting for batches); which of their "
                "stages is not measured with backend=process: run with backend=thread to see it")
    wait_share = result["stages"]["wait"] / result["seconds"]
    if wait_share < 0.1:
        return (f"the consumer: it waited only {wait_share:.0%} of the time, so batching "
                "(or the code using the batches) sets the pace; more threads will not help")
    held = contended(result) or gil_bound(result)
    if held is not None:
        return held
    worker = max(WORKER_STAGES, key=lambda k: result["stages"][k])
    busy = sum(result["busy"].values()) / max(1, len(result["busy"])) / result["seconds"]
    more = "more threads may help" if busy < 0.8 else "the workers are busy: more cores or less work per sample"
    return f"{worker} on the workers (they were {busy:.0%} busy; the consumer waited {wait_share:.0%}); {more}"


def report(result: dict[str, Any]) -> str:
    """The human-readable report of one measurement."""
    per = max(1, result["processed"])
    lines = [f"throughput: {result['rate']:,.0f} img/s ({result['samples']:,} samples in "
             f"{result['seconds']:.1f} s, {result['workers']} workers)", f"path: {path(result)}"]
    if result["workers_reason"]:
        lines.append(f"workers=auto: {result['backend']}, {result['workers']} workers: {result['workers_reason']}")
    if not result.get("workers_measured", True):
        lines.append(f"time per sample (ms): workers: not measured (backend={result['backend']}: their stage "
                     "clocks run in the worker processes); consumer: waiting for and assembling batches "
                     f"{1000 * result['in_next'] / max(1, result['samples']):.3f}")
        lines.append("worker busy: not measured")
        lines.append(f"bound by: {bound(result)}")
        return "\n".join(lines)
    worker_ms = ", ".join(f"{k} {1000 * result['stages'][k] / per:.3f}" for k in WORKER_STAGES)
    consumer_ms = ", ".join(f"{k} {1000 * result['stages'][k] / max(1, result['samples']):.3f}"
                            for k in CONSUMER_STAGES)
    lines.append(f"time per sample (ms): workers: {worker_ms}; consumer: {consumer_ms}")
    shares = ", ".join(f"{name} {seconds / result['seconds']:.0%} (ran {result['cpu'][name] / max(seconds, 1e-9):.0%})"
                       for name, seconds in sorted(result["busy"].items()))
    lines.append(f"worker busy (and the share of it on a core): {shares}")
    lines.append(f"bound by: {bound(result)}")
    return "\n".join(lines)


def auto_threads(db: str, config: Mapping[str, Any], seconds: float,
                 echo: Callable[[str], Any]) -> tuple[int, dict[str, Any]]:
    """Try 1, 2, ... up to twice the cores; the thread count with the best throughput and its result."""
    best: tuple[int, dict[str, Any]] | None = None
    for threads in range(1, 2 * usable_cores() + 1):
        result = measure(db, {**config, "threads": threads}, seconds)
        echo(f"threads {threads}: {result['rate']:,.0f} img/s")
        if best is None or result["rate"] > best[1]["rate"]:
            best = threads, result
    assert best is not None
    return best
