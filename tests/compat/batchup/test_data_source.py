"""picpac.data_source on batchup's samplers: exact batches, orders and RNG draws (the samplers on their own:
test_batch_samplers.py).

batchup's contract: with ``shuffle=np.random.RandomState(seed)`` pass k is ``rng.permutation(n)``,
drawn when a batch first needs it, batches run on across passes with ``repeats``, so experiments
written for batchup give the same batches (and leave the RNG in the same state).
"""
from __future__ import annotations

import numpy as np
import pytest

import picpac
from picpac import data_source, sampling
from picpac.data_source import (ArrayDataSource, CallableDataSource, ChoiceBatch, ChoiceDataSource,
                                CompositeDataSource, IteratorDataSource, MapDataSource, ReaderArray)
from picpac.errors import PicPacTypeError, PicPacValueError


def indices_of(batches) -> list[list[int]]:
    return [b[0].tolist() for b in batches]


def same_state(a: np.random.RandomState, b: np.random.RandomState) -> bool:
    sa, sb = a.get_state(), b.get_state()
    return sa[0] == sb[0] and np.array_equal(sa[1], sb[1]) and sa[2:] == sb[2:]


@pytest.fixture
def global_rng():
    """Restores NumPy's global RNG after a test that seeds it (shuffle=True reads it)."""
    state = np.random.get_state()
    yield
    np.random.set_state(state)


# -- order: batchup's, exactly -----------------------------------------------------------------------
def test_shuffled_order_is_one_permutation_per_pass():
    ds = ArrayDataSource([np.arange(10)], include_indices=True)
    got = list(ds.batch_iterator(4, shuffle=np.random.RandomState(12345)))
    order = np.random.RandomState(12345).permutation(10)
    assert indices_of(got) == [order[:4].tolist(), order[4:8].tolist(), order[8:].tolist()]
    assert all(np.array_equal(i, x) for i, x in got)  # include_indices: the indices, then the data


@pytest.mark.parametrize("n, batch, repeats, draws", [
    (10, 3, 2, 3),   # the last batch is short; the pass after the last one is drawn, as batchup does
    (10, 5, 2, 3),   # exact: the next pass is drawn when the batch after the end asks for it
    (10, 4, 3, 4),
    (7, 20, 4, 5),   # batches larger than the data: several passes per batch
])
def test_repeats_run_batches_across_passes_with_batchups_rng_draws(n, batch, repeats, draws):
    rng = np.random.RandomState(12345)
    got = list(ArrayDataSource([np.arange(n)], repeats=repeats).batch_iterator(batch, shuffle=rng))
    ref = np.random.RandomState(12345)
    passes = [ref.permutation(n) for _ in range(draws)]
    stream = np.concatenate(passes[:repeats])
    total = n * repeats
    assert [len(b[0]) for b in got] == [batch] * (total // batch) + ([total % batch] if total % batch else [])
    assert np.array_equal(np.concatenate([b[0] for b in got]), stream)
    assert same_state(rng, ref)  # an RNG shared with other draws stays in step with batchup


def test_endless_repeats_draw_a_new_permutation_per_pass():
    rng = np.random.RandomState(7)
    it = ArrayDataSource([np.arange(6)], repeats=-1).batch_iterator(4, shuffle=rng)
    got = np.concatenate([next(it)[0] for _ in range(9)])  # 36 samples: 6 passes
    ref = np.random.RandomState(7)
    assert np.array_equal(got, np.concatenate([ref.permutation(6) for _ in range(6)]))
    assert ArrayDataSource([np.arange(6)], repeats=-1).num_samples() == np.inf


def test_in_order_and_trailing_batches():
    X = np.arange(10) * 10
    assert [b[0].tolist() for b in ArrayDataSource([X]).batch_iterator(4)] == [[0, 10, 20, 30], [40, 50, 60, 70], [80, 90]]
    assert [b[0].tolist() for b in ArrayDataSource([X]).batch_iterator(5, shuffle=False)] == [[0, 10, 20, 30, 40],
                                                                                                 [50, 60, 70, 80, 90]]
    got = [b[0].tolist() for b in ArrayDataSource([np.arange(5)], repeats=3).batch_iterator(4)]
    assert got == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1], [2, 3, 4]]
    it = ArrayDataSource([np.arange(3)], repeats=-1).batch_iterator(7)
    assert next(it)[0].tolist() == [0, 1, 2, 0, 1, 2, 0] and next(it)[0].tolist() == [1, 2, 0, 1, 2, 0, 1]
    # batches are fresh arrays: writing into one does not change the next pass
    ds = ArrayDataSource([np.arange(4)], repeats=2, include_indices=True)
    it = ds.batch_iterator(4)
    next(it)[0][:] = -1
    assert next(it)[0].tolist() == [0, 1, 2, 3]
    assert list(ArrayDataSource([np.zeros((0, 3))], repeats=-1).batch_iterator(4, shuffle=np.random.RandomState(0))) == []


