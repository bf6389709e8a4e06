"""Array records (write_arrays, metadata 'arrays') and the stream's batch path (picpac.batched)."""
from __future__ import annotations

import re
import threading
import zlib

import numpy as np
import pytest

import picpac
from picpac import batched
from picpac.color import Normalize
from picpac.file.layout import crc32_joined, crc32_powers
from picpac.tools.info import describe, format_description
from picpac.sampling import Sampler
from picpac.transforms import CenterCrop, Crop, Flip, Pad, Rotate, Sample
from picpac.tools.verify import verify

CIFAR = [Pad(sides=(4, 4, 4, 4)), Crop(32, 32, random=True), Flip(horizontal=0.5)]


def arrays(n: int = 40, shape=(32, 32, 3), dtype=np.uint8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, *shape)).astype(dtype)
    return rng.integers(0, 256, (n, *shape)).astype(dtype)


@pytest.fixture
def cifar(tmp_path):
    images = arrays()
    path = tmp_path / "cifar.picpac"
    picpac.write_arrays(path, images, np.arange(len(images)) % 10, metadata={"classes": [str(i) for i in range(10)]})
    return path, images


def stream(path, **config):
    config = {"batch": 8, "dtype": "uint8", "order": "NHWC", "seed": 3, **config}
    return picpac.ImageStream(path, **config)


def take(s, count: int) -> list:
    out = []
    for i, batch in enumerate(s):
        out.append([a.copy() if isinstance(a, np.ndarray) else a for a in batch])
        if i + 1 == count:
            break
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y))
                                    for x, y in zip(a, b))


# -- writing and reading arrays -------------------------------------------------------------------------
@pytest.mark.parametrize("shape, dtype", [((32, 32, 3), np.uint8), ((5, 7), np.float32), ((4, 6, 2), np.uint16)])
def test_write_arrays_round_trip(tmp_path, shape, dtype):
    images = arrays(12, shape, dtype)
    path = tmp_path / "a.picpac"
    groups = np.arange(12) // 4
    assert picpac.write_arrays(path, images, np.arange(12) * 0.5, groups=groups, metadata={"source": "test"}) == 12
    with picpac.Reader(path) as r:
        assert r.metadata["arrays"] == {"image": {"shape": list(shape), "dtype": np.dtype(dtype).name}}
        assert r.metadata["source"] == "test" and r.fields == ["image"]
        assert r.arrays["image"].shape == shape and r.arrays["image"].dtype == dtype
        assert r.labels.tolist() == [i * 0.5 for i in range(12)] and r.groups.tolist() == groups.tolist()
        for i in range(12):
            assert bytes(r[i]["image"]) == images[i].tobytes()
            got = r.array(i)
            assert got.dtype == dtype and np.array_equal(got, images[i]) and not got.flags.writeable
        assert r.stride == r.index["size"][0]


def test_arrays_appended_by_hand_with_the_declaration(tmp_path):
    images = arrays(6, (4, 4))
    path = tmp_path / "hand.picpac"
    with picpac.Writer(path, metadata={"arrays": {"image": {"shape": [4, 4], "dtype": "uint8"}}}) as w:
        for i, a in enumerate(images):
            w.append(image=a, label=i, meta={"i": i}, note=b"x" * i)  # meta and another field: uneven records
        with pytest.raises(picpac.PicPacValueError, match=r"field 'image': got 15 bytes.*4x4 uint8 arrays of 16"):
            w.append(image=b"x" * 15)
        with pytest.raises(picpac.PicPacValueError, match=r"float32 array of shape \(4, 4\)"):
            w.append(image=np.zeros((4, 4), np.float32))
    with picpac.Reader(path) as r:
        assert r.stride is None and np.array_equal(r.array(5), images[5])
    with pytest.raises(picpac.PicPacValueError, match="'arrays' field 'image' needs a 'shape'"):
        picpac.Writer(tmp_path / "bad.picpac", metadata={"arrays": {"image": {"shape": [0], "dtype": "uint8"}}})
    with pytest.raises(picpac.PicPacValueError, match="bad 'dtype'"):
        picpac.Writer(tmp_path / "bad.picpac", metadata={"arrays": {"image": {"shape": [2], "dtype": "object"}}})
    with pytest.raises(picpac.PicPacValueError, match="labels has 3 entries for 6 images"):
        picpac.write_arrays(tmp_path / "bad.picpac", images, [1, 2, 3])


