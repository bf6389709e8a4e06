"""picpac.tools.explore.index: the grid's query parsed into a Filter (and its refusals), the meta match, and
DbIndex's cached fold and label selections, pages, and the bounded meta scan."""
from __future__ import annotations

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacValueError
from picpac.sampling.folds import assign_folds
from picpac.tools.explore import index
from picpac.tools.explore.index import DEFAULT_SEED, DbIndex, Filter, meta_matches, parse_filter

from helpers import damage_record


def test_an_empty_query_is_every_record():
    assert parse_filter({}) == Filter() == Filter(None, 1, 0, True, DEFAULT_SEED, False, None, None)
    assert DEFAULT_SEED == 2016


def test_parse_filter_reads_every_part():
    f = parse_filter({"label": " 2.5 ", "split": "5", "fold": "4", "negate": "0", "seed": "9", "stratify": "1",
                      "meta": " kind = odd = yes "})
    assert f == Filter(2.5, 5, 4, False, 9, True, "kind", "odd = yes")
    assert f.base == (2.5, 5, 4, False, 9, True)
    assert parse_filter({"label": "nan", "negate": "anything", "stratify": "yes"}).negate is True


@pytest.mark.parametrize("query, message", [
    ({"label": "two"}, "label must be a number, got 'two'"),
    ({"split": "0"}, "split must be an integer in [1, 1000], got '0'"),
    ({"split": "1001"}, "split must be an integer in [1, 1000], got '1001'"),
    ({"split": "-3"}, "split must be an integer in [1, 1000], got '-3'"),
    ({"split": "3", "fold": "3"}, "fold must be in [0, 2] for split=3, got 3"),
    ({"fold": "1000"}, "fold must be an integer in [0, 999], got '1000'"),
    ({"seed": "1e3"}, "seed must be an integer in [0, 9223372036854775807], got '1e3'"),
    ({"seed": "9" * 60}, "seed must be an integer in [0, 9223372036854775807], got '" + "9" * 40 + "'"),
    ({"meta": "kind"}, "meta filter must be key=value, got 'kind'"),
    ({"meta": " =odd"}, "meta filter must be key=value, got '=odd'"),
])
def test_parse_filter_refuses_a_bad_part_naming_it(query, message):
    with pytest.raises(PicPacValueError) as caught:
        parse_filter(query)
    assert str(caught.value) == message


def test_a_fold_is_free_without_a_split():
    assert parse_filter({"fold": "7"}).fold == 7


@pytest.mark.parametrize("meta, key, value, match", [
    ({"kind": "odd"}, "kind", "odd", True),
    ({"kind": "odd"}, "kind", "even", False),
    ({"n": 7}, "n", "7", True),
    ({"n": 7}, "n", "7.0", True),  # the JSON value 7.0 equals 7
    ({"n": "7"}, "n", "7", True),
    ({"flag": True}, "flag", "true", True),
    ({"flag": True}, "flag", "True", False),  # JSON spells it true
    ({"tags": [1, 2]}, "tags", "[1, 2]", True),
    ({"nothing": None}, "nothing", "null", True),
    ({"n": 7}, "n", "seven", False),
    ({"n": 7}, "m", "7", False),
    ([("n", 7)], "n", "7", False),
    (None, "n", "7", False),
])
def test_meta_matches_text_or_the_json_value_it_spells(meta, key, value, match):
    assert meta_matches(meta, key, value) is match


@pytest.fixture
def db(tmp_path):
    """30 records: label i % 3 (record 29 labelled 0.5), groups of 3 for records 0..8, meta {"n": i, "kind"}."""
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(30):
            w.append(image=b"x", label=0.5 if i == 29 else i % 3, group=i // 3 if i < 9 else None,
                     meta={"n": i, "kind": "odd" if i % 2 else "even"})
    return path


@pytest.fixture
def x(db):
    opened = DbIndex(str(db))
    yield opened
    opened.close()


def test_label_values_are_the_distinct_labels_only_when_all_are_whole(x, tmp_path):
    assert len(x) == 30 and x.label_values.tolist() == []  # record 29's 0.5
    path = tmp_path / "whole.picpac"
    with picpac.Writer(path) as w:
        for label in (3, 1, 3, -2):
            w.append(image=b"x", label=label)
    whole = DbIndex(str(path))
    assert whole.label_values.tolist() == [-2.0, 1.0, 3.0]
    whole.close()