def test_shuffle_true_is_numpys_global_rng(global_rng):
    ds = ArrayDataSource([np.arange(20)], repeats=2)
    np.random.seed(99)
    got = np.concatenate([b[0] for b in ds.batch_iterator(6, shuffle=True)])
    ref = np.random.RandomState(99)
    assert np.array_equal(got, np.concatenate([ref.permutation(20), ref.permutation(20)]))


def test_a_subset_and_its_index_mapping():
    X, Y = np.arange(30), np.arange(60).reshape(30, 2)
    subset = np.array([29, 3, 17, 8, 11, 0, 5])
    ds = ArrayDataSource([X, Y], indices=subset, repeats=2, include_indices=True)
    assert ds.num_samples() == 14
    batches = list(ds.batch_iterator(4, shuffle=np.random.RandomState(5)))
    ref = np.random.RandomState(5)
    order = np.concatenate([ref.permutation(subset), ref.permutation(subset)])
    assert np.array_equal(np.concatenate([b[0] for b in batches]), order)
    assert all(np.array_equal(x, X[i]) and np.array_equal(y, Y[i]) for i, x, y in batches)
    first = ds.samples_by_indices(np.array([0, 1]))  # positions in the subset
    assert first[0].tolist() == [29, 3] and first[1].tolist() == [29, 3]
    assert ds.samples_by_indices_nomapping(np.array([0, 1]))[1].tolist() == [0, 1]
    assert ds.samples_by_indices_nomapping(slice(2, 5))[0].tolist() == [2, 3, 4]
    assert [b.tolist() for b in ds.batch_indices_iterator(5)] == [[29, 3, 17, 8, 11], [0, 5, 29, 3, 17],
                                                                    [8, 11, 0, 5]]


def test_argument_errors():
    X = np.arange(10)
    for bad in (0, -2, -5):
        with pytest.raises(ValueError, match="repeats must be >= 1, or -1"):
            ArrayDataSource([X], repeats=bad)
    with pytest.raises(PicPacTypeError):
        ArrayDataSource([X], repeats=1.5)
    sampler = sampling.StandardSampler(10)
    with pytest.raises(ValueError, match="repeats must be 1 when a sampler"):
        ArrayDataSource([X], repeats=2, sampler=sampler)
    with pytest.raises(ValueError, match="indices must be None when a sampler"):
        ArrayDataSource([X], indices=np.arange(3), sampler=sampler)
    with pytest.raises(ValueError, match="different lengths"):
        ArrayDataSource([X, np.arange(11)])
    with pytest.raises(TypeError, match="data must be a list"):
        ArrayDataSource(X)
    with pytest.raises(TypeError, match=r"data\[1\] is a int"):
        ArrayDataSource([X, 3])
    with pytest.raises(ValueError, match="indices must lie in 0..9"):
        ArrayDataSource([X], indices=np.array([1, 10]))
    with pytest.raises(TypeError, match="integers"):
        ArrayDataSource([X], indices=np.array([0.5]))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        next(ArrayDataSource([X]).batch_iterator(0))
    with pytest.raises(TypeError, match="shuffle must be"):
        ArrayDataSource([X]).batch_iterator(2, shuffle="yes")
    assert isinstance(PicPacValueError("x"), ValueError) and isinstance(PicPacTypeError("x"), TypeError)


# -- array-likes: data loaded on the fly -------------------------------------------------------------
class NpyFiles:
    """An array-like of .npy files read on demand; like batchup's tutorial accessor it takes an int or
    an index array, nothing else (no slices)."""

    def __init__(self, paths):
        self.paths, self.loads = list(paths), 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            self.loads += 1
            return np.load(self.paths[index])
        if isinstance(index, np.ndarray) and index.ndim == 1:
            self.loads += len(index)
            return np.stack([np.load(self.paths[i]) for i in index])
        raise TypeError(f"index must be an int or a 1-D index array, not {type(index).__name__}")


