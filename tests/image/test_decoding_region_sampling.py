"""Region decoding at every legal JPEG sampling: for each combination of sampling factors, baseline and
progressive, at every scale, a region equals those pixels of the whole decode, and the columns around
it are cropped exactly where the rule in picpac/image/_jpeg.c (crop_exact) allows.

libjpeg-turbo 2.1's jpeg_crop_scanline gives wrong pixels at 1/2 and 1/4 scale for a component that
the IDCT scales up and that still needs upsampling (48 of the legal combinations in colour at 1/2,
42 at 1/4): the extension decodes those at full width, still skipping the rows above the region.
The same rule refuses the crop for the same kind of sampling at 1/8, where the crop would be exact
(libjpeg does not use fancy upsampling there); picpac decodes at 1/8 only when asked to."""
from __future__ import annotations

import functools
import itertools

import cv2
import numpy as np
import pytest

from picpac.image import decoding

pytestmark = pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built")

Sampling = tuple[tuple[int, int], ...]
PAIRS = [(h, v) for h in range(1, 5) for v in range(1, 5)]
LEGAL: list[Sampling] = [c for c in itertools.product(PAIRS, repeat=3) if sum(h * v for h, v in c) <= 10]
"""Every legal sampling of a 3-component JPEG: factors 1 to 4, at most 10 blocks in an MCU."""
GREY: list[Sampling] = [(p,) for p in PAIRS]
"""A single-component JPEG's factors (its scan is not interleaved: each block is its own MCU)."""
WIDTH, HEIGHT = 403, 45  # 51 x 6 at 1/8: still wide enough to crop
REDUCTIONS = (1, 2, 4, 8)
MODES = ((1, 0), (3, 1))  # (channels, the extension's mode): grey and BGR


def decodable(sampling: Sampling, grey: bool) -> bool:
    """Whether libjpeg decodes it: each decoded component's factors divide the largest ones (its
    upsampling takes integral ratios only); grey output decodes only the first component."""
    most_h, most_v = max(h for h, _ in sampling), max(v for _, v in sampling)
    return all(most_h % h == 0 and most_v % v == 0 for h, v in (sampling[:1] if grey else sampling))


def crops(sampling: Sampling, reduction: int, grey: bool) -> bool:
    """The rule, restated from libjpeg's choice of IDCT sizes (jdmaster.c): columns are cropped unless
    a decoded component's IDCT is scaled up beyond the smallest size and it still needs upsampling."""
    smallest = 8 // reduction
    most_h, most_v = max(h for h, _ in sampling), max(v for _, v in sampling)
    for h, v in sampling[:1] if grey else sampling:
        size = smallest
        while size < 8 and (most_h * smallest) % (h * size * 2) == 0 and (most_v * smallest) % (v * size * 2) == 0:
            size *= 2
        if size > smallest and (h * size, v * size) != (most_h * smallest, most_v * smallest):
            return False
    return True