def test_info_and_verify_know_arrays(cifar, tmp_path):
    path, _ = cifar
    d = describe(path)
    assert d["arrays"] == {"image": {"shape": [32, 32, 3], "dtype": "uint8"}}
    assert "arrays:   image 32x32x3 uint8" in format_description(d)
    assert verify(path, decode=True, progress=False).ok  # sizes checked, not decoded
    bad = tmp_path / "short.picpac"
    with picpac.Writer(bad) as w:
        w.append(image=b"x" * 10)
    with picpac.Writer(bad, append=True, metadata={"arrays": {"image": {"shape": [4], "dtype": "uint8"}}}):
        pass
    report = verify(bad, decode=True, progress=False)
    assert report.undecodable == [0] and "has 10 bytes, not the 4 of a 4 uint8 array" in report.problems[0]


def test_crc_of_records_joined_from_their_checksums():
    rows = arrays(9, (100,), seed=1)
    crcs = [zlib.crc32(r) for r in rows]
    powers = crc32_powers(100, 16)
    for n in range(10):
        assert crc32_joined(crcs[:n], powers) == zlib.crc32(rows[:n].tobytes())


def test_sampler_take_is_what_at_yields():
    for oversample in (False, True):
        s = Sampler(np.arange(11) % 3, 5, shuffle=True, reshuffle=True, oversample=oversample)
        for start in (0, 7, 30):
            positions, epochs = s.take(start, 25)
            want = [next(it) for it in [s.at(start)] for _ in range(25)]
            assert list(zip(positions.tolist(), epochs.tolist())) == want


# -- the per-sample path on arrays ----------------------------------------------------------------------
def test_per_sample_path_views_arrays_without_decoding(cifar):
    path, images = cifar
    with stream(path, vectorize=False, shuffle=False, loop=False, transforms=[Rotate(10)]) as s:
        assert s.stats()["path"] == "sample" and s.stats()["path_reason"] == "vectorize=False"
        assert sum(len(b[0]) for b in s) == 40
    with stream(path, vectorize=False, shuffle=False, loop=False, batch=40) as s:
        got, labels, _ = next(iter(s))
        assert np.array_equal(got, images) and labels.tolist() == [i % 10 for i in range(40)]  # stored order, as is


# -- the batch path ---------------------------------------------------------------------------------------
def test_batch_path_equals_a_numpy_reference_from_the_same_draws(cifar):
    path, images = cifar
    with stream(path, shuffle=False, loop=False, transforms=CIFAR) as s:
        assert s.stats()["path"] == "batch" and s.stats()["path_reason"] is None
        got = np.concatenate([b[0] for b in s])
    # the documented draw layout: Crop draws 0 (x) and 1 (y), Flip draws 2 (horizontal) and 3 (vertical)
    bits = batched.draws(3, 0, 0, np.arange(40), 4)
    xs, ys = batched.below(bits[:, 0], 9), batched.below(bits[:, 1], 9)
    flips = batched.uniforms(bits[:, 2]) < 0.5
    assert 0 < flips.sum() < 40 and len(set(zip(xs.tolist(), ys.tolist()))) > 20
    for i in range(40):
        want = np.pad(images[i], ((4, 4), (4, 4), (0, 0)))[ys[i]:ys[i] + 32, xs[i]:xs[i] + 32]
        assert np.array_equal(got[i], want[:, ::-1] if flips[i] else want), i


