"""picpac.image.batched, step by step: the counter-based draws, the thread's reused buffers, each batch step's
pixels against NumPy, the plan a list of transforms becomes (or why it has none), and convert."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from picpac.image import batched
from picpac.image.batched import (BatchCrop, BatchFlip, BatchNormalize, BatchPad, Plan, below, buffer, convert, draws,
                                  in_buffer, plan, uniforms)
from picpac.image.color import Normalize
from picpac.image.transforms import (CenterCrop, Crop, Flip, LimitSize, Pad, Resize, Rotate, RoundSize, Sample,
                                     apply_all)
from picpac.image.transforms import convert as convert_one

MASK, GOLDEN = 2**64 - 1, 0x9E3779B97F4A7C15


def mix(z: int) -> int:
    """splitmix64's finaliser, written out for plain ints."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_draws(seed: int, epoch: int, source: int, record: int, count: int) -> list[int]:
    """The draws as the docstring of batched.draws defines them."""
    k = mix((mix((seed + GOLDEN) & MASK) + epoch * 2**32 + source + GOLDEN) & MASK)
    key = mix((k + record + GOLDEN) & MASK)
    return [mix((key + (j + 1) * GOLDEN) & MASK) for j in range(count)]


def in_fresh_thread(function):
    """Run ``function`` on a new thread (its own, empty buffers); its result or its exception."""
    out = {}

    def run():
        try:
            out["value"] = function()
        except BaseException as exc:  # handed back to the test
            out["error"] = exc
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def batch(b: int = 4, h: int = 5, w: int = 6, c: int | None = 3, dtype=np.uint8) -> np.ndarray:
    shape = (b, h, w) if c is None else (b, h, w, c)
    return (np.arange(np.prod(shape)) % 251).astype(dtype).reshape(shape)


# -- draws ------------------------------------------------------------------------------------------------
def test_mix_is_splitmix64():
    assert mix(GOLDEN) == 0xE220A8397B1DCDAF  # splitmix64's first output from state 0
    assert batched._mix(np.array([GOLDEN], np.uint64))[0] == 0xE220A8397B1DCDAF
    assert batched._mix_int(GOLDEN) == 0xE220A8397B1DCDAF


def test_draws_follow_the_documented_hash_exactly():
    got = draws(2016, [0, 3, 2**32 - 1], [0, 1, 7], [0, 5, 2**40], 4)
    assert got.dtype == np.uint64 and got.shape == (3, 4)
    for row, key in zip(got.tolist(), [(0, 0, 0), (3, 1, 5), (2**32 - 1, 7, 2**40)]):
        assert row == reference_draws(2016, *key, 4)
    assert draws(2**63 - 1, 1, 2, [9], 2).tolist() == [reference_draws(2**63 - 1, 1, 2, 9, 2)]


def test_draws_broadcast_the_epoch_and_source_and_take_a_single_record():
    assert np.array_equal(draws(1, 2, 3, [4, 5], 3), draws(1, [2, 2], [3, 3], [4, 5], 3))
    assert np.array_equal(draws(1, 2, 3, 4, 3), draws(1, 2, 3, [4], 3))
    assert draws(1, 0, 0, [4, 5], 0).shape == (2, 0)


def test_uniforms_take_the_top_53_bits():
    bits = np.array([0, 2**11 - 1, 2**11, 2**63, MASK], np.uint64)
    assert uniforms(bits).tolist() == [0.0, 0.0, 2.0**-53, 0.5, 1 - 2.0**-53]


def test_below_maps_draws_to_each_samples_range():
    bits = np.array([0, 2**63, MASK, MASK], np.uint64)
    assert below(bits, 10).tolist() == [0, 5, 9, 9]
    assert below(bits, [1, 3, 7, 1]).tolist() == [0, 1, 6, 0]
    assert below(bits, 10).dtype == np.int64


# -- the thread's buffers -----------------------------------------------------------------------------------
def test_a_buffer_is_reused_for_the_same_row_shape_and_grown_when_short():
    def run():
        a = buffer("x", (4, 2, 3), np.uint8)
        b = buffer("x", (2, 2, 3), np.uint8)
        c = buffer("x", (6, 2, 3), np.uint8)
        d = buffer("x", (4, 2, 3), np.uint8)
        return a, b, c, d
    a, b, c, d = in_fresh_thread(run)
    assert (a.shape, b.shape, c.shape, d.shape) == ((4, 2, 3), (2, 2, 3), (6, 2, 3), (4, 2, 3))
    assert b.ctypes.data == a.ctypes.data  # the first rows of the same buffer
    assert c.ctypes.data != a.ctypes.data and d.ctypes.data == c.ctypes.data  # grown, then kept


