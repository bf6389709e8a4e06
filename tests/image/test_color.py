"""Photometric transforms (picpac.color): exact pixels computed by hand."""
from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from picpac.color import AddColor, Blur, Color, ColorJitter, Grayscale, Invert, Normalize
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.image.shapes import Shapes
from picpac.transforms import Sample


class StubRng:
    """A deterministic rng: ``uniform`` returns the given values in turn (checking they lie in the range
    asked for and recording the ranges), ``random`` likewise, ``permutation`` a fixed order."""

    def __init__(self, uniforms=(), randoms=(), perm=(0, 1, 2, 3)):
        self.uniforms, self.randoms, self.perm = list(uniforms), list(randoms), list(perm)
        self.asked: list[tuple[float, float]] = []

    def uniform(self, low=0.0, high=1.0, size=None):
        assert size is None
        value = self.uniforms.pop(0)
        assert low <= value <= high, (value, low, high)
        self.asked.append((low, high))
        return value

    def random(self, size=None):
        assert size is None
        return self.randoms.pop(0)

    def permutation(self, n):
        assert n == len(self.perm)
        return np.array(self.perm)

    def integers(self, *args, **kwargs):  # pragma: no cover - no photometric transform uses it
        raise AssertionError("integers() not expected")

    def done(self) -> bool:
        return not self.uniforms and not self.randoms


def sample(image, colorspace="RGB", **kwargs) -> Sample:
    image = np.asarray(image)
    return Sample(image, label=0.0, record=0, extra={"colorspace": colorspace}, **kwargs)


def const(value, h=4, w=5) -> np.ndarray:
    """An (h, w, C) uint8 image of one colour (or (h, w) for a number)."""
    value = np.asarray(value, np.uint8)
    return np.broadcast_to(value, (h, w) + value.shape).copy()


def run(transform, image, rng=None, colorspace="RGB"):
    return transform(sample(image, colorspace), rng if rng is not None else StubRng()).image


def readonly(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.setflags(write=False)
    return array


RED, GREEN, BLUE, YELLOW = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)


# ---------------------------------------------------------------- Blur

def test_blur_impulse_matches_hand_gaussian():
    image = np.zeros((11, 11), np.float32)
    image[5, 5] = 1.0
    out = run(Blur(sigma=1.0), image)
    # float images: OpenCV's kernel radius is 4 sigma; kernel exp(-x^2 / 2 sigma^2), normalised
    x = np.arange(-4, 5, dtype=np.float64)
    k = np.exp(-x ** 2 / 2)
    k /= k.sum()
    expected = np.zeros((11, 11))
    expected[1:10, 1:10] = np.outer(k, k)
    assert out.dtype == np.float32 and out.shape == (11, 11)
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_blur_draws_sigma_and_centre_version():
    image = np.random.default_rng(0).integers(0, 256, (16, 12, 3), dtype=np.uint8)
    rng = StubRng(uniforms=[0.7])
    out = run(Blur(sigma=(0.0, 1.5)), image, rng)
    assert rng.asked == [(0.0, 1.5)] and rng.done()
    np.testing.assert_array_equal(out, cv2.GaussianBlur(image, (0, 0), 0.7))
    centre = run(Blur(sigma=(0.5, 1.5), random=False), image)
    np.testing.assert_array_equal(centre, cv2.GaussianBlur(image, (0, 0), 1.0))
    # a constant image stays constant; (H, W, 1) keeps its shape
    np.testing.assert_array_equal(run(Blur(sigma=2.0), const([9])), const([9]))


def test_blur_sigma_zero_unchanged():
    image = readonly(np.random.default_rng(1).integers(0, 256, (6, 7), dtype=np.uint8))
    s = sample(image)
    Blur(sigma=(0.0, 0.0))(s, StubRng())
    assert s.image is image
    s = sample(image)
    Blur(sigma=(0.0, 0.0), random=False)(s, StubRng())
    assert s.image is image
    with pytest.raises(PicPacValueError):
        Blur(sigma=(1.0, 0.5))
    with pytest.raises(PicPacValueError):
        Blur(sigma=-1.0)


# ---------------------------------------------------------------- ColorJitter