def test_draws_depend_only_on_the_sample_key():
    one = batched.draws(7, [0, 1, 0], [0, 0, 1], [5, 5, 5], 3)
    assert len({tuple(r) for r in one.tolist()}) == 3  # epoch and source change every draw
    assert np.array_equal(batched.draws(7, 1, 0, [9, 5], 3)[1], one[1])  # not the batch around it
    assert not np.array_equal(batched.draws(8, 1, 0, [5], 3)[0], one[1])  # the seed does
    u = batched.uniforms(batched.draws(1, 0, 0, np.arange(20000), 2))
    assert abs(u.mean() - 0.5) < 0.01 and u.min() >= 0 and u.max() < 1


@pytest.mark.parametrize("transforms, extra", [
    ([Pad(sides=(3, 1, 2, 5), fill=7), CenterCrop(30, 33)], {}),
    ([Pad(width=40, height=36, border="reflect"), Crop(35, 30)], {}),
    ([Pad(sides=(2, 2, 2, 2), border="replicate"), Normalize((10, 20, 30), (2, 4, 8))], {"dtype": "float32"}),
    ([CenterCrop(20, 24)], {"order": "NCHW", "dtype": "float32", "mean": [1, 2, 3], "std": 2}),
    ([], {"resize_width": 32, "resize_height": 32, "crop_width": 30, "crop_height": 28}),
    ([], {"crop_width": 40, "crop_height": 28}),  # wider than the images: padded
])
def test_deterministic_steps_give_the_per_sample_pixels(cifar, transforms, extra):
    path, _ = cifar
    config = dict(shuffle=False, loop=False, transforms=transforms, **extra)
    with stream(path, **config) as fast, stream(path, vectorize=False, **config) as slow:
        assert (fast.stats()["path"], slow.stats()["path"]) == ("batch", "sample")
        assert same(take(fast, 5), take(slow, 5))


@pytest.mark.parametrize("shape, dtype", [((9, 7), np.float32), ((6, 5, 2), np.uint16)])
def test_other_shapes_and_dtypes_take_the_batch_path(tmp_path, shape, dtype):
    path = tmp_path / "other.picpac"
    images = arrays(10, shape, dtype)
    picpac.write_arrays(path, images)
    config = dict(shuffle=False, loop=False, dtype="float32", order="NCHW", transforms=[Pad(sides=(1, 2, 3, 4))])
    with stream(path, **config) as fast, stream(path, vectorize=False, **config) as slow:
        assert fast.stats()["path"] == "batch"
        got = take(fast, 2)
        assert same(got, take(slow, 2))
    channels = shape[2] if len(shape) == 3 else 1
    want = np.pad(images[:8].reshape(8, *shape[:2], channels), ((0, 0), (2, 4), (1, 3), (0, 0)))
    assert np.array_equal(got[0][0], want.transpose(0, 3, 1, 2).astype(np.float32))


def test_batches_identical_for_any_thread_count_and_after_break(cifar):
    path, _ = cifar
    runs = []
    for threads in (1, 2):
        with stream(path, threads=threads, transforms=CIFAR) as s:
            runs.append(take(s, 12))  # 96 samples: across three passes
    assert same(runs[0], runs[1])
    with stream(path, threads=2, transforms=CIFAR) as s:
        resumed = take(s, 3) + take(s, 4)
        resumed.append([a.copy() if isinstance(a, np.ndarray) else a for a in next(s)])
        resumed += take(s, 4)
    assert same(resumed, runs[0])
    first, second = runs[0][0][0], runs[0][5][0]  # pass 0 and pass 1 differ (epoch in the key)
    assert not np.array_equal(first, second)


def test_one_pass_padding_and_positions(cifar):
    path, _ = cifar
    with stream(path, loop=False, pad=True, batch=12, shuffle=False, transforms=CIFAR) as s:
        batches = list(s)
        assert [len(b[0]) for b in batches] == [12, 12, 12, 12] and [b[2] for b in batches] == [0, 0, 0, 8]
        assert batches[3][1][4:].tolist() == [i % 10 for i in range(8)]
        assert s.stats()["samples"] == 48 and len(s) == 4


