"""picpac/compat/dataflow/base.py on its own: the DataFlow protocol (old-style flows, unknown lengths, proxies,
close), its guards and errors, optional packages, and explicit randomness (worker paths, seeds, worker processes)."""
from __future__ import annotations

import json
import operator
import pickle
import random
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from picpac.dataflow import (BatchData, DataFlow, DataFlowError, DataFlowReentrantGuard, DataFlowTerminated,
                             DataFromGenerator, DataFromList, FakeData, JoinData, MapData, MissingDependencyError,
                             ProxyDataFlow, RandomChooseData, RNGDataFlow, worker_path)
from picpac.dataflow.base import make_rng, new_entropy, optional_import, worker_scope
from picpac.errors import PicPacError

from dataflow_helpers import firsts, numbers, ready


# -- the protocol --------------------------------------------------------------------------------------
def test_old_style_dataflow_and_unknown_length():
    class Old(DataFlow):  # tensorpack < 0.9: get_data() and size()
        def get_data(self):
            yield from ([1], [2])

        def size(self):
            return 2

    old = Old()
    assert list(old) == [[1], [2]] and len(old) == 2 and old.size() == 2
    gen = DataFromGenerator(lambda: iter([[1], [2]]))
    with pytest.raises(NotImplementedError):
        len(gen)
    assert list(gen) == [[1], [2]] == list(gen)  # list() treats the missing length as "unknown", not an error
    with pytest.raises(TypeError):
        DataFlow()  # abstract


def test_proxy_forwards_everything():
    p = ProxyDataFlow(numbers(3))
    p.reset_state()
    assert firsts(p) == [0, 1, 2] and len(p) == 3


# -- explicit seeds ---------------------------------------------------------------------------------------
def test_seeds_are_explicit_and_worker_paths_differ():
    a, b = ready(numbers(20, shuffle=True, seed=3)), ready(numbers(20, shuffle=True, seed=3))
    assert firsts(a) == firsts(b) != list(range(20))
    assert firsts(a) != firsts(a)  # a new order each pass
    unseeded = [firsts(ready(numbers(20, shuffle=True))) for _ in range(2)]
    assert unseeded[0] != unseeded[1]  # fresh entropy, not a hidden global RNG
    state = np.random.get_state()[1].copy()
    ready(FakeData([[3]], 2, seed=1))
    assert (np.random.get_state()[1] == state).all()  # the global RNG is untouched
    assert worker_path() == ()
    with worker_scope(0):
        zero = make_rng(5).randint(1 << 30, size=4)
        with worker_scope(2):
            assert worker_path() == (0, 2)
    with worker_scope(1):
        one = make_rng(5).randint(1 << 30, size=4)
    assert not np.array_equal(zero, one)
    with worker_scope(0):
        assert np.array_equal(make_rng(5).randint(1 << 30, size=4), zero)


def test_close_closes_the_flows_it_wraps():
    closed = []

    class Closing(RNGDataFlow):
        def __iter__(self):
            yield [1]

        def close(self):
            closed.append(self)

    inner = Closing()
    with BatchData(MapData(inner, lambda dp: dp), 1) as outer:
        outer.reset_state()
        assert list(outer)[0][0].tolist() == [1]
    assert closed == [inner]
    with JoinData([inner, inner]):
        pass
    assert closed == [inner, inner]  # once, though it appears twice




# -- errors and guards -------------------------------------------------------------------------------------
def test_an_unknown_length_is_not_implemented_and_no_length_to_python():
    gen = DataFromGenerator(lambda: iter([[1], [2]]))
    with pytest.raises(NotImplementedError, match=r"^DataFromGenerator has no known length$") as info:
        len(gen)
    assert isinstance(info.value, TypeError) and operator.length_hint(gen, 7) == 7
    assert gen.get_data is not None and list(gen.get_data()) == [[1], [2]]
    assert DataFromList([[1], [2], [3]]).size() == 3  # tensorpack's old names on a new-style flow


def test_the_protocols_errors_are_what_callers_catch():
    assert issubclass(DataFlowError, PicPacError) and issubclass(DataFlowError, RuntimeError)
    assert issubclass(MissingDependencyError, PicPacError) and issubclass(MissingDependencyError, ImportError)
    assert issubclass(DataFlowTerminated, BaseException) and not issubclass(DataFlowTerminated, Exception)

    class Needy(RNGDataFlow):
        def __iter__(self):
            self._need_reset(self.rng is not None)
            yield [int(self.rng.randint(10))]

    with pytest.raises(DataFlowError, match=r"^Needy: call reset_state\(\) once before iterating it \(the DataFlow "
                                            r"protocol: reset_state\(\) seeds its RNG and starts its workers\)$"):
        next(iter(Needy()))
    assert len(list(ready(Needy()))) == 1


def test_the_reentrant_guard_names_the_flow_and_pickles_unlocked():
    guard = DataFlowReentrantGuard("MyFlow")
    with guard:
        with pytest.raises(DataFlowError, match=r"^MyFlow is not reentrant: __iter__ was called while an earlier "
                                                r"iteration of it is still running. Exhaust or close\(\) the first "
                                                r"iterator, or use two DataFlow instances$"):
            with guard:
                pass
        copy = pickle.loads(pickle.dumps(guard))  # sent to a spawned worker while held here
        with copy:  # a fresh guard, not a held one
            with pytest.raises(DataFlowError, match="^MyFlow is not reentrant"):
                copy.__enter__()
    with pytest.raises(KeyError):
        with guard:
            raise KeyError("the body failed")
    with guard:  # released by the failure
        pass
    with pytest.raises(DataFlowError, match="^This DataFlow is not reentrant"), DataFlowReentrantGuard() as g:
        g.__enter__()