def test_brightness_scales_rounds_and_saturates():
    rng = StubRng(uniforms=[1.3])
    out = run(ColorJitter(brightness=0.5), const((100, 50, 200)), rng)
    assert rng.asked == [(0.5, 1.5)]
    np.testing.assert_array_equal(out, const((130, 65, 255)))  # 260 saturates
    assert out.dtype == np.uint8
    # ties round to even like OpenCV: 3 * 1.5 = 4.5 -> 4, 5 * 1.5 = 7.5 -> 8
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
    out = run(ColorJitter(brightness=0.5), ramp, StubRng(uniforms=[1.5]))
    assert out[0, 3] == 4 and out[0, 5] == 8
    np.testing.assert_array_equal(out, cv2.convertScaleAbs(ramp, alpha=1.5))


def test_brightness_range_floor_at_zero():
    rng = StubRng(uniforms=[0.0])
    out = run(ColorJitter(brightness=2.0), const((100, 50, 200)), rng)
    assert rng.asked == [(0.0, 3.0)]
    np.testing.assert_array_equal(out, const((0, 0, 0)))


def test_contrast_blends_with_gray_mean():
    image = np.zeros((2, 4), np.uint8)
    image[:, :2], image[:, 2:] = 100, 200  # mean 150
    out = run(ColorJitter(contrast=0.5), image, StubRng(uniforms=[0.5]))
    np.testing.assert_array_equal(out, [[125, 125, 175, 175]] * 2)
    # colour: gray of RGB (200, 100, 50) = .299*200 + .587*100 + .114*50 = 124.2 -> 124
    out = run(ColorJitter(contrast=0.5), const((200, 100, 50)), StubRng(uniforms=[0.5]))
    np.testing.assert_array_equal(out, const((162, 112, 87)))
    # the BGR twin (same colour) gives the mirrored channels
    out = run(ColorJitter(contrast=0.5), const((50, 100, 200)), StubRng(uniforms=[0.5]), "BGR")
    np.testing.assert_array_equal(out, const((87, 112, 162)))


def test_saturation():
    gray_rgb = const((77, 77, 77))
    for f in (0.0, 0.3, 1.7):
        np.testing.assert_array_equal(run(ColorJitter(saturation=1.0), gray_rgb, StubRng(uniforms=[f])), gray_rgb)
    # factor 0: every channel becomes the gray value (124, see above); factor 2: 2 v - 124, saturated
    np.testing.assert_array_equal(run(ColorJitter(saturation=1.0), const((200, 100, 50)), StubRng(uniforms=[0.0])),
                                  const((124, 124, 124)))
    np.testing.assert_array_equal(run(ColorJitter(saturation=1.0), const((200, 100, 50)), StubRng(uniforms=[2.0])),
                                  const((255, 76, 0)))


@pytest.mark.parametrize("hue, expected", [(1 / 3, GREEN), (1 / 6, YELLOW), (-1 / 3, BLUE), (0.5, (0, 255, 255))])
def test_hue_rotates_pure_red(hue, expected):
    # OpenCV HSV: red is H = 0; a shift of round(hue * 180) gives H 60 (120 degrees, green), 30 (yellow),
    # 120 (blue), 90 (cyan)
    rng = StubRng(uniforms=[hue])
    out = run(ColorJitter(hue=0.5), const(RED), rng)
    assert rng.asked == [(-0.5, 0.5)]
    np.testing.assert_array_equal(out, const(expected))
    # BGR twin: the same colours with mirrored channels
    out = run(ColorJitter(hue=0.5), const(RED[::-1]), StubRng(uniforms=[hue]), "BGR")
    np.testing.assert_array_equal(out, const(expected[::-1]))


def test_jitter_order_follows_permutation():
    image = np.zeros((2, 4), np.uint8)
    image[:, :2], image[:, 2:] = 100, 200
    jitter = ColorJitter(brightness=1.0, contrast=0.5)
    # brightness 2 then contrast 0.5: (200, 255) with mean 227.5 -> 213.75, 241.25
    out = run(jitter, image, StubRng(uniforms=[2.0, 0.5], perm=[0, 1, 2, 3]))
    np.testing.assert_array_equal(out, [[214, 214, 241, 241]] * 2)
    # contrast first: (125, 175), then brightness 2: (250, 255); the draws stay in the order b, c
    out = run(jitter, image, StubRng(uniforms=[2.0, 0.5], perm=[3, 1, 2, 0]))
    np.testing.assert_array_equal(out, [[250, 250, 255, 255]] * 2)