def test_folds_are_the_streams_and_cached(x):
    with picpac.Reader(x.reader.path) as r:
        want = assign_folds(r.labels, r.groups, 4, 7, shuffle=True)
    folds = x.folds(4, 7)
    assert np.array_equal(folds, want) and x.folds(4, 7) is folds
    assert np.array_equal(x.folds(4), assign_folds(x.labels, x.reader.groups, 4, DEFAULT_SEED))
    assert x.fold_counts(4, 7) == np.bincount(want, minlength=4).tolist()
    assert len(set(folds[:9].reshape(3, 3).tolist()[0])) == 1  # a group stays in one fold


def test_the_fold_cache_keeps_the_four_used_last(x):
    kept = {seed: x.folds(2, seed) for seed in range(4)}
    assert x.folds(2, 0) is kept[0]  # used again: the most recent now
    x.folds(2, 4)  # a fifth: seed 1's, the least recent, goes
    assert x.folds(2, 1) is not kept[1] and np.array_equal(x.folds(2, 1), kept[1])
    assert x.folds(2, 0) is kept[0]  # (seed 2's went for seed 1's)
    assert x.folds(2, 2) is not kept[2]


def test_selection_by_label_and_fold(x):
    assert x.selection(Filter()) is None
    assert x.selection(Filter(label=1.0)).tolist() == list(range(1, 29, 3))
    assert x.selection(Filter(label=0.5)).tolist() == [29]
    folds = x.folds(3, 5)
    held = x.selection(Filter(split=3, fold=2, seed=5))
    rest = x.selection(Filter(split=3, fold=2, seed=5, negate=False))
    assert held.tolist() == np.flatnonzero(folds == 2).tolist() and rest.tolist() == np.flatnonzero(folds != 2).tolist()
    both = x.selection(Filter(label=0.0, split=3, fold=2, seed=5))
    assert both.tolist() == [i for i in held.tolist() if i % 3 == 0 and i != 29]
    assert x.selection(Filter(label=1.0)) is x.selection(Filter(label=1.0, meta_key="n", meta_value="1"))  # cached


def test_pages_of_a_selection_and_of_every_record(x):
    assert x.page(Filter(), 0, 12) == (list(range(12)), 12, 30)
    assert x.page(Filter(), 24, 12) == (list(range(24, 30)), None, 30)
    assert x.page(Filter(), 40, 5) == ([], None, 30)
    assert x.page(Filter(label=2.0), 3, 2) == ([11, 14], 5, 9)
    assert x.page(Filter(label=2.0), 8, 2) == ([26], None, 9)


def test_the_meta_filter_reads_records_until_the_page_is_full(x):
    odd = Filter(meta_key="kind", meta_value="odd")
    assert x.page(odd, 0, 4) == ([1, 3, 5, 7], 8, None)
    assert x.page(odd, 8, 100) == ([9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29], None, None)
    assert x.page(Filter(label=1.0, meta_key="kind", meta_value="even"), 0, 2) == ([4, 10], 4, None)
    assert x.page(Filter(meta_key="n", meta_value="12"), 0, 5) == ([12], None, None)


def test_the_meta_filter_reads_at_most_max_scan_records_a_page(x, monkeypatch):
    monkeypatch.setattr(index, "MAX_SCAN", 5)
    assert x.page(Filter(meta_key="n", meta_value="20"), 0, 5) == ([], 5, None)  # stopped: links on from 5
    assert x.page(Filter(meta_key="n", meta_value="20"), 20, 5) == ([20], 25, None)
    assert x.page(Filter(meta_key="n", meta_value="29"), 25, 5) == ([29], None, None)


def test_the_meta_filter_steps_over_a_damaged_record(db):
    damage_record(db, 3, at=20)  # a byte of its meta
    x = DbIndex(str(db))
    try:
        with pytest.raises(picpac.CorruptError, match="record 3 has meta that is not valid JSON"):
            x.reader.read(3, check=False).meta
        assert x.page(Filter(meta_key="kind", meta_value="odd"), 0, 3) == ([1, 5, 7], 8, None)
    finally:
        x.close()
