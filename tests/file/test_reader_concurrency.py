"""Readers opened while a Writer in another process commits see the previous or the new commit."""
from __future__ import annotations

import multiprocessing
import warnings

import numpy as np

import picpac

from helpers import payload

OPENS = 4000


def _commit_forever(path: str, started, stop) -> None:
    with picpac.Writer(path, append=True, sync=False) as w:
        i = len(w)
        started.set()
        while not stop.is_set():
            w.append(image=payload(i), label=i)
            w.commit()
            i += 1


def test_readers_during_commits_see_whole_commits(tmp_path):
    path = str(tmp_path / "db.picpac")
    with picpac.Writer(path) as w:
        w.append(image=payload(0), label=0)
    context = multiprocessing.get_context("fork")
    started, stop = context.Event(), context.Event()
    writer = context.Process(target=_commit_forever, args=(path, started, stop))
    writer.start()
    try:
        assert started.wait(30)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "damaged slot" warning either
            for _ in range(OPENS):
                with picpac.Reader(path) as r:
                    n = len(r)
                    assert np.array_equal(r.labels, np.arange(n))
                    assert bytes(r.read(n - 1, check=True)["image"]) == payload(n - 1)
                seen.append(n)
    finally:
        stop.set()
        writer.join(30)
    assert seen == sorted(seen) and seen[-1] > seen[0]  # commits went on while the readers opened