def test_buffers_differ_by_name_row_shape_dtype_and_fill():
    def run():
        base = buffer("x", (2, 3), np.uint8)
        others = [buffer("y", (2, 3), np.uint8), buffer("x", (2, 4), np.uint8), buffer("x", (2, 3), np.int16),
                  buffer("x", (2, 3), np.uint8, fill=7)]
        return base, others
    base, others = in_fresh_thread(run)
    assert not any(np.may_share_memory(base, o) for o in others)
    assert np.all(others[-1] == 7)


def test_a_filled_buffer_is_filled_once_and_reused_with_what_was_written():
    def run():
        first = buffer("pad", (2, 3), np.uint8, fill=9)
        first[0, 0] = 1
        return first.copy(), buffer("pad", (2, 3), np.uint8, fill=9)
    first, again = in_fresh_thread(run)
    assert first.tolist() == [[1, 9, 9], [9, 9, 9]] and again.tolist() == first.tolist()


def test_buffers_are_per_thread_and_at_most_eight_are_kept():
    def run():
        made = [buffer(f"b{i}", (1, 2), np.uint8) for i in range(8)]
        kept = [in_buffer(m) for m in made]
        buffer("ninth", (1, 2), np.uint8)  # the ninth: the old ones are dropped
        return kept, [in_buffer(m) for m in made], len(batched._thread.buffers)
    kept, after, count = in_fresh_thread(run)
    assert kept == [True] * 8 and after == [False] * 8 and count == 1
    mine = buffer("mine", (1, 2), np.uint8)
    assert in_buffer(mine) and in_buffer(mine[:, 1:])
    assert in_fresh_thread(lambda: in_buffer(mine)) is False
    assert not in_buffer(np.zeros((1, 2), np.uint8))


# -- the steps ------------------------------------------------------------------------------------------------
def test_pad_constant_puts_the_batch_inside_a_filled_border():
    x = batch()
    out = BatchPad(1, 2, 3, 0, fill=7)(x, None, 0)
    assert np.array_equal(out, np.pad(x, [(0, 0), (1, 2), (3, 0), (0, 0)], constant_values=7))
    again = BatchPad(1, 2, 3, 0, fill=7)(x[:2] + 1, None, 0)  # the reused buffer keeps its border
    assert np.array_equal(again, np.pad(x[:2] + 1, [(0, 0), (1, 2), (3, 0), (0, 0)], constant_values=7))


@pytest.mark.parametrize("fill, dtype, want", [(300, np.uint8, 255), (-2.6, np.uint8, 0), (2.6, np.uint8, 3),
                                               (2.5, np.int16, 2), (2.6, np.float32, np.float32(2.6))])
def test_pad_stores_the_fill_as_opencv_would_in_the_dtype(fill, dtype, want):
    out = BatchPad(1, 0, 0, 0, fill=fill)(batch(dtype=dtype), None, 0)
    assert out.dtype == dtype and np.all(out[:, 0] == want)


@pytest.mark.parametrize("border, mode", [("replicate", "edge"), ("reflect", "reflect"), ("wrap", "wrap")])
def test_pad_borders_are_numpys(border, mode):
    x = batch(c=None)
    out = BatchPad(2, 1, 0, 3, border=border)(x, None, 0)
    assert np.array_equal(out, np.pad(x, [(0, 0), (2, 1), (0, 3)], mode=mode))


def test_centre_crop_is_one_window_for_all():
    x = batch(h=7, w=9)
    out = BatchCrop(3, 4)(x, None, 0)
    assert np.array_equal(out, x[:, 2:5, 2:6])
    assert BatchCrop(3, 4).draws == 0 and BatchCrop(3, 4, random=True).draws == 2


def test_random_crop_takes_each_samples_window_from_its_draws_x_then_y():
    x = batch(b=16, h=9, w=11)
    bits = draws(5, 0, 0, np.arange(16), 3)
    out = BatchCrop(4, 6, random=True)(x, bits, 1)
    ys, xs = below(bits[:, 2], 9 - 4 + 1), below(bits[:, 1], 11 - 6 + 1)
    assert len(set(zip(ys.tolist(), xs.tolist()))) > 4
    for i in range(16):
        assert np.array_equal(out[i], x[i, ys[i]:ys[i] + 4, xs[i]:xs[i] + 6]), i


def test_a_crop_larger_than_the_samples_pads_them_centred_with_its_fill():
    x = batch(h=3, w=4, c=None)
    out = BatchCrop(6, 5, fill=200)(x, None, 0)
    assert np.array_equal(out, np.pad(x, [(0, 0), (1, 2), (0, 1)], constant_values=200))


