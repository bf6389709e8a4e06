"""picpac/compat/dataflow/parallel_map.py on its own: MultiThreadMapData, MultiProcessMapData and
MultiProcessMapAndBatchData, their exact outputs (strict: MapData's, in its order; else complete), errors from
map_func and from the source, restarts, image-sized datapoints, and their refusals.

Real threads and real worker processes; the clean fixture (conftest.py) checks that none is left behind.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter

import numpy as np
import pytest

from picpac.dataflow import (BatchData, DataFlowError, DataFromGenerator, MapData, MultiProcessMapAndBatchData,
                             MultiProcessMapAndBatchDataZMQ, MultiProcessMapData, MultiProcessMapDataZMQ,
                             MultiThreadMapData, RepeatedData)
from picpac.errors import PicPacValueError

from dataflow_helpers import double, numbers, take

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")


# -- what the workers run -------------------------------------------------------------------------------------
def jittery_double(dp):
    time.sleep((dp[0] * 7919 % 7) / 2000)  # results are done out of order
    return [dp[0] * 2]


def drop_odd(dp):
    return None if dp[0] % 2 else dp


def fail_on_7(dp):
    if dp[0] == 7:
        raise KeyError("seven")
    return dp


# -- exact outputs ------------------------------------------------------------------------------------------
def test_thread_map_strict_is_mapdata_in_order_and_non_strict_is_complete(clean):
    with MultiThreadMapData(numbers(40), 3, jittery_double, buffer_size=8, strict=True) as m:
        m.reset_state()
        assert len(m) == 40
        for _ in range(2):  # two passes, each exactly MapData's, in its order
            assert list(m) == [[2 * i] for i in range(40)]
    with MultiThreadMapData(numbers(10), 2, drop_odd, buffer_size=50, strict=True) as m:  # buffer > len: fine
        m.reset_state()
        assert list(m) == [[0], [2], [4], [6], [8]] == list(m)
    with MultiThreadMapData(numbers(40), 3, jittery_double, buffer_size=8) as m:
        m.reset_state()
        out = [dp[0] // 2 for dp in take(m, 120)]
    inputs = Counter(i % 40 for i in range(128))  # at most 8 in flight: the first 120 come from the first 128
    missing = inputs - Counter(out)
    assert not Counter(out) - inputs and sum(missing.values()) == 8


def test_process_map_strict_non_strict_and_batch(clean):
    with MultiProcessMapData(numbers(30), 2, jittery_double, buffer_size=6, strict=True) as m:
        m.reset_state()
        assert [list(m) for _ in range(2)] == [[[2 * i] for i in range(30)]] * 2
        it = iter(m)
        assert next(it) == [0]
        it.close()  # a pass left early: the next __iter__ is a whole new pass
        assert list(m) == [[2 * i] for i in range(30)]
    with MultiProcessMapData(numbers(30), 2, jittery_double, buffer_size=6) as m:
        m.reset_state()
        out = [dp[0] // 2 for dp in take(m, 60)]
    inputs = Counter(i % 30 for i in range(66))
    assert not Counter(out) - inputs and sum((inputs - Counter(out)).values()) == 6
    with MultiProcessMapAndBatchData(numbers(10), 1, double, batch_size=4, buffer_size=12) as mb:
        mb.reset_state()
        got = take(mb, 6)
    want = BatchData(MapData(RepeatedData(numbers(10), -1), double), 4)
    want.reset_state()
    assert len(mb) == 2
    assert [b[0].tolist() for b in got] == [b[0].tolist() for b in take(want, 6)]


def test_map_errors_reach_the_consumer_with_the_worker_traceback(clean):
    with MultiThreadMapData(numbers(20), 2, fail_on_7, buffer_size=4, strict=True) as m:
        m.reset_state()
        with pytest.raises(KeyError, match="seven") as info:
            list(m)
        assert "in fail_on_7" in "".join(traceback.format_exception(info.value))
        it = iter(m)  # the flow goes on: a new pass
        assert [next(it) for _ in range(7)] == [[i] for i in range(7)]
        it.close()
    with MultiProcessMapData(numbers(20), 2, fail_on_7, buffer_size=4, strict=True) as m:
        m.reset_state()
        with pytest.raises(KeyError, match="seven") as info:
            list(m)
        notes = "\n".join(info.value.__notes__)
        assert "traceback in picpac worker" in notes and "in fail_on_7" in notes
        it = iter(m)  # the flow goes on: a new pass
        assert [next(it) for _ in range(7)] == [[i] for i in range(7)]
        it.close()
    with MultiProcessMapAndBatchData(numbers(20), 2, fail_on_7, batch_size=2, buffer_size=8) as mb:
        mb.reset_state()
        with pytest.raises(KeyError, match="seven"):
            take(mb, 30)


# -- image-sized datapoints at the defaults (issue 25 item 3) -------------------------------------------------
def halve(dp):
    """A 224x224 image in, a float32 image of 4x its bytes out: large items and results both ways."""
    return [dp[0].astype(np.float32) / 2, dp[1]]


@pytest.fixture(scope="module")
def images_db(tmp_path_factory) -> tuple[str, list[np.ndarray]]:
    """40 JPEGs of 224x224 (label i) and what ``halve`` makes of each, decoded here by OpenCV."""
    import cv2
    import picpac
    path = tmp_path_factory.mktemp("images") / "images.picpac"
    rng = np.random.default_rng(25)
    wanted = []
    with picpac.Writer(path) as w:
        for i in range(40):
            jpeg = cv2.imencode(".jpg", rng.integers(0, 256, (224, 224, 3), np.uint8))[1].tobytes()
            w.append(image=jpeg, label=i)
            wanted.append(cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR),
                                       cv2.COLOR_BGR2RGB).astype(np.float32) / 2)
    return str(path), wanted


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_image_sized_datapoints_stream_at_the_defaults_after_opencv(images_db, clean, kind, strict):
    import cv2
    from picpac.dataflow import PicPacData
    path, wanted = images_db
    cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (224, 224))  # the parent has used OpenCV (and its threads)
    df = PicPacData(path, shuffle=False)
    m = MultiProcessMapData(df, 2, halve, strict=strict) if kind == "process" else \
        MultiThreadMapData(df, 2, halve, strict=strict)
    done = threading.Event()

    def watchdog():  # a hang fails the test: its workers are killed, which the consumer reports
        if not done.wait(60):
            for pid in getattr(m, "pids", []):
                os.kill(pid, signal.SIGKILL)
    threading.Thread(target=watchdog, daemon=True).start()
    with m:
        m.reset_state()
        try:
            # strict: two passes, each MapData's in its order; else results as they are done, at most
            # buffer_size (200) in flight, so the first 40 + 200 hold every datapoint of the first pass
            got = [dp for _ in range(2) for dp in m] if strict else take(m, 240)
        finally:
            done.set()
    labels = [int(label) for _, label in got]
    assert labels == list(range(40)) * 2 if strict else set(labels) == set(range(40))
    assert all(np.array_equal(image, wanted[label]) for image, label in zip((dp[0] for dp in got), labels))


# -- construction ---------------------------------------------------------------------------------------------
def test_the_arguments_are_checked_when_the_flow_is_made(clean):
    for bad in (0, -1, None):
        with pytest.raises(PicPacValueError, match=rf"^MultiThreadMapData: num_thread must be >= 1, got {bad}$"):
            MultiThreadMapData(numbers(4), bad, double)
        with pytest.raises(PicPacValueError, match=rf"^MultiProcessMapData: num_proc must be >= 1, got {bad}$"):
            MultiProcessMapData(numbers(4), bad, double)
    with pytest.raises(PicPacValueError, match=r"^MultiThreadMapData needs a callable map_func, got None$"):
        MultiThreadMapData(numbers(4), 2)
    with pytest.raises(PicPacValueError, match=r"^MultiProcessMapData needs a callable map_func, got 5$"):
        MultiProcessMapData(numbers(4), 2, 5)
    with pytest.raises(PicPacValueError, match=r"^MultiThreadMapData: buffer_size must be >= 1, got 0$"):
        MultiThreadMapData(numbers(4), 2, double, buffer_size=0)
    with pytest.raises(PicPacValueError, match=r"^MultiProcessMapAndBatchData: num_proc and batch_size must be >= 1, "
                                               r"got 1 and 0$"):
        MultiProcessMapAndBatchData(numbers(4), 1, double, 0)
    with pytest.raises(PicPacValueError, match=r"^MultiProcessMapAndBatchData: batch_size \(8\) must be smaller than "
                                               r"buffer_size \(8\)$"):
        MultiProcessMapAndBatchData(numbers(16), 1, double, 8, buffer_size=8)
    for make in (lambda: MultiProcessMapData(numbers(4), 1, double, start_method="forkserver"),
                 lambda: MultiProcessMapAndBatchData(numbers(4), 1, double, 2, start_method="forkserver")):
        with pytest.raises(PicPacValueError, match=r"^MultiProcess\w+: start_method must be one of 'spawn', 'fork', "
                                                   r"got 'forkserver'$"):
            make()
    assert MultiThreadMapData(numbers(4), nr_thread=3, map_func=double).num_thread == 3  # tensorpack's old names
    assert MultiProcessMapData(numbers(4), nr_proc=2, map_func=double).num_proc == 2
    assert MultiProcessMapDataZMQ is MultiProcessMapData and MultiProcessMapAndBatchDataZMQ is MultiProcessMapAndBatchData


def test_lengths_are_the_sources(clean):
    assert len(MultiThreadMapData(numbers(7), 2, double)) == 7 == len(MultiProcessMapData(numbers(7), 1, double))
    assert len(MultiProcessMapAndBatchData(numbers(10), 1, double, 3, 8)) == 3  # whole batches of a pass
    with pytest.raises(NotImplementedError):
        len(MultiThreadMapData(DataFromGenerator(lambda: iter([[1]])), 1, double))


# -- outputs --------------------------------------------------------------------------------------------------
def test_strict_maps_of_a_source_of_unknown_length_and_of_an_empty_one(clean):
    with MultiThreadMapData(DataFromGenerator(lambda: ([i] for i in range(25))), 3, jittery_double, buffer_size=4,
                            strict=True) as m:
        m.reset_state()
        assert list(m) == [[2 * i] for i in range(25)] == list(m)
    with MultiProcessMapData(numbers(0), 1, double, strict=True) as m:
        m.reset_state()
        assert list(m) == [] == list(m)
    with MultiThreadMapData(numbers(0), 2, double) as m:  # not strict: the source forever, and it has nothing
        m.reset_state()
        with pytest.raises(DataFlowError, match=r"^MultiThreadMapData: its DataFlow \(DataFromList\) produced no "
                                                r"datapoint in a whole pass$"):
            next(iter(m))


def test_none_results_are_dropped_by_the_process_maps(clean):
    with MultiProcessMapData(numbers(10), 2, drop_odd, buffer_size=4, strict=True) as m:
        m.reset_state()
        assert list(m) == [[0], [2], [4], [6], [8]]
    for timeout in (None, 30):  # a timeout hands the worker one datapoint at a time: the same batches
        with MultiProcessMapAndBatchData(numbers(10), 1, drop_odd, batch_size=2, buffer_size=8, timeout=timeout) as mb:
            mb.reset_state()
            # one worker: BatchData(MapData(...)) of the source repeated, a batch running on into the next pass
            assert [b[0].tolist() for b in take(mb, 5)] == [[0, 2], [4, 6], [8, 0], [2, 4], [6, 8]]


def test_a_strict_thread_pass_left_early_is_followed_by_a_whole_one(clean):
    with MultiThreadMapData(numbers(12), 2, double, buffer_size=3, strict=True) as m:
        m.reset_state()
        it = iter(m)
        assert [next(it), next(it)] == [[0], [2]]
        it.close()
        assert list(m) == [[2 * i] for i in range(12)]
        it = iter(m)
        next(it)
        it.close()
        m.reset_state()  # a second reset starts afresh, as tensorpack's does
        assert list(m) == [[2 * i] for i in range(12)]


# -- a failing source -----------------------------------------------------------------------------------------
def failing_source(passes_that_fail: int = 10**9) -> DataFromGenerator:
    """[0], [1], [2], then a ZeroDivisionError, in the first ``passes_that_fail`` passes; later passes end there."""
    passes = []

    def gen():
        passes.append(1)
        yield from ([i] for i in range(3))
        if len(passes) <= passes_that_fail:
            raise ZeroDivisionError("boom in the source")
    return DataFromGenerator(gen)


def test_a_failing_source_stops_the_thread_map_until_reset_state(clean):
    with MultiThreadMapData(failing_source(1), 2, double, buffer_size=4, strict=True) as m:
        m.reset_state()
        it = iter(m)
        got = []
        with pytest.raises(ZeroDivisionError, match="^boom in the source$"):
            while True:
                got.append(next(it))
        assert got == [[0], [2], [4]][:len(got)]  # (datapoints in flight when the source fails may not come)
        with pytest.raises(DataFlowError, match=r"^MultiThreadMapData stopped after an error \(ZeroDivisionError\('boom "
                                                r"in the source'\)\); call reset_state\(\) again or make a new one$"):
            iter(m)
        m.reset_state()
        assert list(m) == [[0], [2], [4]] == list(m)
    for call in (m.reset_state, lambda: iter(m)):
        with pytest.raises(DataFlowError, match=r"^MultiThreadMapData is closed: make a new one$"):
            call()


def test_a_failing_source_stops_the_process_maps_and_their_workers(clean):
    for df in (MultiProcessMapData(failing_source(), 2, double, buffer_size=4),
               MultiProcessMapAndBatchData(failing_source(), 1, double, 2, 4)):
        with df:
            df.reset_state()
            pids = df.pids
            assert len(pids) == len(set(pids)) > 0
            with pytest.raises(ZeroDivisionError, match="^boom in the source$"):
                take(df, 10)
            assert df.pids == []
            with pytest.raises(DataFlowError, match=rf"^{type(df).__name__} stopped after an error in its workers "
                                                    r"\(ZeroDivisionError: boom in the source\); make a new one$"):
                iter(df)
