"""Run a target's cases in worker processes that may crash or hang, and report what happened.

Case ``k`` of a run with seed ``s`` is ``target.case(s, k)``: the same bytes in any process, so a worker
needs only case numbers, and the parent rebuilds the input of a case that crashed (a signal: SIGSEGV,
SIGBUS, SIGABRT, the kernel's OOM killer) or hung (no progress for ``timeout`` seconds) and saves it.
Workers are forked from a clean forkserver, each runs a batch of cases under an address-space limit
(a huge allocation is a MemoryError there, which the contract forbids, instead of a swapping machine),
and reports its peak resident memory (VmHWM). A fresh worker takes over after a crash or a hang.
"""
from __future__ import annotations

import glob
import hashlib
import multiprocessing
import os
import resource
import shutil
import signal
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MEMORY_LIMIT = 4 << 30
"""Address space per worker: numpy, OpenCV, h5py and their threads take ~1 GiB of it before any case."""


@dataclass
class Failure:
    signature: str
    count: int
    first_case: int
    message: str
    trace: str
    known: str | None = None
    saved: str | None = None


@dataclass
class Report:
    target: str
    seed: int
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    failures: dict[str, Failure] = field(default_factory=dict)
    crashes: list[tuple[int, str, str | None, str | None]] = field(default_factory=list)  # case, why, input, known bug
    hangs: list[tuple[int, str | None]] = field(default_factory=list)
    peak_rss_kb: int = 0
    seconds: float = 0.0

    @property
    def new_failures(self) -> dict[str, Failure]:
        return {s: f for s, f in self.failures.items() if f.known is None}

    @property
    def clean(self) -> bool:
        """No crash, no hang, no failure that is not a known bug."""
        return not (self.new_failures or self.new_crashes or self.hangs)

    @property
    def new_crashes(self) -> list:
        return [c for c in self.crashes if c[3] is None]

    def summary(self) -> str:
        rate = self.cases / self.seconds if self.seconds else 0.0
        lines = [f"target {self.target}: {self.cases} cases (seed {self.seed}) in {self.seconds:.1f} s "
                 f"({rate:.0f}/s), peak RSS {self.peak_rss_kb / 1024:.0f} MiB per worker",
                 f"  outcomes: {dict(self.outcomes.most_common())}",
                 f"  failures: {sum(f.count for f in self.new_failures.values())} new, "
                 f"{sum(f.count for f in self.failures.values() if f.known)} known; "
                 f"crashes: {len(self.new_crashes)} new, {len(self.crashes) - len(self.new_crashes)} known; "
                 f"hangs: {len(self.hangs)}"]
        for f in sorted(self.failures.values(), key=lambda f: -f.count):
            tag = f"known {f.known}" if f.known else "NEW"
            lines.append(f"  [{tag}] {f.count} x {f.signature}: {f.message[:300]}")
            lines.append(f"      first case {f.first_case}{'; input ' + f.saved if f.saved else ''}")
        for case, why, saved, known in self.crashes:
            lines.append(f"  [CRASH{' known ' + known if known else ''}] case {case}: {why}; input {saved}")
        for case, saved in self.hangs:
            lines.append(f"  [HANG] case {case}; input {saved}")
        return "\n".join(lines)


def _hwm_kb(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _worker(name: str, seed: int, cases: list[int], shared: Any, conn: Any, memory_limit: int, quiet: bool,
            seeds: list) -> None:
    """Run ``cases``; ``shared`` = [case running (-1: building seeds), cases done]."""
    if quiet:  # libpng, libjpeg, OpenCV and libtiff print a line for each damaged image
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    if memory_limit:
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, hard))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM from here on: not the forkserver's
    except OSError:
        pass
    from .common import clean_scratch, signature
    from .targets import TARGETS
    target = TARGETS[name]
    shared[0] = -1
    target.use_seeds(seeds)
    seen: set[str] = set()
    try:
        for k in cases:
            shared[0] = k
            try:
                key = target.run(target.case(seed, k))
            except Exception as exc:  # the contract's violations: reported, and the worker goes on
                sig = signature(exc)
                key = "FAIL " + sig
                if sig not in seen:
                    seen.add(sig)
                    conn.send(("fail", k, sig, f"{type(exc).__name__}: {exc}"[:1000],
                               "".join(traceback.format_exception(exc))[-4000:]))
                del exc
            conn.send(("case", key))  # one message per case: nothing is lost when a later case crashes
            shared[1] += 1
        conn.send(("done", _hwm_kb()))
    finally:
        clean_scratch()


