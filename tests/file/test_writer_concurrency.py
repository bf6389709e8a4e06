"""Writers in several processes at once: a second Writer gets WriterBusyError or both record sets survive."""
from __future__ import annotations

import multiprocessing
import os
import time

import pytest

import picpac

from helpers import payload

TRIALS = 10
RECORDS = 5


def _append_as(path: str, who: int, start, results) -> None:
    start.wait()
    try:
        with picpac.Writer(path, append=True) as w:
            for i in range(RECORDS):
                w.append(image=payload(100 * who + i), label=who)
            time.sleep(0.2)  # hold the lock while the other process tries
    except picpac.WriterBusyError:
        results.put((who, "busy"))
    else:
        results.put((who, "ok"))


def test_two_appenders_creating_a_database_lose_no_records(tmp_path):
    context = multiprocessing.get_context("fork")
    for trial in range(TRIALS):
        path = str(tmp_path / f"db{trial}.picpac")
        start, results = context.Barrier(2), context.Queue()
        procs = [context.Process(target=_append_as, args=(path, who, start, results)) for who in (1, 2)]
        for p in procs:
            p.start()
        outcome = dict(results.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(30)
        assert sorted(outcome.values()) in (["busy", "ok"], ["ok", "ok"])
        with picpac.Reader(path) as r:
            stored = sorted(bytes(x["image"]) for x in r)
        written = sorted(payload(100 * who + i) for who, how in outcome.items() if how == "ok" for i in range(RECORDS))
        assert stored == written, f"trial {trial}: {outcome}"
        assert sorted(os.listdir(tmp_path)) == sorted(f"db{t}.picpac" for t in range(trial + 1))  # no temp left


def test_replacing_while_an_appender_holds_the_lock_is_refused(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"old")
    appender = picpac.Writer(path, append=True)
    appender.append(image=b"appended")
    replacer = picpac.Writer(path, overwrite=True)
    replacer.append(image=b"replacement")
    with pytest.raises(picpac.WriterBusyError, match="another Writer is appending"):
        replacer.commit()
    appender.close()
    replacer.commit()  # the refused commit left the replacing Writer usable: it replaces once the lock is free
    replacer.close()
    with picpac.Reader(path) as r:
        assert [bytes(x["image"]) for x in r] == [b"replacement"]
    assert os.listdir(tmp_path) == ["db.picpac"]


def test_appender_keeps_its_commit_when_a_replacement_is_refused(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"old")
    with picpac.Writer(path, append=True) as appender:
        appender.append(image=b"appended")
        with pytest.raises(picpac.WriterBusyError):
            with picpac.Writer(path, overwrite=True) as replacer:
                replacer.append(image=b"replacement")
    with picpac.Reader(path) as r:
        assert [bytes(x["image"]) for x in r] == [b"old", b"appended"]
    assert os.listdir(tmp_path) == ["db.picpac"]


def test_append_to_a_new_path_holds_the_lock_from_the_start(tmp_path):
    path = tmp_path / "new.picpac"
    with picpac.Writer(path, append=True) as first:
        with picpac.Reader(path) as r:
            assert len(r) == 0  # an empty database from the start, locked by its appender
        with pytest.raises(picpac.WriterBusyError):
            picpac.Writer(path, append=True)
        first.append(image=b"a")
    with picpac.Writer(path, append=True) as second:
        second.append(image=b"b")
    with picpac.Reader(path) as r:
        assert [bytes(x["image"]) for x in r] == [b"a", b"b"]


def test_aborted_append_to_a_new_path_leaves_nothing(tmp_path):
    path = tmp_path / "new.picpac"
    with pytest.raises(RuntimeError):
        with picpac.Writer(path, append=True) as w:
            w.append(image=b"x")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with picpac.Writer(path, append=True) as w:
        w.append(image=b"x")
        w.commit()
        w.append(image=b"y")
        w.abort()
    with picpac.Reader(path) as r:  # what was committed stays
        assert [bytes(x["image"]) for x in r] == [b"x"]

