"""ImageStream: config keys, exact outputs, passes and padding, splits, determinism, errors, shutdown."""
from __future__ import annotations

import re
import threading
import time
import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.stream.config import KEYS, LEGACY
from picpac.transforms import Sample

from helpers import make_db, png, run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stream.md"


def ids(images: np.ndarray) -> list[int]:
    """Record ids read back from the images' first channel (NHWC, RGB: R = 3i)."""
    return [int(v) // 3 for v in images[:, 0, 0, 0]]


def active_threads() -> int:
    return sum(t.name.startswith("picpac-stream") for t in threading.enumerate())


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "db.picpac")


# -- config --------------------------------------------------------------------------------------
def test_every_key_is_documented():
    table = re.findall(r"^\| `(\w+)` \|", DOCS.read_text(), re.M)
    assert set(table) == set(KEYS) | set(LEGACY)


@pytest.mark.parametrize("key, value, error, message", [
    ("resize_widht", 3, picpac.PicPacValueError, "unknown config key 'resize_widht'; did you mean 'resize_width'"),
    ("spilt", 5, picpac.PicPacValueError, "did you mean 'split'"),
    ("batch", 0, picpac.PicPacValueError, "'batch' must be in [1, 65536]"),
    ("batch", 2.5, picpac.PicPacTypeError, "'batch' must be an int"),
    ("loop", "yes", picpac.PicPacTypeError, "'loop' must be True or False"),
    ("channels", 2, picpac.PicPacValueError, "'channels' must be one of 1, 3, -1"),
    ("order", "CHW", picpac.PicPacValueError, "'order' must be one of 'NCHW', 'NHWC'"),
    ("dtype", "float64", picpac.PicPacValueError, "'dtype'"),
    ("std", [1, 0, 1], picpac.PicPacValueError, "'std' must not contain 0"),
    ("mean", "x", picpac.PicPacTypeError, "'mean'"),
    ("transforms", [5], picpac.PicPacTypeError, "is neither a function"),
])
def test_bad_keys_and_values_name_the_key(db, key, value, error, message):
    with pytest.raises(error, match=re.escape(message)):
        picpac.ImageStream(db, **{key: value})


def test_keys_that_must_agree(db):
    with pytest.raises(picpac.PicPacValueError, match="'split_fold' must be < split=5"):
        picpac.ImageStream(db, split=5, split_fold=5)
    with pytest.raises(picpac.PicPacValueError, match="'mean'/'std' need dtype='float32'"):
        picpac.ImageStream(db, dtype="uint8", mean=[1, 2, 3])
    with pytest.raises(picpac.PicPacValueError, match="'bgr2rgb' and 'colorspace' both given"):
        picpac.ImageStream(db, bgr2rgb=True, colorspace="BGR")
    with pytest.raises(picpac.MissingPathError):
        picpac.ImageStream(db.parent / "nope.picpac")
    with pytest.raises(picpac.PicPacTypeError, match="needs a database"):
        picpac.ImageStream(batch=3)


def test_defaults_follow_picpac(db):
    with picpac.ImageStream(db) as s:
        c = s.config
        assert (c["loop"], c["shuffle"], c["reshuffle"], c["batch"], c["order"], c["dtype"]) == \
               (True, True, True, 1, "NCHW", "float32")
        images, labels, pad = next(s)
        assert images.shape == (1, 3, 6, 8) and images.dtype == np.float32 and labels.dtype == np.float32


def test_picpac_dict_config_and_legacy_keys(db):
    with picpac.ImageStream({"db": str(db), "loop": False, "shuffle": False, "batch": 20,
                             "bgr2rgb": False, "channel_first": False}) as s:
        images, labels, pad = next(s)
    assert images.shape == (20, 6, 8, 3)
    np.testing.assert_array_equal(images[5, 0, 0], [5, 10, 15])  # BGR kept