def test_process_backend_gives_the_same_batches(cifar):
    path, _ = cifar
    with stream(path, transforms=CIFAR, workers=2) as threads, \
            stream(path, transforms=CIFAR, workers=2, backend="process", start_method="fork", copy=True) as processes:
        assert processes.stats()["path"] == "batch"
        assert same(take(threads, 9), take(processes, 9))


def test_other_transforms_fall_back_to_the_per_sample_path(cifar, tmp_path):
    path, _ = cifar

    def noisy(sample, rng):
        return sample

    for transforms, why in (([Rotate(10)], "Rotate has no batch version"), ([noisy], "noisy has no batch version"),
                            ([Flip(transpose=0.5)], "Flip has no batch version (transpose)")):
        with stream(path, transforms=transforms) as s:
            assert s.stats()["path"] == "sample" and s.stats()["path_reason"] == why
            assert next(s)[0].shape == (8, 32, 32, 3)
        message = re.escape(f"vectorize=True, but the batch path cannot run: {why}")
        with pytest.raises(picpac.PicPacValueError, match=message):
            stream(path, transforms=transforms, vectorize=True)
    with stream(path, resize_width=16, resize_height=16) as s:
        assert s.stats()["path_reason"] == "Resize has no batch version (it resizes 32x32 to 16x16)"
    with stream(path, annotate="auto") as s:
        assert s.stats()["path"] == "sample"
    encoded = tmp_path / "png.picpac"
    with picpac.Writer(encoded) as w:
        w.append(image=b"\x89PNG not really")
    with stream(encoded) as s:
        assert "not declared as an array" in s.stats()["path_reason"]


def test_uneven_records_and_a_mixin_take_the_batch_path(tmp_path, cifar):
    path, images = cifar
    uneven = tmp_path / "uneven.picpac"
    with picpac.Writer(uneven, metadata={"arrays": {"image": {"shape": [32, 32, 3], "dtype": "uint8"}}}) as w:
        for i, a in enumerate(images):
            w.append(image=a, label=i % 10, meta={"n": i}, other=b"?" * (i % 3))
    with stream(path, transforms=CIFAR) as even, stream(uneven, transforms=CIFAR) as odd:
        assert odd.stats()["path"] == "batch"
        assert same(take(even, 6), take(odd, 6))  # draws depend on (seed, epoch, source, record) only
    with stream(path, mixin=uneven, mixin_group_delta=100, transforms=CIFAR, batch=80, loop=False,
                shuffle=False) as mixed:
        got, labels, _ = next(iter(mixed))
        assert mixed.stats()["path"] == "batch"
        assert labels.tolist() == [i % 10 for i in range(40)] + [100 + i % 10 for i in range(40)]
        assert not np.array_equal(got[:40], got[40:])  # the mixin's samples have draws of their own


# -- errors ----------------------------------------------------------------------------------------------
def test_a_record_of_the_wrong_size_is_named_or_skipped(tmp_path):
    images = arrays(20, (4, 4, 3))
    path = tmp_path / "bad.picpac"
    with picpac.Writer(path) as w:
        for i, a in enumerate(images):
            w.append(image=a.tobytes()[:-1] if i == 13 else a, label=i)
    with picpac.Writer(path, append=True, metadata={"arrays": {"image": {"shape": [4, 4, 3], "dtype": "uint8"}}}):
        pass
    for vectorize in (True, False):
        with stream(path, loop=False, shuffle=False, batch=6, vectorize=vectorize) as s:
            next(s)
            next(s)
            with pytest.raises(picpac.SampleError, match=r"bad.picpac: record 13 has 47 bytes in its 'image' field, "
                                                         r"but the metadata 'arrays' declares 4x4x3 uint8 arrays of 48"):
                next(s)
        with stream(path, loop=False, shuffle=False, batch=6, vectorize=vectorize, skip_errors=True) as s:
            batches = list(s)
            assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11],
                                                        [12, 14, 15, 16, 17, 18], [19]]
            assert s.stats()["skipped"] == 1 and "record 13" in s.stats()["skipped_records"][0]