def test_flip_mirrors_the_samples_its_draws_pick_and_leaves_the_rest():
    x = batch(b=32)
    bits = draws(1, 0, 0, np.arange(32), 2)
    horizontal, vertical = BatchFlip(0.5, 0.3).flags(bits, 0)
    assert 0 < horizontal.sum() < 32 and 0 < vertical.sum() < 32
    out = BatchFlip(0.5, 0.3)(x.copy(), bits, 0)
    for i in range(32):
        want = x[i][:, ::-1] if horizontal[i] else x[i]
        assert np.array_equal(out[i], want[::-1] if vertical[i] else want), i


def test_flip_never_writes_into_a_read_only_batch_or_a_buffer():
    x = batch()
    x.flags.writeable = False
    out = BatchFlip(1.0, 0.0)(x, draws(0, 0, 0, np.arange(4), 2), 0)
    assert np.array_equal(out, batch()[:, :, ::-1]) and np.array_equal(x, batch())
    held = buffer("held", (4, 5, 6, 3), np.uint8)
    held[:] = batch()
    out = BatchFlip(0.0, 1.0)(held, draws(0, 0, 0, np.arange(4), 2), 0)
    assert np.array_equal(held, batch()) and np.array_equal(out, batch()[:, ::-1])


def test_flip_that_picks_nobody_returns_the_batch_itself():
    x = batch()
    assert BatchFlip(0.0, 0.0)(x, draws(0, 0, 0, np.arange(4), 2), 0) is x


@pytest.mark.parametrize("shape, dtype", [((3, 4, 5, 600), np.uint8),  # more channels than the kernels' 512
                                          ((3, 4, 5), np.int64), ((3, 4, 5, 3), np.int64), ((3, 4, 5), np.uint64),
                                          ((3, 4, 5, 2), np.float64), ((3, 4, 5), np.int32), ((3, 4, 5, 3), np.uint16),
                                          ((3, 4, 5), np.float16), ((3, 4, 5, 2), np.bool_), ((3, 4, 5), np.int8)])
def test_flips_of_every_dtype_are_exact(shape, dtype):
    """Whole values, as stored: int64 across its range (OpenCV 5.1's cv2.flip gave values near 5e18 here)."""
    bits = np.random.default_rng(0).integers(0, 256, np.prod(shape) * np.dtype(dtype).itemsize, dtype=np.uint8)
    x = (bits % 2).astype(np.bool_).reshape(shape) if dtype is np.bool_ else bits.view(dtype).reshape(shape)
    for horizontal, vertical, want in ((1.0, 0.0, x[:, :, ::-1]), (0.0, 1.0, x[:, ::-1]), (1.0, 1.0, x[:, ::-1, ::-1])):
        out = BatchFlip(horizontal, vertical)(x.copy(), draws(0, 0, 0, np.arange(3), 2), 0)
        assert out.dtype == dtype and out.tobytes() == np.ascontiguousarray(want).tobytes()


def test_normalize_is_float32_per_channel():
    x = batch()
    out = BatchNormalize(np.float32([1, 2, 3]), np.float32([2, 4, 8]))(x, None, 0)
    assert out.dtype == np.float32 and np.array_equal(out, (x.astype(np.float32) - [1, 2, 3]) / np.float32([2, 4, 8]))


# -- plan ---------------------------------------------------------------------------------------------------
def test_plan_chains_the_steps_their_draw_slots_and_the_shape():
    p = plan([Pad(sides=(4, 4, 4, 4)), Crop(32, 30, random=True), Flip(0.5), Normalize(0.5, 0.25)], (32, 32, 3))
    assert isinstance(p, Plan)
    assert p.steps == (BatchPad(4, 4, 4, 4), BatchCrop(30, 32, True), BatchFlip(0.5, 0.0),
                       BatchNormalize(np.float32(0.5), np.float32(0.25)))
    assert p.slots == (0, 0, 2, 4) and p.draws == 4 and p.shape == (30, 32, 3)


def test_plan_leaves_out_what_changes_nothing_at_this_shape():
    p = plan([Resize(8, 6), LimitSize(max_size=8), Pad(width=4, height=4), Crop(8, 6), CenterCrop(8, 6),
              RoundSize(2), Flip(0.5, random=False), Flip(0, 0)], (6, 8))
    assert p.steps == () and p.slots == () and p.draws == 0 and p.shape == (6, 8)