def _context() -> multiprocessing.context.BaseContext:
    """A forkserver (spawn where there is none): workers start from a clean single-threaded process, not
    from a parent whose threads may hold locks; it imports the targets once (when this starts it)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["fuzz.targets"])
    return ctx


def _save(out_dir: str | None, target: Any, seed: int, k: int, kind: str) -> str | None:
    if out_dir is None:
        return None
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{target.name}-seed{seed}-case{k}-{kind}.bin")
    with open(path, "wb") as f:
        f.write(target.case(seed, k))
    return path


def run(name: str, cases: int, *, seed: int = 0, jobs: int = 1, timeout: float = 10.0, batch: int = 5000,
        out_dir: str | None = None, memory_limit: int = MEMORY_LIMIT, first: int = 0,
        progress: Any = None, quiet: bool = True) -> Report:
    """Run cases ``first`` .. ``first + cases - 1`` of target ``name`` on ``jobs`` workers; ``out_dir``: where
    the inputs of failures, crashes and hangs are saved (None: nowhere); ``quiet``: the workers' stderr
    goes to /dev/null (the C libraries' messages about damaged input)."""
    from .targets import TARGETS
    target = TARGETS[name]
    seeds = target.seed_list()
    report = Report(name, seed)
    ctx = _context()
    todo = [list(range(first + j, first + cases, jobs)) for j in range(jobs)]
    queue = [part[i:i + batch] for part in todo for i in range(0, len(part), batch)]
    queue.sort(key=lambda part: part[0])
    running: list[dict] = []
    start = time.monotonic()

    def launch(part: list[int]) -> None:
        parent, child = ctx.Pipe(duplex=False)
        shared = ctx.Array("q", [-1, 0], lock=False)
        proc = ctx.Process(target=_worker, args=(name, seed, part, shared, child, memory_limit, quiet, seeds), daemon=True)
        proc.start()
        child.close()
        running.append({"proc": proc, "conn": parent, "shared": shared, "part": part, "case": -2,
                        "since": time.monotonic(), "done": False, "counted": 0})

    def receive(w: dict) -> None:
        while w["conn"].poll():
            try:
                message = w["conn"].recv()
            except (EOFError, OSError):
                return
            if message[0] == "fail":
                _, k, sig, text, trace = message
                failure = report.failures.get(sig)
                if failure is None:
                    known = target.known_bug(sig)
                    report.failures[sig] = Failure(sig, 0, k, text, trace, known,
                                                   None if known else _save(out_dir, target, seed, k,
                                                                            "fail-" + hashlib.sha1(sig.encode()).hexdigest()[:8]))
                elif k < failure.first_case:
                    failure.first_case = k
            elif message[0] == "case":
                key = message[1]
                if key.startswith("FAIL "):
                    report.failures[key[5:]].count += 1
                else:
                    report.outcomes[key] += 1
            elif message[0] == "done":
                w["done"] = True
                report.peak_rss_kb = max(report.peak_rss_kb, message[1])

    def finish(w: dict, why: str | None) -> None:
        """A worker ended (why: None) or is killed (why: 'hang'); a crash or hang restarts after its case."""
        proc = w["proc"]
        if why == "hang":
            proc.kill()
        proc.join()
        receive(w)
        report.cases += w["shared"][1]
        running.remove(w)
        if w["done"] and why is None:
            return
        for left in glob.glob(f"/dev/shm/picpac-fuzz-{proc.pid}-*") + glob.glob(f"{tempfile.gettempdir()}/picpac-fuzz-{proc.pid}-*"):
            shutil.rmtree(left, ignore_errors=True)  # a killed worker's scratch directory
        k = w["shared"][0]
        if k == -1:
            raise RuntimeError(f"target {name}: a worker failed while building the seeds (exit {proc.exitcode})")
        if why == "hang":
            report.hangs.append((k, _save(out_dir, target, seed, k, "hang")))
            report.cases += 1
        else:
            code = proc.exitcode
            name_ = signal.Signals(-code).name if code is not None and code < 0 else f"exit-{code}"
            what = f"killed by {name_}" if code is not None and code < 0 else f"exit status {code}"
            report.crashes.append((k, what, _save(out_dir, target, seed, k, "crash"),
                                   target.known_bug(f"{name_} at crash")))
            report.cases += 1
        rest = w["part"][w["part"].index(k) + 1:]
        if rest:
            queue.insert(0, rest)

    try:
        while queue or running:
            while queue and len(running) < jobs:
                launch(queue.pop(0))
            time.sleep(0.05)
            for w in list(running):
                receive(w)
                report.peak_rss_kb = max(report.peak_rss_kb, _hwm_kb(w["proc"].pid))
                if not w["proc"].is_alive():
                    finish(w, None)
                    continue
                case = w["shared"][0]
                if case != w["case"]:
                    w["case"], w["since"] = case, time.monotonic()
                elif time.monotonic() - w["since"] > (timeout if case >= 0 else max(120.0, timeout)):
                    finish(w, "hang")
            if progress is not None:
                progress(report.cases + sum(w["shared"][1] for w in running), report)
    finally:
        for w in running:
            w["proc"].kill()
            w["proc"].join()
    report.seconds = time.monotonic() - start
    return report


def check_case(name: str, data: bytes) -> str:
    """Run one input in this process; an exception of a known bug (fuzz/known.py) gives ``known <bug>``,
    any other propagates (for the hypothesis tests, which call targets directly)."""
    from .common import signature
    from .targets import TARGETS
    target = TARGETS[name]
    try:
        return target.run(data)
    except Exception as exc:
        bug = target.known_bug(signature(exc))
        if bug is None:
            raise
        return f"known {bug}"


def replay(name: str, data: bytes) -> str:
    """Run one input in this process (a traceback on failure): reproduce a saved case."""
    from .targets import TARGETS
    return TARGETS[name].run(data)
