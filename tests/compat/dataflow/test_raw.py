"""picpac/compat/dataflow/raw.py on its own: the flows made from Python objects (fakes, lists, generators, iterables,
queues), their exact values and orders for a seed, their lengths and their refusals."""
from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from picpac.dataflow import (DataFlowError, DataFromGenerator, DataFromIterable, DataFromList, DataFromQueue,
                             FakeData)
from picpac.dataflow.base import make_rng
from picpac.errors import PicPacValueError

from dataflow_helpers import ready


# -- raw -------------------------------------------------------------------------------------------------
def test_raw_sources():
    fake = ready(FakeData([[2, 3], [4]], size=5, dtype=["uint8", "float64"], domain=[(0, 10), (-1, 1)], seed=0))
    dps = list(fake)
    assert len(dps) == len(fake) == 5
    assert dps[0][0].shape == (2, 3) and dps[0][0].dtype == np.uint8 and dps[0][1].dtype == np.float64
    assert all(-1 <= dp[1].min() and dp[1].max() <= 1 for dp in dps) and not np.array_equal(dps[0][1], dps[1][1])
    fixed = list(ready(FakeData([[3]], size=3, random=False, seed=0)))
    assert all(np.array_equal(dp[0], fixed[0][0]) for dp in fixed) and fixed[0] is not fixed[1]
    assert list(ready(DataFromList([[1], [2], [3]], shuffle=False))) == [[1], [2], [3]]
    gen = DataFromGenerator(iter([[1], [2]]), size=2)
    assert len(gen) == 2 and list(gen) == [[1], [2]]
    assert len(DataFromIterable([[1], [2], [3]])) == 3 and list(DataFromIterable(([i] for i in range(2)))) == [[0], [1]]
    with pytest.raises(NotImplementedError):
        len(DataFromIterable(iter([])))
    q = queue.Queue()
    for i in range(3):
        q.put([i])
    it = iter(DataFromQueue(q))
    assert [next(it) for _ in range(3)] == [[0], [1], [2]]


# -- exact values and orders -------------------------------------------------------------------------------
def test_fake_data_draws_each_component_in_turn_from_the_seeded_rng():
    fake = ready(FakeData([[2, 3], [4]], size=2, dtype=["uint8", "float64"], domain=[(0, 10), (-1, 1)], seed=7))
    rng = make_rng(7)
    want = [[(rng.rand(2, 3) * 10).astype("uint8"), rng.rand(4) * 2 - 1] for _ in range(2)]
    got = list(fake)
    assert all(np.array_equal(g, w) and g.dtype == w.dtype for dp, ref in zip(got, want) for g, w in zip(dp, ref))
    assert not np.array_equal(list(fake)[0][1], got[0][1])  # the stream goes on; reset_state starts it again
    assert np.array_equal(list(ready(fake))[0][1], got[0][1])
    one = ready(FakeData([[3]], size=3, dtype=np.int16, domain=(5, 6), seed=0))
    assert [dp[0].tolist() for dp in one] == [[5, 5, 5]] * 3 and len(one) == 3
    same = list(ready(FakeData([[3]], size=2, random=False, seed=1)))
    assert same[0] is not same[1] and same[0][0] is same[1][0]  # shallow copies of one draw, as tensorpack's


def test_fake_data_refuses_mismatched_dtypes_and_domains():
    with pytest.raises(PicPacValueError, match=r"^FakeData: 2 shapes but 1 dtypes and 2 domains$"):
        FakeData([[1], [2]], dtype=["uint8"])
    with pytest.raises(PicPacValueError, match=r"^FakeData: 1 shapes but 1 dtypes and 3 domains$"):
        FakeData([[1]], domain=[(0, 1)] * 3)
    with pytest.raises(DataFlowError, match=r"^FakeData: call reset_state\(\)"):
        iter(FakeData([[1]]))


def test_data_from_list_shuffles_each_pass_with_its_seeded_rng():
    items = [[i] for i in range(12)]
    df = ready(DataFromList(items, seed=4))  # shuffle=True is the default
    rng = make_rng(4)
    passes = [[dp[0] for dp in df] for _ in range(2)]
    assert passes == [rng.permutation(12).tolist(), rng.permutation(12).tolist()]
    assert len(df) == 12 and all(dp is items[dp[0]] for dp in df)  # the list's own items
    in_order = DataFromList(items, shuffle=False)
    assert list(in_order) == items and next(iter(in_order)) is items[0]  # no reset_state needed
    with pytest.raises(DataFlowError, match=r"^DataFromList: call reset_state\(\)"):
        iter(DataFromList(items))


def test_generators_and_iterables():
    calls = []

    def make():
        calls.append(1)
        return ([i] for i in range(3))
    gen = DataFromGenerator(make, size=3.0)
    assert list(gen) == list(gen) == [[0], [1], [2]] and len(calls) == 2 and len(gen) == 3  # called again each pass
    once = DataFromGenerator(iter([[1], [2]]))
    assert list(once) == [[1], [2]] and list(once) == []  # an iterator is what it is: one pass
    with pytest.raises(NotImplementedError, match=r"^DataFromGenerator has no known length$"):
        len(once)

    class NoLength:
        def __len__(self):
            raise NotImplementedError

        def __iter__(self):
            return iter([[5]])
    assert list(DataFromIterable(NoLength())) == [[5]]
    with pytest.raises(NotImplementedError, match=r"^DataFromIterable has no known length$"):
        len(DataFromIterable(NoLength()))
    assert list(DataFromIterable(range(2))) == [0, 1] and len(DataFromIterable(range(2))) == 2


def test_data_from_queue_waits_for_each_datapoint():
    q = queue.Queue()
    it = iter(DataFromQueue(q))
    feeder = threading.Timer(0.2, lambda: [q.put([i]) for i in range(2)])
    feeder.start()
    assert [next(it), next(it)] == [[0], [1]]  # blocks until the feeder puts them
    feeder.join()
    with pytest.raises(NotImplementedError):
        len(DataFromQueue(q))