@functools.cache
def image() -> np.ndarray:
    """Smooth random colour plus noise, as Y, Cr, Cb: every block and chroma sample differs."""
    rng = np.random.default_rng(11)
    coarse = rng.integers(0, 256, (HEIGHT // 8 + 2, WIDTH // 8 + 2, 3), dtype=np.uint8)
    smooth = cv2.resize(coarse, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC)
    rgb = np.clip(smooth + rng.integers(-24, 25, smooth.shape), 0, 255).astype(np.uint8)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2YCrCb)


def planes(sampling: Sampling) -> bytes:
    """The image's components downsampled to ``sampling`` and padded to whole MCUs, as _jpeg.encode takes them."""
    most_h, most_v = max(h for h, _ in sampling), max(v for _, v in sampling)
    cols, rows = -(-WIDTH // (8 * most_h)), -(-HEIGHT // (8 * most_v))
    out = []
    for channel, (h, v) in zip((0, 2, 1), sampling):  # Y, Cb, Cr
        size = (-(-WIDTH * h // most_h), -(-HEIGHT * v // most_v))
        plane = cv2.resize(image()[:, :, channel], size, interpolation=cv2.INTER_AREA)
        out.append(np.pad(plane, ((0, rows * v * 8 - size[1]), (0, cols * h * 8 - size[0])), mode="edge").tobytes())
    return b"".join(out)


def encode(sampling: Sampling, progressive: bool) -> bytes:
    data = decoding._jpeg.encode(planes(sampling), WIDTH, HEIGHT, sampling, progressive, 90)
    assert frame_sampling(data) == (0xC2 if progressive else 0xC0, sampling)
    return data


def frame_sampling(data: bytes) -> tuple[int, Sampling]:
    """(SOF marker, sampling factors) of a JPEG's frame header."""
    i = 2
    while data[i + 1] not in (0xC0, 0xC1, 0xC2):
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    count = data[i + 9]
    return data[i + 1], tuple((data[i + 11 + 3 * k] >> 4, data[i + 11 + 3 * k] & 15) for k in range(count))


def windows(width: int, height: int) -> list[decoding.Region]:
    """Odd offsets, a strip, and windows touching the left, right and bottom edges."""
    return [(width // 3 | 1, height // 3, 7, max(1, height // 3)), (width - 9, height - 2, 9, 2),
            (width // 2 | 1, 0, 3, height), (0, height // 2, 11, height - height // 2)]


def test_the_legal_samplings():
    assert len(LEGAL) == 515 and len(set(LEGAL)) == 515
    assert (sum(decodable(s, False) for s in LEGAL), sum(decodable(s, True) for s in LEGAL)) == (311, 437)
    with pytest.raises(ValueError, match="libjpeg"):  # 12 blocks in an MCU
        decoding._jpeg.encode(planes(((2, 4), (2, 1), (2, 1))), WIDTH, HEIGHT, ((2, 4), (2, 1), (2, 1)))


def mismatches(data: bytes, sampling: Sampling) -> tuple[list, list]:
    """(regions that differ from the whole decode or were not decoded as regions,
    (reduction, grey) where the extension's cropping differs from the rule)."""
    bad, rule = [], []
    for reduction in REDUCTIONS:
        for channels, mode in MODES:
            whole = decoding.decode_channels(data, channels, False, reduction)
            width, height = -(-WIDTH // reduction), -(-HEIGHT // reduction)
            if not decodable(sampling, channels == 1):  # neither decoder takes it
                got = [decoding.decode_channels(data, channels, False, reduction, region) for region in
                       windows(width, height)] + [decoding._jpeg.decode(data, reduction, 3, 2, 20, 3, mode)]
                bad += [(reduction, channels, "decoded") for g in [whole, *got] if g is not None]
                continue
            assert whole.shape[:2] == (height, width)
            for x, y, w, h in windows(width, height):
                got = decoding.decode_channels(data, channels, False, reduction, (x, y, w, h))
                if got.shape[:2] != (h, w) or not np.array_equal(got, whole[y:y + h, x:x + w]):
                    bad.append((reduction, channels, (x, y, w, h), got.shape))
            x, y, w, h = windows(width, height)[0]
            _, first, row_width = decoding._jpeg.decode(data, reduction, x - 1, y, w + 2, h, mode)
            if (row_width < width) != crops(sampling, reduction, channels == 1):
                rule.append((reduction, channels == 1, first, row_width))
    return bad, rule


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_every_legal_sampling_gives_a_whole_decodes_pixels_at_every_scale(progressive):
    """Every legal sampling, 3 components and 1, at 1, 1/2, 1/4 and 1/8, grey and colour, in four
    windows: a region is the whole decode's pixels, and the columns are cropped exactly where the rule
    says, so nothing else falls back. Samplings libjpeg cannot upsample give None both ways."""
    bad, rule = {}, {}
    for sampling in LEGAL + GREY:
        found, wrong = mismatches(encode(sampling, progressive), sampling)
        if found:
            bad[sampling] = found[:3]
        if wrong:
            rule[sampling] = wrong
    assert not bad, (len(bad), list(bad.items())[:8])
    assert not rule, (len(rule), list(rule.items())[:8])


def test_the_rule_refuses_cropping_only_for_unusual_samplings():
    """The counts behind the module's docstring, and the samplings photos use keep the crop at every scale."""
    refused = {(r, grey): sum(not crops(s, r, grey) for s in LEGAL + GREY if decodable(s, grey))
               for r in REDUCTIONS for grey in (False, True)}
    assert refused == {(1, False): 0, (1, True): 0, (2, False): 48, (2, True): 18, (4, False): 42, (4, True): 16,
                       (8, False): 42, (8, True): 16}, refused
    ordinary = [((1, 1),) * 3, ((2, 1), (1, 1), (1, 1)), ((2, 2), (1, 1), (1, 1)), ((1, 2), (1, 1), (1, 1)),
                ((4, 1), (1, 1), (1, 1))]  # 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1
    assert all(crops(s, r, grey) for s in ordinary + GREY for r in REDUCTIONS for grey in (False, True))
    assert not crops(((4, 2), (1, 1), (1, 1)), 2, False)  # the example: luma 4x2, chroma 1x1