def test_optional_import_names_the_extra_that_provides_the_package(monkeypatch):
    assert optional_import("json", "anything") is json
    monkeypatch.setitem(sys.modules, "lmdb", None)
    monkeypatch.setitem(sys.modules, "zmq", None)
    with pytest.raises(MissingDependencyError, match=r"^LMDBData needs the 'lmdb' package: pip install "
                                                     r"'picpac\[formats\]' \(or pip install lmdb\)$"):
        optional_import("lmdb", "LMDBData")
    with pytest.raises(MissingDependencyError, match=r"^RemoteDataZMQ needs the 'pyzmq' package: pip install "
                                                     r"'picpac\[zmq\]' \(or pip install pyzmq\)$") as info:
        optional_import("zmq", "RemoteDataZMQ", "pyzmq", "zmq")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_old_style_methods_do_not_replace_new_style_ones():
    class Both(DataFlow):
        def __iter__(self):
            yield [1]

        def get_data(self):
            yield [2]

        def __len__(self):
            return 1

        def size(self):
            return 5

    assert list(Both()) == [[1]] and len(Both()) == 1


def test_close_reaches_every_wrapped_flow_once_even_on_an_error():
    closed = []

    class Closing(DataFlow):
        def __init__(self, name):
            self.name = name

        def __iter__(self):
            yield [self.name]

        def close(self):
            closed.append(self.name)

    a, b = Closing("a"), Closing("b")
    choose = RandomChooseData([(a, 0.5), (b, 0.5)])  # df_lists of (flow, probability)
    choose.close()
    choose.close()
    assert closed == ["a", "b", "a", "b"]
    closed.clear()
    with pytest.raises(ZeroDivisionError):
        with ProxyDataFlow(ProxyDataFlow(a)):
            1 / 0
    assert closed == ["a"]
    ProxyDataFlow(DataFromGenerator([[1]])).close()  # a flow that closes nothing of its own: nothing to do
    assert closed == ["a"]


# -- explicit randomness -----------------------------------------------------------------------------------
def rng_for(seed, path) -> np.random.RandomState:
    return np.random.RandomState(np.random.MT19937(np.random.SeedSequence(seed, spawn_key=path)))


def test_make_rng_is_a_mersenne_twister_seeded_by_the_seed_and_the_worker_path():
    assert make_rng(5).randint(1 << 30, size=6).tolist() == rng_for(5, ()).randint(1 << 30, size=6).tolist()
    with worker_scope(0), worker_scope(2):
        assert worker_path() == (0, 2)
        assert make_rng(5).randint(1 << 30, size=6).tolist() == rng_for(5, (0, 2)).randint(1 << 30, size=6).tolist()
    assert make_rng(None).randint(1 << 62) != make_rng(None).randint(1 << 62)
    assert isinstance(make_rng(1), np.random.RandomState)  # tensorpack's type: rng.shuffle, rand, randint
    entropy = {new_entropy() for _ in range(3)}
    assert len(entropy) == 3 and all(0 <= e < 1 << 128 for e in entropy)


def test_rng_flows_draw_from_their_seed_again_at_each_reset():
    flow = FakeData([[4]], size=1, seed=9)
    first = list(ready(flow))[0][0]
    assert first.tolist() == rng_for(9, ()).rand(4).astype("float32").tolist()
    assert list(ready(flow))[0][0].tolist() == first.tolist()  # a reset starts the stream again
    assert RNGDataFlow.rng is None and RNGDataFlow.seed is None


def test_worker_scope_is_per_thread_and_undone_by_an_error():
    seen = []
    with worker_scope(3):
        thread = threading.Thread(target=lambda: seen.append(worker_path()))
        thread.start()
        thread.join()
        with pytest.raises(KeyError):
            with worker_scope(1):
                raise KeyError("in the worker")
        assert worker_path() == (3,)
    assert seen == [()] and worker_path() == ()


ENTER = """
import json, random, sys
import numpy as np
from picpac.dataflow.base import enter_worker_process, worker_path, worker_scope
with worker_scope(9):  # the forking thread's own path is dropped: the process path is what it sees
    enter_worker_process(tuple(json.loads(sys.argv[1])), int(sys.argv[2]))
    path = list(worker_path())
print(json.dumps([path, np.random.randint(1 << 30, size=3).tolist(), random.getrandbits(60)]))
"""


def test_a_worker_process_gets_its_path_and_global_random_streams_of_its_own():
    def worker(path, entropy):
        out = subprocess.run([sys.executable, "-c", ENTER, json.dumps(path), str(entropy)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    path, draws, bits = worker([1, 0], 42)
    assert path == [1, 0]
    seq = np.random.SeedSequence(42, spawn_key=(1, 0))
    assert draws == np.random.RandomState(seq.generate_state(1)[0]).randint(1 << 30, size=3).tolist()
    assert bits == random.Random(int.from_bytes(seq.generate_state(4).tobytes(), "little")).getrandbits(60)
    assert worker([1, 0], 42)[1:] == [draws, bits]  # the same path and entropy: the same streams
    other = worker([0, 0], 42)
    assert other[0] == [0, 0] and other[1] != draws and other[2] != bits


def test_the_zmq_flows_name_their_own_extra(monkeypatch):
    """pyzmq is optional (the extra 'zmq'), not a dependency of every install."""
    from picpac.compat.dataflow import send_dataflow_zmq
    monkeypatch.setitem(sys.modules, "zmq", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'picpac\[zmq\]'"):
        send_dataflow_zmq(DataFromList([1]), "tcp://127.0.0.1:9")
    import tomllib
    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pyzmq") for d in project["dependencies"])
    assert project["optional-dependencies"]["zmq"] == ["pyzmq>=25"]