def test_jitter_gray_image_skips_saturation_and_hue():
    image = np.arange(20, dtype=np.uint8).reshape(4, 5) * 10
    rng = StubRng(uniforms=[1.0, 1.0, 1.2, 0.3])
    out = run(ColorJitter(brightness=0.1, contrast=0.1, saturation=0.5, hue=0.4), image, rng)
    assert rng.done()  # the draws are made all the same
    np.testing.assert_array_equal(out, image)
    single = image[:, :, None]
    out = run(ColorJitter(brightness=0.5), single, StubRng(uniforms=[0.5]))
    assert out.shape == (4, 5, 1)
    np.testing.assert_array_equal(out[:, :, 0], np.rint(image * 0.5).astype(np.uint8))


def test_jitter_real_rng_draws_like_torchvision():
    image = np.random.default_rng(5).integers(0, 256, (8, 9, 3), dtype=np.uint8)
    jitter = ColorJitter(brightness=0.4, contrast=0.4)
    out = run(jitter, image, np.random.default_rng(3))
    # the same draws by hand: the permutation of 4, then brightness and contrast factors
    rng = np.random.default_rng(3)
    perm = rng.permutation(4)
    b, c = rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4)
    x = image
    for step in perm:
        if step == 0:
            x = np.clip(np.rint(x.astype(np.float32) * np.float32(b)), 0, 255).astype(np.uint8)
        elif step == 1:
            mean = cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).mean()
            x = x.astype(np.float32) * np.float32(c) + np.float32(1 - c) * np.float32(mean)
            x = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(run(jitter, image, np.random.default_rng(3)), out)


def test_jitter_validation():
    for kwargs in ({"hue": 0.6}, {"hue": -0.1}, {"brightness": -1}, {"contrast": (1.5, 0.5)},
                   {"saturation": (-0.5, 1.0)}, {"hue": (-0.6, 0.2)}):
        with pytest.raises(PicPacValueError):
            ColorJitter(**kwargs)
    with pytest.raises(PicPacTypeError):
        run(ColorJitter(brightness=0.5), np.zeros((3, 3, 3), np.float32), StubRng(uniforms=[1.2]))


# ---------------------------------------------------------------- AddColor

def test_add_color_bgr_fixed_draw():
    rng = StubRng(uniforms=[5.0, -7.6, 12.4])
    out = run(AddColor(values=(10, 20, 30), colorspace="BGR"), const((100, 100, 100)), rng)
    assert rng.asked == [(-10, 10), (-20, 20), (-30, 30)]
    # BGR deltas (+5, -7.6, +12.4) on an RGB image: R 112.4 -> 112, G 92.4 -> 92, B 105
    np.testing.assert_array_equal(out, const((112, 92, 105)))
    # saturating at both ends
    out = run(AddColor(values=(10, 20, 30)), const((250, 3, 128)), StubRng(uniforms=[5.0, -7.6, 12.4]))
    np.testing.assert_array_equal(out, const((255, 0, 133)))


def test_add_color_order_mirrors():
    image = np.random.default_rng(2).integers(0, 256, (5, 6, 3), dtype=np.uint8)
    twin = image[:, :, ::-1].copy()
    for space in ("BGR", "RGB", "HSV", "Lab"):
        add = AddColor(values=(9, 19, 29), colorspace=space)
        out = run(add, image, np.random.default_rng(7), "RGB")
        out_twin = run(add, twin, np.random.default_rng(7), "BGR")
        np.testing.assert_array_equal(out_twin, out[:, :, ::-1])
    # RGB-space values on an RGB image go to the channels as given
    out = run(AddColor(values=(10, 20, 30), colorspace="RGB"), const((100, 100, 100)),
              StubRng(uniforms=[5.0, -7.6, 12.4]))
    np.testing.assert_array_equal(out, const((105, 92, 112)))


def test_add_color_real_rng_recomputed():
    image = np.random.default_rng(4).integers(0, 256, (5, 6, 3), dtype=np.uint8)
    out = run(AddColor(values=(10, 0, 30)), image, np.random.default_rng(11))
    rng = np.random.default_rng(11)
    b, r = rng.uniform(-10, 10), rng.uniform(-30, 30)  # a zero range draws nothing
    expected = image.astype(np.float64) + [np.float32(r), 0, np.float32(b)]
    np.testing.assert_array_equal(out, np.clip(np.rint(expected), 0, 255).astype(np.uint8))


