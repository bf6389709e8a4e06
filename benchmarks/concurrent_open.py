"""Readers opened while a Writer in another process commits (issue 11 item 4c).

A child process appends one record and commits, in a loop (``sync=False``), while this process opens a
Reader as often as it can for ``--seconds``. Every open must see a whole commit: the script prints the
opens, the errors (by message) and the damaged-slot warnings, and the error rate.

    python benchmarks/concurrent_open.py [--seconds 10]
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import tempfile
import time
import warnings

import picpac


def _commit_forever(path: str, started, stop) -> None:
    with picpac.Writer(path, append=True, sync=False) as w:
        started.set()
        while not stop.is_set():
            w.append(image=os.urandom(200), label=len(w))
            w.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "db.picpac")
        with picpac.Writer(path) as w:
            w.append(image=b"first")
        context = multiprocessing.get_context("fork")
        started, stop = context.Event(), context.Event()
        writer = context.Process(target=_commit_forever, args=(path, started, stop))
        writer.start()
        started.wait(30)
        opens, warned, errors = 0, 0, collections.Counter()
        deadline = time.monotonic() + args.seconds
        try:
            while time.monotonic() < deadline:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        picpac.Reader(path).close()
                    except picpac.PicPacError as exc:
                        errors[str(exc).split(":", 2)[1].strip()] += 1
                warned += len(caught)
                opens += 1
        finally:
            stop.set()
            writer.join(30)
        with picpac.Reader(path) as r:
            commits = len(r) - 1
    failed = sum(errors.values())
    print(f"{opens:,} Reader opens during {commits:,} commits in {args.seconds:g} s: {failed} errors "
          f"({failed / opens:.3%}), {warned} damaged-slot warnings")
    for reason, count in errors.most_common():
        print(f"  {count:6,} x {reason}")


if __name__ == "__main__":
    main()
