"""Long fuzz runs by hand (docs/reliability.md): ``python fuzz/run.py TARGET --cases 100000 [--seed S] [--jobs N]``.

Runs the cases in forked workers: a crash (a signal) or a hang (no progress for ``--timeout`` seconds)
is recorded, its input saved under ``--out`` (a new temp directory by default), and a fresh worker
goes on after it. Prints cases run, outcomes, failures by signature (new ones, and known bugs apart),
crashes, hangs and the workers' peak resident memory (VmHWM). The exit status is 1 when anything new
failed. ``--replay FILE`` runs one saved input in this process, with its traceback; ``--list`` names
the targets; ``all`` runs every target in turn.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz import harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", help="a target name, several joined by commas, or 'all'")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--first", type=int, default=0, help="the first case number (to resume a run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds without progress that make a hang")
    parser.add_argument("--batch", type=int, default=5000, help="cases per worker process")
    parser.add_argument("--memory", type=float, default=harness.MEMORY_LIMIT / 2**30, help="GiB of address space per worker")
    parser.add_argument("--out", help="where inputs of failures, crashes and hangs are saved")
    parser.add_argument("--json", help="append the report as one JSON line to this file")
    parser.add_argument("--replay", help="run this saved input in this process")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)

    multiprocessing.set_forkserver_preload(["fuzz.targets"])
    from fuzz.targets import TARGETS
    if args.list or not args.target:
        for target in TARGETS.values():
            print(f"{target.name:24} {target.doc}")
        return 0
    if args.replay:
        with open(args.replay, "rb") as f:
            print(harness.replay(args.target, f.read()))
        return 0
    names = [n for n in TARGETS if n != "selftest"] if args.target == "all" else args.target.split(",")
    out = args.out or tempfile.mkdtemp(prefix="picpac-fuzz-")
    status = 0
    for name in names:
        missing = TARGETS[name].available()
        if missing:
            print(f"target {name}: skipped ({missing})")
            continue
        last = [0.0]

        def progress(done: int, report: harness.Report) -> None:
            now = time.monotonic()
            if now - last[0] > 30 and sys.stderr.isatty() or now - last[0] > 120:
                last[0] = now
                print(f"  {name}: {done}/{args.cases} cases", file=sys.stderr, flush=True)

        report = harness.run(name, args.cases, seed=args.seed, jobs=args.jobs, timeout=args.timeout,
                             batch=args.batch, out_dir=out, memory_limit=int(args.memory * 2**30),
                             first=args.first, progress=progress)
        print(report.summary(), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({
                    "target": name, "seed": args.seed, "first": args.first, "cases": report.cases,
                    "seconds": round(report.seconds, 1), "jobs": args.jobs, "peak_rss_mib": round(report.peak_rss_kb / 1024),
                    "outcomes": dict(report.outcomes),
                    "failures": {s: [f.count, f.known, f.first_case, f.saved] for s, f in report.failures.items()},
                    "crashes": report.crashes, "hangs": report.hangs}) + "\n")
        if not report.clean:
            status = 1
    print(f"inputs saved under {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