def test_add_color_hsv_hue_wraps():
    # red H 0: +60 -> green; -60 wraps to 120 -> blue
    out = run(AddColor(values=(90, 0, 0), colorspace="HSV"), const(RED), StubRng(uniforms=[60.0]))
    np.testing.assert_array_equal(out, const(GREEN))
    out = run(AddColor(values=(90, 0, 0), colorspace="HSV"), const(RED), StubRng(uniforms=[-60.0]))
    np.testing.assert_array_equal(out, const(BLUE))
    # value -55: V 255 -> 200
    out = run(AddColor(values=(0, 0, 60), colorspace="HSV"), const(RED), StubRng(uniforms=[-55.0]))
    np.testing.assert_array_equal(out, const((200, 0, 0)))


@pytest.mark.parametrize("space", ["HSV", "Lab"])
@pytest.mark.parametrize("order", ["RGB", "BGR"])
def test_add_color_zero_round_trip_within_one_level(space, order):
    ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
    palette = np.uint8([[[0, 0, 0], [255, 255, 255], [120, 130, 140], [200, 150, 100], [90, 60, 30],
                         [60, 120, 180]]])
    for image in (ramp, palette):
        # a draw of 0.1 rounds away: only the conversion there and back is left
        out = run(AddColor(values=(1, 1, 1), colorspace=space), image, StubRng(uniforms=[0.1, 0.1, 0.1]), order)
        assert np.abs(out.astype(int) - image).max() <= 1


def test_add_color_gray_image_as_colour_twin():
    # B + 10 on gray 100: .114 * 110 + .587 * 100 + .299 * 100 = 101.14 -> 101
    out = run(AddColor(values=(10, 0, 0)), const(100), StubRng(uniforms=[10.0]))
    assert out.shape == (4, 5)
    np.testing.assert_array_equal(out, const(101))
    out = run(AddColor(values=(10, 0, 0)), const([100]), StubRng(uniforms=[10.0]), "BGR")
    assert out.shape == (4, 5, 1)
    np.testing.assert_array_equal(out, const([101]))


def test_add_color_validation():
    with pytest.raises(PicPacValueError):
        AddColor(values=(1, 2))
    with pytest.raises(PicPacValueError):
        AddColor(values=(1, -2, 3))
    with pytest.raises(PicPacValueError):
        AddColor(colorspace="YUV")
    assert AddColor(values=5).values == (5.0, 5.0, 5.0)


# ---------------------------------------------------------------- Invert

def test_invert():
    image = np.uint8([[0, 1, 128], [200, 254, 255]])
    np.testing.assert_array_equal(run(Invert(), image), [[255, 254, 127], [55, 1, 0]])
    assert (run(Invert(), const((10, 20, 30))) == const((245, 235, 225))).all()
    # with probability p: a draw below p inverts
    np.testing.assert_array_equal(run(Invert(p=0.5), image, StubRng(randoms=[0.3])), 255 - image)
    np.testing.assert_array_equal(run(Invert(p=0.5), image, StubRng(randoms=[0.7])), image)
    np.testing.assert_array_equal(run(Invert(p=0.0), image, StubRng()), image)
    # centre version: p >= 0.5 inverts
    np.testing.assert_array_equal(run(Invert(random=False, p=0.5), image), 255 - image)
    np.testing.assert_array_equal(run(Invert(random=False, p=0.4), image), image)
    with pytest.raises(PicPacValueError):
        Invert(p=1.5)
    with pytest.raises(PicPacTypeError):
        run(Invert(), image.astype(np.float32))


# ---------------------------------------------------------------- Normalize

def test_normalize_exact():
    out = run(Normalize(mean=(1, 2, 3), std=(2, 4, 0.5)), const((10, 20, 30)))
    assert out.dtype == np.float32 and out.shape == (4, 5, 3)
    np.testing.assert_array_equal(out, np.broadcast_to(np.float32([4.5, 4.5, 54.0]), (4, 5, 3)))
    out = run(Normalize(mean=128, std=64), np.uint8([[0, 128, 255]]))
    np.testing.assert_array_equal(out, np.float32([[-2.0, 0.0, 127 / 64]]))
    # the defaults only convert, gray images included
    np.testing.assert_array_equal(run(Normalize(), np.uint8([[7, 9]])), np.float32([[7, 9]]))
    with pytest.raises(PicPacValueError):
        run(Normalize(mean=(1, 2, 3)), np.uint8([[7, 9]]))
    with pytest.raises(PicPacValueError):
        Normalize(std=(1, 0, 1))