def test_array_likes_load_only_the_batch(tmp_path):
    images = np.random.default_rng(0).integers(0, 255, (9, 4, 4), np.uint8)
    paths = []
    for i, image in enumerate(images):
        paths.append(tmp_path / f"{i}.npy")
        np.save(paths[-1], image)
    files, labels = NpyFiles(paths), np.arange(9) % 3
    ds = ArrayDataSource([files, labels], repeats=2)
    it = ds.batch_iterator(4, shuffle=np.random.RandomState(1))
    x, y = next(it)
    assert files.loads == 4  # nothing read ahead
    ref = np.random.RandomState(1).permutation(9)[:4]
    assert np.array_equal(x, images[ref]) and np.array_equal(y, labels[ref])
    rest = list(it)
    assert files.loads == 18 and sum(len(b[0]) for b in rest) == 14
    # mixing with the in-memory version gives the same batches
    a = list(ArrayDataSource([files, labels]).batch_iterator(4, shuffle=np.random.RandomState(2)))
    b = list(ArrayDataSource([images, labels]).batch_iterator(4, shuffle=np.random.RandomState(2)))
    assert all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1]) for p, q in zip(a, b))


def test_reader_array_reads_a_picpac_file(tmp_path):
    images = np.random.default_rng(1).integers(0, 255, (12, 5, 5, 3), np.uint8)
    path = tmp_path / "arrays.picpac"
    picpac.write_arrays(path, images, np.arange(12) % 4)
    with picpac.Reader(path) as r:
        ds = ArrayDataSource([ReaderArray(r), r.labels])
        x, y = next(ds.batch_iterator(5, shuffle=np.random.RandomState(3)))
        order = np.random.RandomState(3).permutation(12)[:5]
        assert np.array_equal(x, images[order]) and y.tolist() == (order % 4).tolist()
        assert np.array_equal(ReaderArray(r)[2:4], images[2:4]) and np.array_equal(ReaderArray(r)[np.int64(7)], images[7])
    raw = tmp_path / "raw.picpac"
    with picpac.Writer(raw) as w:
        for i in range(3):
            w.append(image=bytes([i]) * (i + 1), label=i)
    blobs = ReaderArray(raw)
    assert blobs[np.array([2, 0])] == [b"\x02\x02\x02", b"\x00"] and len(blobs) == 3
    with pytest.raises(PicPacValueError, match="no field 'mask'"):
        ReaderArray(raw, "mask")


# -- callable, iterator, composite, choice, map ------------------------------------------------------
def test_callable_and_iterator_sources():
    X = np.arange(12)

    def batches(batch_size, **kwargs):
        assert kwargs == {"flag": 1}
        return ArrayDataSource([X]).batch_iterator(batch_size)
    cds = CallableDataSource(batches, lambda **kw: 12)
    assert not cds.is_random_access and cds.num_samples(flag=1) == 12
    assert [b[0].tolist() for b in cds.batch_iterator(5, flag=1)][-1] == [10, 11]
    assert CallableDataSource(batches, np.inf).num_samples() == np.inf and CallableDataSource(batches).num_samples() is None
    with pytest.raises(TypeError):
        CallableDataSource(batches, "many")
    it = iter([(X[:3],), (X[3:6],)])
    ids = IteratorDataSource(it, 6)
    assert ids.batch_iterator(100) is it and ids.num_samples() == 6
    with pytest.raises(TypeError):
        IteratorDataSource(it, 2.5)
    assert data_source.coerce_data_source([X, X]).data[1] is X
    assert isinstance(data_source.coerce_data_source(it), IteratorDataSource)
    assert isinstance(data_source.coerce_data_source(batches), CallableDataSource)
    with pytest.raises(ValueError):
        data_source.coerce_data_source([])
    with pytest.raises(TypeError):
        data_source.coerce_data_source([X, cds])


def test_composite_draws_members_together_and_trims():
    lab_X, lab_y, unlab = np.arange(7) * 10, np.arange(7), np.arange(16) * 100
    lab = ArrayDataSource([lab_X, lab_y], repeats=-1)
    unl = ArrayDataSource([unlab])
    comp = CompositeDataSource([lab, unl])
    assert comp.num_samples() == 16 and comp.is_random_access
    rng = np.random.RandomState(4)
    got = list(comp.batch_iterator(5, shuffle=rng))
    # draws in the order zip pulls the members: lab pass 1, unlab, lab pass 2 (batch 2), lab pass 3 ...
    ref = np.random.RandomState(4)
    lab1, unl1, lab2, lab3 = ref.permutation(7), ref.permutation(16), ref.permutation(7), ref.permutation(7)
    lab_order = np.concatenate([lab1, lab2, lab3])
    assert [len(b[0]) for b in got] == [5, 5, 5, 1] and all(len(b) == 3 for b in got)  # trimmed, flattened
    assert np.array_equal(np.concatenate([b[2] for b in got]), unlab[unl1])
    assert np.array_equal(np.concatenate([b[0] for b in got]), lab_X[lab_order[:16]])
    untrimmed = list(CompositeDataSource([lab, unl], trim=False).batch_iterator(5))
    assert [len(b[0]) for b in untrimmed] == [5, 5, 5, 5] and len(untrimmed[-1][2]) == 1
    nested = CompositeDataSource([comp, CompositeDataSource([lab, unl], flatten=False)], flatten=False)
    first = next(nested.batch_iterator(2))
    assert len(first) == 2 and len(first[0]) == 3 and isinstance(first[1][0], tuple) and first[1][1][0].tolist() == [0, 100]
    idx = next(comp.batch_indices_iterator(5))
    assert [i.tolist() for i in idx] == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert comp.samples_by_indices(idx)[2].tolist() == [0, 100, 200, 300, 400]
    with pytest.raises(ValueError, match="one index batch per data source"):
        comp.samples_by_indices([np.arange(2)])
    not_ra = CompositeDataSource([CallableDataSource(lambda bs, **kw: iter(())), unl])
    assert not not_ra.is_random_access
    with pytest.raises(TypeError, match="needs random access"):
        not_ra.batch_indices_iterator(3)