@pytest.mark.parametrize("backend", ["thread", "process"])
@pytest.mark.parametrize("loop", [True, False])
def test_skip_errors_on_the_batch_path_raises_once_every_record_failed(tmp_path, backend, loop):
    path = tmp_path / "bad.picpac"
    with picpac.Writer(path) as w:
        for i, a in enumerate(arrays(7, (4, 4, 3))):
            w.append(image=a.tobytes()[:-1], label=i)  # every record one byte short of its declared array
    with picpac.Writer(path, append=True, metadata={"arrays": {"image": {"shape": [4, 4, 3], "dtype": "uint8"}}}):
        pass
    with stream(path, loop=loop, batch=3, vectorize=True, skip_errors=True, backend=backend, workers=2) as s:
        with pytest.raises(picpac.PicPacError, match=r"bad.picpac: skip_errors=True, but every one of the stream's "
                                                     r"7 samples failed.*has 47 bytes in its 'image' field"):
            next(s)
        assert s.stats()["path"] == "batch" and 7 <= s.stats()["skipped"] <= (13 + 3 if loop else 7)


def test_a_damaged_record_fails_its_checksum_on_the_batch_path(cifar, tmp_path):
    path, _ = cifar
    with picpac.Reader(path) as r:
        where = int(r.index["offset"][9]) + 100
    data = bytearray(path.read_bytes())
    data[where] ^= 0xFF
    damaged = tmp_path / "damaged.picpac"
    damaged.write_bytes(bytes(data))
    with stream(damaged, loop=False, shuffle=False, batch=8, transforms=CIFAR) as s:
        next(s)
        with pytest.raises(picpac.CorruptRecordError, match="record 9 fails its checksum") as info:
            next(s)
        assert info.value.index == 9
    with stream(damaged, loop=False, shuffle=False, batch=8, skip_errors=True, transforms=CIFAR) as s:
        assert [len(b[0]) for b in s] == [8, 8, 8, 8, 7] and s.stats()["skipped"] == 1


def test_the_batch_path_checks_a_record_the_first_time_the_stream_reads_it(cifar):
    path, _ = cifar
    config = dict(loop=False, shuffle=False, batch=8, transforms=CIFAR)
    with stream(path, **config) as s:
        assert len(list(s)) == 5
        with picpac.Reader(path) as r:
            where = int(r.index["offset"][9]) + 100
        with open(path, "r+b") as f:  # damaged under the open stream, after its first read: not read again
            f.seek(where)
            f.write(b"\xff\xfe")
        assert len(list(s)) == 5  # record 9's new bytes are not checked again by this stream
    with stream(path, **config) as fresh, pytest.raises(picpac.CorruptRecordError, match="record 9"):
        list(fresh)


def test_no_threads_left_behind(cifar):
    path, _ = cifar
    with stream(path, transforms=CIFAR) as s:
        take(s, 3)
    assert not [t for t in threading.enumerate() if t.name.startswith("picpac-stream")]


# -- the per-sample border fix the batch path relies on -----------------------------------------------------
def test_a_crop_or_flip_after_a_pad_keeps_its_border():
    image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    s = Crop(6, 6)(Pad(sides=(2, 2, 2, 2), fill=5)(Sample(image, 0, 0), None), None)
    assert np.array_equal(s.image, np.pad(image, 1, constant_values=5))
    s = Flip(1.0)(Pad(sides=(2, 2, 2, 2), border="reflect")(Sample(image, 0, 0), None), np.random.default_rng(0))
    assert np.array_equal(s.image, np.pad(image, 2, mode="reflect")[:, ::-1])
    # a crop that reads outside the padded canvas: one border for the chain, the crop's
    s = Crop(10, 10, fill=9)(Pad(sides=(1, 1, 1, 1), fill=5)(Sample(image, 0, 0), None), None)
    assert s.image[0, 0] == s.image[2, 2] == 9 and s.image[3, 3] == 0