# -- exact output --------------------------------------------------------------------------------
def test_pixels_labels_and_layouts_are_exact(db):
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, dtype="uint8", order="NHWC") as s:
        images, labels, pad = next(s)
    assert images.dtype == np.uint8 and images.shape == (4, 6, 8, 3) and pad == 0
    for i in range(4):
        assert (images[i] == [3 * i, 2 * i, i]).all()  # RGB
    np.testing.assert_array_equal(labels, [0, 1, 2, 3])
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, mean=[1, 2, 3], std=2) as s:
        images, _, _ = next(s)
    assert images.shape == (4, 3, 6, 8)
    np.testing.assert_array_equal(images[3, :, 0, 0], [(9 - 1) / 2, (6 - 2) / 2, (3 - 3) / 2])
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, channels=1, dtype="uint8") as s:
        images, _, _ = next(s)
    gray = cv2.imdecode(np.frombuffer(png(np.full((6, 8, 3), (3, 6, 9), np.uint8)), np.uint8),
                        cv2.IMREAD_GRAYSCALE)  # OpenCV's own grayscale decode (not cvtColor: it rounds differently)
    assert images.shape == (4, 1, 6, 8) and (images[3, 0] == gray).all() and gray[0, 0] in (6, 7)


def test_onehot_labels_of_many_classes_take_batch_x_classes(tmp_path):
    path = make_db(tmp_path / "db.picpac", 4, labels=[0, 65535, 7, 65535])
    tracemalloc.start()
    try:
        with picpac.ImageStream(path, loop=False, shuffle=False, batch=4, onehot=2**16) as s:
            _, labels, _ = next(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert labels.shape == (4, 65536) and labels.sum() == 4 and labels[[0, 1, 2, 3], [0, 65535, 7, 65535]].all()
    assert peak < 64 << 20  # 1 MiB of labels (before: a 65536 x 65536 identity, 16 GiB)


def test_onehot_labels(tmp_path):
    path = make_db(tmp_path / "db.picpac", 6, labels=[0, 1, 2, 2, 1, 0])
    with picpac.ImageStream(path, loop=False, shuffle=False, batch=6, onehot=3) as s:
        _, labels, _ = next(s)
    np.testing.assert_array_equal(labels, np.eye(3, dtype=np.float32)[[0, 1, 2, 2, 1, 0]])
    # checked against the index when the stream is made, naming the first label and record that do not fit
    with pytest.raises(picpac.PicPacValueError, match=r"record 2 has label 2, not a class id in \[0, onehot=2\) "
                                                      r"\(2 of the stream's 6 labels are not\)"):
        picpac.ImageStream(path, loop=False, shuffle=False, batch=6, onehot=2)
    fractional = make_db(tmp_path / "fractional.picpac", 3, labels=[0, 1.5, 1])
    with pytest.raises(picpac.PicPacValueError, match=r"record 1 has label 1.5, not a class id"):
        picpac.ImageStream(fractional, onehot=3)
    with pytest.raises(picpac.PicPacValueError, match=r"record 1 has label 1.5, not an integral class id for "
                                                      r"label_dtype='int64'"):
        picpac.ImageStream(fractional, label_dtype="int64")


def test_geometry_keys(tmp_path):
    path = make_db(tmp_path / "db.picpac", 4, size=(40, 20))
    def shape(**config):
        with picpac.ImageStream(path, loop=False, shuffle=False, batch=4, order="NHWC", **config) as s:
            return next(s)[0].shape[1:3]
    assert shape(resize_width=16, resize_height=12) == (12, 16)
    assert shape(resize_width=20) == (10, 20)  # aspect kept
    assert shape(max_size=10) == (5, 10)
    assert shape(min_size=30) == (30, 60)
    assert shape(crop_width=10, crop_height=8) == (8, 10)
    assert shape(crop_width=50, crop_height=30) == (30, 50)  # zero-padded
    assert shape(round_div=16) == (16, 32)
    assert shape(round_div=16, round_mod=3) == (19, 35)


def test_different_sizes_in_a_batch_name_the_fix(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=png(np.zeros((4, 4, 3), np.uint8)))
        w.append(image=png(np.zeros((5, 4, 3), np.uint8)))
    with picpac.ImageStream(path, batch=2, loop=False) as s:
        with pytest.raises(picpac.PicPacValueError, match="different sizes.*resize_width/resize_height"):
            next(s)


# -- passes, padding, resets ---------------------------------------------------------------------
def test_one_pass_padding_and_lengths(db):
    with picpac.ImageStream(db, loop=False, batch=8, pad=True, dtype="uint8", order="NHWC") as s:
        assert (len(s), s.size()) == (3, 20)
        batches = run(s)
        assert [(len(b[0]), b[2]) for b in batches] == [(8, 0), (8, 0), (8, 4)]
        order = [i for b in batches for i in ids(b[0])]
        assert sorted(order[:20]) == list(range(20)) and order[20:] == order[:4]  # padding: the pass's start
        assert [i for b in batches for i in b[1].astype(int)] == order
    with picpac.ImageStream(db, loop=False, batch=8, pad=False) as s:
        assert [(len(b[0]), b[2]) for b in run(s)] == [(8, 0), (8, 0), (4, 0)]


def test_reshuffle_and_reset(db):
    def passes(**config):
        with picpac.ImageStream(db, loop=False, batch=5, dtype="uint8", order="NHWC", **config) as s:
            first = [i for b in run(s) for i in ids(b[0])]
            second = [i for b in run(s) for i in ids(b[0])]
            s.reset()
            again = [i for b in run(s) for i in ids(b[0])]
        return first, second, again
    first, second, again = passes(reshuffle=False)
    assert first == second == again and sorted(first) == list(range(20)) and first != list(range(20))
    first, second, again = passes(reshuffle=True)
    assert first != second and sorted(second) == list(range(20)) and again == first
    first, _, _ = passes(shuffle=False)
    assert first == list(range(20))


def test_endless_stream_continues_after_break(db):
    config = dict(batch=3, dtype="uint8", order="NHWC", seed=7)
    with picpac.ImageStream(db, **config) as s:
        whole = [i for b in run(s, 21) for i in ids(b[0])]
    with picpac.ImageStream(db, **config) as s:
        parts = [i for b in run(s, 7) for i in ids(b[0])]
        parts += ids(next(s)[0])  # next() and for loops share the position
        parts += [i for b in run(s, 12) for i in ids(b[0])]
        parts += ids(next(s)[0])
    assert parts == whole
    assert sorted(whole[:20]) == list(range(20)) and sorted(whole[20:40]) == list(range(20))


# -- sampling through the stream -----------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("seed", [0, 3])
def test_split_folds_through_the_stream(tmp_path, k, seed):
    labels = [i % 3 for i in range(30)]
    path = make_db(tmp_path / "db.picpac", 30, labels=labels)
    def records(fold: int, negate: bool) -> list[int]:
        with picpac.ImageStream(path, loop=False, batch=7, split=k, split_fold=fold, split_negate=negate,
                                seed=seed, stratify=True, dtype="uint8", order="NHWC") as s:
            found = [i for b in run(s) for i in ids(b[0])]
            assert len(found) == s.size()
            return found
    folds = [records(f, True) for f in range(k)]
    assert sorted(i for fold in folds for i in fold) == list(range(30))
    for f in range(k):
        assert sorted(records(f, False)) == sorted(set(range(30)) - set(folds[f]))
        counts = [sum(labels[i] == c for i in folds[f]) for c in range(3)]
        assert max(counts) - min(counts) <= 1


def test_mixin_labels(tmp_path):
    main = make_db(tmp_path / "main.picpac", 6)
    extra = make_db(tmp_path / "extra.picpac", 10, labels=[1] * 10)
    def labels(**config):
        with picpac.ImageStream(main, loop=False, shuffle=False, batch=100, mixin=str(extra), **config) as s:
            return next(s)[1].tolist()
    assert labels() == [0, 1, 2, 3, 4, 5] + [1] * 10
    assert labels(mixin_group_delta=10) == [0, 1, 2, 3, 4, 5] + [11] * 10
    assert labels(mixin_group_reset=7, mixin_max=3) == [0, 1, 2, 3, 4, 5, 7, 7, 7]


def test_oversample_is_class_balanced(tmp_path):
    labels = [0] * 12 + [1] * 3 + [2] * 1
    path = make_db(tmp_path / "db.picpac", 16, labels=labels)
    with picpac.ImageStream(path, batch=3, oversample=True) as s:
        for images, batch_labels, _ in run(s, 10):
            assert sorted(batch_labels.tolist()) == [0, 1, 2]


# -- parallel determinism --------------------------------------------------------------------------
def test_batches_identical_for_any_thread_count(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "noise.picpac"
    with picpac.Writer(path) as w:
        for i in range(40):
            w.append(image=png(rng.integers(0, 256, (30 + i % 7, 40, 3), dtype=np.uint8)), label=i)
    def batches(threads: int) -> list:
        with picpac.ImageStream(path, threads=threads, preload=3 * threads, batch=8, perturb=True,
                                crop_width=24, crop_height=24, seed=11) as s:
            return run(s, 12)
    one = batches(1)
    for threads in (2, 8):
        other = batches(threads)
        assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(one, other))
    # the crop is random: the same record crops differently in its two epochs
    assert not all((a[0] == b[0]).all() for a, b in zip(one[:5], one[5:10]))


def test_preload_bounds_the_samples_in_flight(db):
    calls = []
    def count(sample: Sample, rng) -> Sample:
        calls.append(sample.record)
        return sample
    with picpac.ImageStream(db, batch=4, threads=2, preload=5, transforms=[count]) as s:
        next(s)
        time.sleep(0.3)
        assert len(calls) <= 4 + 5
        next(s)
        time.sleep(0.3)
        assert len(calls) <= 8 + 5


# -- errors and shutdown ---------------------------------------------------------------------------
def test_undecodable_sample_is_named_or_skipped(tmp_path):
    path = make_db(tmp_path / "db.picpac", 10, broken={4})
    with picpac.ImageStream(path, loop=False, shuffle=False, batch=3) as s:
        next(s)
        with pytest.raises(picpac.SampleError, match=r"db.picpac: record 4 cannot decode its image") as info:
            next(s)
        assert info.value.index == 4
    assert active_threads() == 0
    with picpac.ImageStream(path, loop=False, shuffle=False, batch=3, skip_errors=True,
                            dtype="uint8", order="NHWC") as s:
        got = [i for b in run(s) for i in ids(b[0])]
        assert got == [0, 1, 2, 3, 5, 6, 7, 8, 9]
        stats = s.stats()
        assert stats["skipped"] == 1 and "record 4" in stats["skipped_records"][0]
        assert (stats["samples"], stats["batches"]) == (9, 3)


@pytest.mark.parametrize("backend", ["thread", "process"])
@pytest.mark.parametrize("loop", [True, False])
def test_skip_errors_raises_once_every_sample_failed(tmp_path, backend, loop):
    path = make_db(tmp_path / "db.picpac", 5, broken=set(range(5)))
    with picpac.ImageStream(path, loop=loop, batch=2, skip_errors=True, backend=backend, workers=2) as s:
        with pytest.raises(picpac.PicPacError, match=r"db.picpac: skip_errors=True, but every one of the "
                                                     r"stream's 5 samples failed, so it cannot make a batch; "
                                                     r"the last: .*db.picpac: record \d cannot decode its image"):
            next(s)
        # every sample was read before the stream gave up: 5 in a pass, at most 2 * 5 - 1 on an endless stream
        assert 5 <= s.stats()["skipped"] <= (9 if loop else 5)
    assert active_threads() == 0


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_skip_errors_goes_on_while_one_sample_is_good(tmp_path, backend):
    path = make_db(tmp_path / "db.picpac", 6, broken={0, 1, 2, 4, 5})
    with picpac.ImageStream(path, batch=4, skip_errors=True, backend=backend, workers=2, dtype="uint8",
                            order="NHWC") as s:
        images, labels, _ = next(s)
        assert labels.tolist() == [3.0] * 4 and ids(images) == [3] * 4
        assert s.stats()["skipped"] >= 15  # 5 failures in each of the passes that gave the 4 copies of record 3


def test_worker_exception_reaches_the_consumer_and_stops_workers(db):
    def boom(sample: Sample, rng) -> Sample:
        if sample.record == 7:
            raise ZeroDivisionError("bad transform")
        return sample
    with picpac.ImageStream(db, shuffle=False, batch=4, threads=4, transforms=[boom]) as s:
        with pytest.raises(ZeroDivisionError, match="bad transform") as info:
            run(s)
        assert any("record 7" in note for note in info.value.__notes__)
        deadline = time.monotonic() + 1
        while active_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert active_threads() == 0


def test_break_del_and_close_stop_the_workers(db):
    s = picpac.ImageStream(db, batch=2, threads=4)
    for _ in s:
        assert active_threads() > 0
        break
    assert active_threads() == 0
    next(s)
    assert active_threads() > 0
    s.close()
    assert active_threads() == 0
    with pytest.raises(picpac.PicPacError, match="closed"):
        next(s)
    s = picpac.ImageStream(db, batch=2, threads=4)
    next(s)
    del s
    assert active_threads() == 0


def test_many_cycles_leak_no_threads(db):
    before = threading.active_count()
    for i in range(1000):
        with picpac.ImageStream(db, batch=2, threads=2, loop=bool(i % 2)) as s:
            next(s)
    assert threading.active_count() == before


def test_cache_decodes_each_record_once(tmp_path):
    path = make_db(tmp_path / "db.picpac", 12)
    config = dict(loop=False, batch=4, reshuffle=False, perturb=True, crop_width=4, crop_height=4,
                  dtype="uint8", order="NHWC")
    with picpac.ImageStream(path, **config) as plain:
        expected = [b[0] for b in run(plain)]
    with picpac.ImageStream(path, cache=True, **config) as cached:
        first = [b[0] for b in run(cached)]
        with picpac.Reader(path) as r:
            offset = int(r.index["offset"][5])
        with open(path, "r+b") as f:  # damage record 5 under the open stream: only a re-read would notice
            f.seek(offset + 30)
            f.write(b"\xff\xff")
        second = [b[0] for b in run(cached)]
    assert all((a == b).all() and (a == c).all() for a, b, c in zip(expected, first, second))
    with picpac.ImageStream(path, **config) as uncached:
        with pytest.raises(picpac.CorruptRecordError, match="record 5"):
            run(uncached)


def test_bad_labels_for_oversample_name_the_record(tmp_path):
    path = make_db(tmp_path / "db.picpac", 5, labels=[0, 1, 0.5, 1, 0])
    with pytest.raises(picpac.PicPacValueError, match="record 2"):
        picpac.ImageStream(path, oversample=True)
    with pytest.raises(picpac.PicPacValueError, match="record 2"):
        picpac.ImageStream(path, split=2, stratify=True)


def test_sample_rng_is_the_keyed_philox_stream_whatever_came_before():
    from picpac.stream.processor import sample_rng
    expected = np.random.Generator(np.random.Philox(counter=[0, 0, 5, 3], key=[7, 1])).random(7)
    g = sample_rng(9, 9, 0, 9)
    g.random(3), g.integers(0, 5), g.standard_normal()  # leave draws buffered in the thread's generator
    assert np.array_equal(sample_rng(7, 3, 1, 5).random(7), expected)
    other = []
    t = threading.Thread(target=lambda: other.append(sample_rng(7, 3, 1, 5).random(7)))
    t.start()
    t.join()
    assert np.array_equal(other[0], expected)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_batch_images_start_on_64_byte_boundaries(db, backend):
    # TensorFlow shares an aligned batch and copies any other
    with picpac.ImageStream(db, loop=False, batch=4, backend=backend, workers=2, resize_width=8,
                            resize_height=6) as stream:
        batches = list(stream)
    assert len(batches) > 1 and all(b[0].ctypes.data % 64 == 0 for b in batches)


def test_resize_shorter_makes_the_shorter_side_that_long(db):
    """make_db's images are 8x6: the shorter side 12, the longer int(12 * 8 / 6) = 16, as torchvision's Resize(12)."""
    with picpac.ImageStream(db, loop=False, batch=4, resize_shorter=12, dtype="uint8", order="NHWC") as stream:
        assert next(iter(stream))[0].shape == (4, 12, 16, 3)
    with pytest.raises(picpac.PicPacError, match="'resize_shorter' .* not both"):
        picpac.ImageStream(db, resize_shorter=12, resize_width=20)