def test_a_random_crop_is_random_only_where_it_is_smaller_than_the_sample():
    assert plan([Crop(10, 8, random=True)], (6, 8)).steps == (BatchCrop(8, 10, False),)  # padded: one place
    assert plan([Crop(8, 3, random=True)], (6, 8)).steps == (BatchCrop(3, 8, True),)
    assert plan([RoundSize(4, random=True)], (6, 8)).steps == (BatchCrop(4, 8, True),)


@pytest.mark.parametrize("transforms, shape, why", [
    ([Rotate(10)], (8, 8, 3), "Rotate has no batch version"),
    ([Resize(4, 4)], (6, 8), "Resize has no batch version (it resizes 8x6 to 4x4)"),
    ([LimitSize(min_size=12)], (6, 8), "LimitSize has no batch version (it resizes 8x6 to 16x12)"),
    ([Resize(shorter=3)], (6, 8), "Resize has no batch version (it resizes 8x6 to 4x3)"),
    ([Pad(sides=(6, 0, 0, 0), border="reflect")], (6, 8), "Pad has no batch version (a reflect border wider than "
                                                          "the 8x6 sample)"),
    ([Pad(sides=(7, 0, 0, 0), border="wrap")], (6, 8), "Pad has no batch version (a wrap border wider than the 8x6 "
                                                       "sample)"),
    ([RoundSize(10, 7)], (6, 8), "RoundSize has no batch version (a 8x6 sample is too small for it)"),
    ([Flip(transpose=0.5)], (6, 8), "Flip has no batch version (transpose)"),
    ([Normalize((1, 2), (1, 1))], (6, 8, 3), "Normalize has no batch version (Normalize: mean has 2 values for an "
                                             "image with 3 channel(s))"),
    ([Flip(0.5), lambda sample, rng: sample], (6, 8), "<lambda> has no batch version"),
])
def test_plan_says_which_transform_has_no_batch_version_and_why(transforms, shape, why):
    assert plan(transforms, shape) == why


def test_a_wrap_border_as_wide_as_the_sample_has_a_batch_version():
    assert plan([Pad(sides=(6, 0, 0, 0), border="wrap")], (6, 8)).steps == (BatchPad(0, 0, 6, 0, border="wrap"),)


def test_plan_gives_the_per_sample_pixels_of_deterministic_steps():
    images = batch(b=3, h=10, w=12)
    transforms = [Pad(sides=(3, 1, 2, 5), fill=7), CenterCrop(13, 9), Normalize((10, 20, 30), (2, 4, 8))]
    got = plan(transforms, images.shape[1:])(images.copy(), draws(0, 0, 0, np.arange(3), 0))
    for i in range(3):
        want = apply_all(transforms, Sample(images[i].copy(), 0, i), None).image
        assert want.shape == got[i].shape == (9, 13, 3) and np.allclose(got[i], want)


def test_a_plans_result_never_lies_in_the_threads_buffers():
    p = plan([Pad(sides=(1, 1, 1, 1))], (5, 6, 3))
    first = p(batch(), np.zeros((4, 0), np.uint64))
    second = p(batch() + 1, np.zeros((4, 0), np.uint64))
    assert not in_buffer(first) and not np.may_share_memory(first, second)
    assert np.array_equal(first[:, 1:-1, 1:-1], batch())


# -- convert ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channel_first", [False, True])
@pytest.mark.parametrize("dtype, mean, std", [(np.uint8, None, None), (np.float32, None, None),
                                              (np.float32, np.float32([1, 2, 3]), np.float32(4)),
                                              (np.float16, None, np.float32([2, 4, 8])), (np.float64, 128, None)])
def test_convert_gives_the_per_sample_values(channel_first, dtype, mean, std):
    images = batch(b=3)
    got = convert(images, channel_first, np.dtype(dtype), mean, std)
    mean_a = None if mean is None else np.asarray(mean, np.float32)
    std_a = None if std is None else np.asarray(std, np.float32)
    want = np.stack([convert_one(image, channel_first, np.dtype(dtype), mean_a, std_a) for image in images])
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    assert np.array_equal(got, want)


def test_convert_of_gray_samples_adds_their_channel():
    assert convert(batch(c=None), False, np.dtype(np.uint8), None, None).shape == (4, 5, 6, 1)
    assert convert(batch(c=None), True, np.dtype(np.uint8), None, None).shape == (4, 1, 5, 6)


def test_convert_keeps_a_ready_batch_and_copies_one_in_a_buffer():
    images = batch()
    assert convert(images, False, np.dtype(np.uint8), None, None) is images
    held = buffer("convert", images.shape, np.uint8)
    held[:] = images
    out = convert(held, False, np.dtype(np.uint8), None, None)
    assert not np.may_share_memory(out, held) and np.array_equal(out, images)