def test_choice_round_robin_stratified_and_shuffled():
    sizes = (8, 4, 2)
    members = [ArrayDataSource([np.arange(n) + 100 * k]) for k, n in enumerate(sizes)]
    rr = ChoiceDataSource(members)
    assert rr.num_samples() == 14
    assert [b[0].tolist() for b in rr.batch_iterator(2)] == [[0, 1], [100, 101], [200, 201], [2, 3], [102, 103]]
    strat = ChoiceDataSource(members, stratified=True)
    chosen = [int(b[0][0]) // 100 for b in strat.batch_iterator(2)]
    assert chosen == [0, 1, 2, 0, 0, 1, 0]  # 4, 2 and 1 batches, spread evenly
    # shuffled, not stratified: a permutation of the members per round, members shuffled on their own
    rng = np.random.RandomState(8)
    got = [b.ds_index for b in rr.batch_indices_iterator(2, shuffle=rng)]
    ref, left, started, want = np.random.RandomState(8), [4, 2, 1], [False] * 3, []
    running = True
    while running:  # a model of the draws: one RNG, drawn from in the order batchup draws
        for k in ref.permutation(3).tolist():
            if not started[k]:
                ref.permutation(sizes[k])  # a member's pass is drawn when its first batch is asked for
                started[k] = True
            if left[k] == 0:
                running = False
                break
            left[k] -= 1
            want.append(k)
    assert got == want and same_state(rng, ref)
    # stratified shuffled: every member's batches exactly once
    got = list(strat.batch_indices_iterator(2, shuffle=np.random.RandomState(0)))
    assert sorted(b.ds_index for b in got) == [0] * 4 + [1] * 2 + [2]
    assert isinstance(got[0], ChoiceBatch)
    assert strat.samples_by_indices(ChoiceBatch(np.array([1]), 2))[0].tolist() == [201]
    with pytest.raises(TypeError, match="ChoiceBatch"):
        strat.samples_by_indices((np.array([1]), 2))
    assert ChoiceDataSource._ds_indices_stratified_in_order([3, 0, 1]).tolist() == [0, 2, 0, 0]


def test_map_source_and_batch_maps():
    X, Y = np.arange(11.0), np.arange(11) * 2
    ds = ArrayDataSource([X, Y])
    doubled = ds.map(lambda x, y: (x * 2, y))
    assert isinstance(doubled, MapDataSource) and doubled.is_random_access and doubled.num_samples() == 11
    assert next(doubled.batch_iterator(3))[0].tolist() == [0.0, 2.0, 4.0]
    assert doubled.samples_by_indices(np.array([10]))[0].tolist() == [20.0]
    (sq,) = ds.batch_map_concat(lambda x, y: x ** 2, 4)
    assert sq.tolist() == (X ** 2).tolist()
    mean_x, mean_y = ds.batch_map_mean(lambda x, y: (x.sum(), y.sum()), 4)
    assert np.isclose(mean_x, X.mean()) and np.isclose(mean_y, Y.mean())
    (m,) = ds.batch_map_mean(lambda x, y: x, 4, sum_axis=0)
    assert np.isclose(m, X.mean())
    it = ds.batch_iterator(2)
    assert data_source.batch_map_concat(lambda x, y: x, it, n_batches=2)[0].tolist() == [0, 1, 2, 3]
    assert next(it)[0].tolist() == [4, 5]  # never pulled one batch too many
    with pytest.raises(ValueError, match="give n_batches"):
        ArrayDataSource([X], repeats=-1).batch_map_concat(lambda x: x, 4)
    assert ArrayDataSource([X], repeats=-1).batch_map_concat(lambda x: x, 4, n_batches=4)[0].shape == (16,)
    with pytest.raises(TypeError):
        ds.batch_map_concat(lambda x, y: "nope", 4)
    assert ds.batch_map_mean(lambda x, y: None, 4) is None