# ---------------------------------------------------------------- Grayscale / Color

def test_grayscale_follows_colorspace():
    image = np.random.default_rng(3).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    twin = image[:, :, ::-1].copy()
    gray = run(Grayscale(), image, colorspace="RGB")
    np.testing.assert_array_equal(gray, cv2.cvtColor(image, cv2.COLOR_RGB2GRAY))
    np.testing.assert_array_equal(run(Grayscale(), twin, colorspace="BGR"), gray)
    assert gray.shape == (6, 7)
    three = run(Grayscale(channels=3), twin, colorspace="BGR")
    assert three.shape == (6, 7, 3)
    for c in range(3):
        np.testing.assert_array_equal(three[:, :, c], gray)
    # by hand: RGB (200, 100, 50) -> 124
    np.testing.assert_array_equal(run(Grayscale(), const((200, 100, 50))), const(124))
    assert run(Grayscale(), const([9])).shape == (4, 5)
    with pytest.raises(PicPacValueError):
        Grayscale(channels=2)


def test_color():
    gray = np.uint8([[1, 2], [3, 4]])
    out = run(Color(), gray)
    assert out.shape == (2, 2, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], gray)
    np.testing.assert_array_equal(run(Color(), gray[:, :, None]), out)
    colour = const((1, 2, 3))
    s = sample(colour)
    assert Color()(s, StubRng()).image is colour


def test_unknown_colorspace():
    with pytest.raises(PicPacValueError):
        run(Grayscale(), const((1, 2, 3)), colorspace="YUV")


# ---------------------------------------------------------------- all of them

RANDOM = [Blur(), ColorJitter(0.4, 0.4, 0.4, 0.1), AddColor((10, 20, 30)), AddColor((10, 20, 30), "HSV"),
          AddColor((10, 20, 30), "Lab"), Invert()]
ALL = RANDOM + [Normalize((1, 2, 3), (4, 5, 6)), Grayscale(), Grayscale(3), Color()]


@pytest.mark.parametrize("transform", ALL, ids=lambda t: type(t).__name__)
@pytest.mark.parametrize("colorspace", ["RGB", "BGR"])
def test_input_untouched_mask_and_shapes_kept(transform, colorspace):
    rng = np.random.default_rng(9)
    image = readonly(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8))
    backup = image.copy()
    mask = readonly(rng.integers(0, 3, (12, 10), dtype=np.uint8))
    shapes = Shapes.empty()
    s = Sample(image, label=0.0, record=0, mask=mask, shapes=shapes, extra={"colorspace": colorspace})
    out = transform(s, np.random.default_rng(1))
    assert out.mask is mask and out.shapes is shapes
    np.testing.assert_array_equal(image, backup)
    if not isinstance(transform, Color):  # Color leaves a colour image as it is
        assert not np.shares_memory(out.image, image)
    # gray images too
    gray = readonly(backup[:, :, 0])
    if isinstance(transform, Normalize):
        transform = Normalize(1, 4)  # one value per channel
    s = Sample(gray, label=0.0, record=0, mask=mask, shapes=shapes, extra={"colorspace": colorspace})
    out = transform(s, np.random.default_rng(1))
    np.testing.assert_array_equal(gray, backup[:, :, 0])
    assert out.mask is mask and out.shapes is shapes


@pytest.mark.parametrize("transform", [ColorJitter(0.4, 0.4, 0.4, 0.1), AddColor((10, 20, 30)),
                                       AddColor((10, 20, 30), "HSV"), AddColor((10, 20, 30), "Lab")],
                         ids=lambda t: type(t).__name__)
def test_not_random_leaves_image_unchanged(transform):
    # (Blur's and Invert's centre versions are checked above: the middle sigma, p >= 0.5)
    image = readonly(np.random.default_rng(6).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    s = sample(image)
    replace(transform, random=False)(s, StubRng())  # no draws allowed
    assert s.image is image
