"""picpac.dataflow: the protocol and the single-process flows, against tensorpack's documented behaviour.

Each test states the exact output tensorpack documents (orders, batch shapes, remainders, use_list,
keep_state, num_reuse ...) and checks the misuse errors that replace tensorpack's AttributeErrors.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from picpac.dataflow import (BatchData, BatchDataByShape, CacheData, ConcatData, DataFlowError, DataFromList, FakeData,
                             FixedSizeData, JoinData, LocallyShuffleData, MapData, MapDataComponent, PrintData,
                             RandomChooseData, RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent,
                             TestDataSpeed)
from picpac.dataflow.base import DataFlowReentrantGuard
from picpac.errors import PicPacError, PicPacTypeError, PicPacValueError

from dataflow_helpers import firsts, numbers, ready, refuses_a_second_iterator


# -- the protocol --------------------------------------------------------------------------------------
def test_iterating_before_reset_state_is_a_clear_error():
    for df in (numbers(5, shuffle=True), FakeData([[2]], 3), FixedSizeData(numbers(3), 2), CacheData(numbers(3)),
               LocallyShuffleData(numbers(3), 2), BatchDataByShape(FakeData([[2]], 4), 2, 0),
               RandomMixData([numbers(2)]), RandomChooseData([numbers(2)])):
        with pytest.raises(DataFlowError, match=r"call reset_state\(\) once before iterating") as info:
            iter(df)
        assert isinstance(info.value, PicPacError) and not isinstance(info.value, AttributeError)


def test_non_reentrant_flows_refuse_a_second_iterator():
    for df in (FixedSizeData(numbers(5), 3), CacheData(numbers(3)), LocallyShuffleData(numbers(4), 2),
               BatchDataByShape(FakeData([[2]], 8), 2, 0)):
        df.reset_state()
        refuses_a_second_iterator(df)
        next(iter(df))  # released once the first one is closed
    guard = DataFlowReentrantGuard()
    with guard, pytest.raises(RuntimeError):  # tensorpack raised threading.ThreadError, a RuntimeError
        with guard:
            pass


# -- batching ----------------------------------------------------------------------------------------------
def test_batchdata_shapes_remainder_and_use_list():
    ds = DataFromList([[np.full((2, 3), i, np.float32), i] for i in range(10)], shuffle=False)
    b = ready(BatchData(ds, 4))
    out = list(b)
    assert len(b) == len(out) == 2
    assert out[0][0].shape == (4, 2, 3) and out[0][0].dtype == np.float32
    assert out[0][1].tolist() == [0, 1, 2, 3] and out[0][1].dtype == np.int32 and out[1][1].tolist() == [4, 5, 6, 7]
    b = ready(BatchData(ds, 4, remainder=True))
    out = list(b)
    assert len(b) == 3 and [len(x[1]) for x in out] == [4, 4, 2] and out[2][1].tolist() == [8, 9]
    out = list(ready(BatchData(ds, 3, use_list=True)))
    assert len(out) == 3 and isinstance(out[0][0], list) and out[0][1] == [0, 1, 2]
    assert len(BatchData(numbers(9), 3, remainder=True)) == 3 == len(BatchData(numbers(9), 3))


def test_batchdata_types_dicts_and_errors():
    ds = DataFromList([{"x": float(i), "ok": i % 2 == 0, "name": f"n{i}", "big": 2**40 + i} for i in range(4)],
                      shuffle=False)
    (batch,) = list(ready(BatchData(ds, 4)))
    assert batch["x"].dtype == np.float32 and batch["ok"].dtype == bool and batch["ok"].tolist() == [1, 0, 1, 0]
    assert batch["name"].tolist() == ["n0", "n1", "n2", "n3"] and batch["big"].dtype == np.int64
    bad = DataFromList([[np.zeros(2)], [np.zeros(3)]], shuffle=False)
    with pytest.raises(PicPacValueError, match=r"cannot batch .*shapes \[\(2,\), \(3,\)\].*BatchDataByShape"):
        list(ready(BatchData(bad, 2)))
    with pytest.raises(PicPacTypeError, match="use_list=True"):
        list(ready(BatchData(DataFromList([[object()], [object()]], shuffle=False), 2)))
    with pytest.raises(PicPacValueError, match="larger than"):
        BatchData(numbers(3), 4)
    assert [x[0] for x in ready(BatchData(numbers(3), 4, remainder=True))][0].tolist() == [0, 1, 2]


def test_batchdata_by_shape():
    dps = [[np.zeros((i % 2 + 1, 2)), i] for i in range(9)]
    out = list(ready(BatchDataByShape(DataFromList(dps, shuffle=False), 2, 0)))
    assert [b[1].tolist() for b in out] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert [b[0].shape for b in out] == [(2, 1, 2), (2, 2, 2), (2, 1, 2), (2, 2, 2)]


# -- reshaping ---------------------------------------------------------------------------------------------
def test_fixed_size_data_keeps_or_restarts_state():
    ds = DataFromList([[i] for i in range(1, 6)], shuffle=False)
    f = ready(FixedSizeData(ds, 3))
    assert [firsts(f) for _ in range(3)] == [[1, 2, 3], [4, 5, 1], [2, 3, 4]] and len(f) == 3
    f = ready(FixedSizeData(ds, 3, keep_state=False))
    assert [firsts(f) for _ in range(2)] == [[1, 2, 3], [1, 2, 3]]
    f = ready(FixedSizeData(ds, 6, keep_state=False))
    assert [firsts(f) for _ in range(2)] == [[1, 2, 3, 4, 5, 1]] * 2
    with pytest.raises(DataFlowError, match="no datapoint"):
        list(ready(FixedSizeData(DataFromList([], shuffle=False), 2)))


def test_map_and_map_component():
    src = [[i, i * 10] for i in range(5)]
    ds = DataFromList(src, shuffle=False)
    m = ready(MapData(ds, lambda dp: None if dp[0] == 2 else [dp[0] + 1, dp[1]]))
    assert list(m) == [[1, 0], [2, 10], [4, 30], [5, 40]]
    m = ready(MapDataComponent(ds, lambda x: None if x == 30 else -x, index=1))
    assert list(m) == [[0, 0], [1, -10], [2, -20], [4, -40]]
    assert src == [[i, i * 10] for i in range(5)]  # the input datapoints are untouched
    dicts = DataFromList([{"a": 1, "b": 2}], shuffle=False)
    assert list(ready(MapDataComponent(dicts, lambda x: x * 5, "b"))) == [{"a": 1, "b": 10}]
    tuples = DataFromList([(1, 2)], shuffle=False)
    assert list(ready(MapDataComponent(tuples, str, 0))) == [["1", 2]]
    assert list(ready(SelectComponent(DataFromList([[1, 2, 3]], shuffle=False), [2, 1]))) == [[3, 2]]


def test_repeats():
    r = ready(RepeatedData(numbers(3), 2))
    assert firsts(r) == [0, 1, 2, 0, 1, 2] and len(r) == 6
    forever = ready(RepeatedData(numbers(2), -1))
    it = iter(forever)
    assert [next(it)[0] for _ in range(5)] == [0, 1, 0, 1, 0]
    with pytest.raises(NotImplementedError):
        len(forever)
    with pytest.raises(DataFlowError, match="no datapoint"):
        next(iter(ready(RepeatedData(numbers(0), -1))))
    r = ready(RepeatedDataPoint(numbers(3), 2))
    assert firsts(r) == [0, 0, 1, 1, 2, 2] and len(r) == 6
    with pytest.raises(PicPacValueError):
        RepeatedDataPoint(numbers(3), 0)


def test_concat_join_and_select():
    c = ready(ConcatData([numbers(2), DataFromList([[7], [8]], shuffle=False)]))
    assert firsts(c) == [0, 1, 7, 8] and len(c) == 4
    j = ready(JoinData([numbers(3), DataFromList([["a", "b"], ["c", "d"]], shuffle=False)]))
    assert list(j) == [[0, "a", "b"], [1, "c", "d"]] and len(j) == 2
    d = ready(JoinData([DataFromList([{"a": 1}], shuffle=False), DataFromList([{"b": 2}], shuffle=False)]))
    assert list(d) == [{"a": 1, "b": 2}]
    same = numbers(2)
    assert list(ready(JoinData([same, same]))) == [[0, 0], [1, 1]]


def test_random_choose_and_mix():
    a, b = numbers(50), DataFromList([[100 + i] for i in range(50)], shuffle=False)
    out = firsts(ready(RandomChooseData([a, b], seed=1)))
    assert set(out) & set(range(50)) and set(out) & set(range(100, 150))
    assert out == firsts(ready(RandomChooseData([a, b], seed=1)))  # reproducible
    assert [x for x in out if x < 50] == sorted(x for x in out if x < 50)  # each flow keeps its order
    assert max(len([x for x in out if x < 50]), len([x for x in out if x >= 100])) == 50  # stopped when one ran out
    assert set(firsts(ready(RandomChooseData([(a, 1.0), (b, 0.0)], seed=2)))) == set(range(50))
    with pytest.raises(PicPacValueError, match="sum to"):
        RandomChooseData([(a, 0.5), (b, 0.4)])
    mix = ready(RandomMixData([numbers(10), DataFromList([[100 + i] for i in range(5)], shuffle=False)], seed=4))
    out = firsts(mix)
    assert len(mix) == 15 and sorted(out) == list(range(10)) + list(range(100, 105))
    assert [x for x in out if x < 100] == list(range(10)) and out != sorted(out)


def test_locally_shuffle_data():
    ls = ready(LocallyShuffleData(numbers(20), buffer_size=6, seed=0))
    it = iter(ls)
    out = [next(it)[0] for _ in range(60)]
    assert len(ls) == 20 and set(out) == set(range(20))
    # a buffer of 6: output k leaves when input k + 6 comes in, so it is one of inputs 0 .. k + 5
    assert all(out[k] <= k + 5 for k in range(14)) and out[:14] != list(range(14))
    again = iter(ready(LocallyShuffleData(numbers(20), buffer_size=6, seed=0)))
    assert [next(again)[0] for _ in range(60)] == out
    reuse = iter(ready(LocallyShuffleData(numbers(10), buffer_size=4, num_reuse=3, shuffle_interval=1000, seed=0)))
    got = [next(reuse)[0] for _ in range(12)]
    assert got == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]  # no shuffle yet: the FIFO, each datapoint 3 times
    assert len(LocallyShuffleData(numbers(10), 4, num_reuse=3)) == 30


def test_cache_data():
    calls = []
    ds = MapData(numbers(5), lambda dp: calls.append(dp[0]) or dp)
    c = ready(CacheData(ds))
    it = iter(c)
    next(it)
    it.close()  # a pass left early caches nothing
    assert firsts(c) == [0, 1, 2, 3, 4] and calls == [0, 0, 1, 2, 3, 4]
    assert firsts(c) == [0, 1, 2, 3, 4] and len(calls) == 6  # from the cache
    s = ready(CacheData(numbers(30), shuffle=True, seed=1))
    first, second = firsts(s), firsts(s)
    assert first == list(range(30)) and sorted(second) == first and second != first


def test_print_data_and_test_speed(capsys):
    ds = DataFromList([[np.arange(6, dtype=np.int32).reshape(2, 3), 1.5, [1, 2, 3, 4, 5]]], shuffle=False)
    assert len(list(ready(PrintData(ds, num=1, name="demo")))) == 1
    out = capsys.readouterr().out
    assert "Contents of DataFlow (demo)" in out and "datapoint 0/1 with 3 components" in out
    assert "ndarray:int32 of shape (2, 3) in range [0, 5]" in out and "float with value 1.5" in out
    assert "list of len 5" in out and "..." in out
    speed = TestDataSpeed(numbers(100), size=50)
    assert speed.start() > 0
    assert firsts(speed) == list(range(100))


def test_threads_of_a_plain_flow_none():
    before = threading.active_count()
    list(ready(BatchData(numbers(10), 2)))
    assert threading.active_count() == before
