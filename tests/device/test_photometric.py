"""The colour steps on the device give the CPU path's bytes for the same pixels and the same draws: exactly on the
CPU (the same float32 operations in the same order); within one level on CUDA, whose kernels may contract a multiply
and an add into one rounding (FMA), so that a value at .5 can round the other way."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from picpac.device import photometric  # noqa: E402
from picpac.image.color import AddColor, ColorJitter, Invert, SameColor  # noqa: E402
from picpac.image.transforms import Flip, Sample  # noqa: E402

STEPS = [ColorJitter(brightness=0.4), ColorJitter(contrast=0.5), ColorJitter(saturation=0.6),
         ColorJitter(brightness=0.3, contrast=(0.5, 1.4), saturation=0.7), AddColor((20, 0, 40), colorspace="RGB"),
         AddColor((9, 30, 0), colorspace="BGR"), Invert(p=0.5), SameColor(25)]


def agree(got: np.ndarray, expected: np.ndarray, device: str, what) -> None:
    """The device's values are the CPU path's bytes (on CUDA within one level, at most 1 value in 1,000 off)."""
    if device == "cpu":
        assert np.array_equal(got, expected.astype(np.float32)), what
        return
    off = np.abs(got - expected.astype(np.float32))
    assert off.max() <= 1 and (off > 0).mean() <= 1e-3, (what, off.max(), (off > 0).mean())


@pytest.mark.parametrize("order", ["RGB", "BGR"])
@pytest.mark.parametrize("channels", [3, 1])
def test_each_step_gives_the_cpu_paths_bytes(order, channels, device):
    images = np.random.default_rng(0).integers(0, 256, (12, 20, 30, channels), dtype=np.uint8)
    for step in STEPS:
        expected, colours = [], []
        for i, image in enumerate(images):
            sample = Sample(image[:, :, 0] if channels == 1 else image, 0.0, i, extra={"colorspace": order})
            out = step(sample, np.random.default_rng(i)).image
            expected.append(out.reshape(image.shape))
            colour = photometric.plan(step, np.random.default_rng(i), order)
            colours.append(() if colour is None else (colour,))
        values = torch.from_numpy(images).permute(0, 3, 1, 2).float().to(device)
        got = photometric.apply(values.clone(), colours, order).permute(0, 2, 3, 1).cpu().numpy()
        agree(got, np.stack(expected), device, step)


def test_samples_apply_their_own_steps_in_their_own_order(device):
    images = np.random.default_rng(1).integers(0, 256, (6, 8, 10, 3), dtype=np.uint8)
    chain = [ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4), Invert(p=0.5), AddColor((10, 20, 30))]
    expected, colours = [], []
    for i, image in enumerate(images):
        rng_cpu, rng_device = np.random.default_rng(10 + i), np.random.default_rng(10 + i)
        sample = Sample(image, 0.0, i, extra={"colorspace": "BGR"})
        for step in chain:
            sample = step(sample, rng_cpu)
        expected.append(sample.image)
        colours.append(tuple(c for c in (photometric.plan(s, rng_device, "BGR") for s in chain) if c is not None))
    got = photometric.apply(torch.from_numpy(images).permute(0, 3, 1, 2).float().to(device), colours, "BGR")
    agree(got.permute(0, 2, 3, 1).cpu().numpy(), np.stack(expected), device, chain)


def test_only_trailing_colour_steps_the_device_follows_count():
    assert photometric.steps([Flip(), ColorJitter(brightness=0.2), Invert()]) == 2
    assert photometric.steps([ColorJitter(brightness=0.2), Flip()]) == 0  # a geometric step after: none
    assert photometric.steps([Flip(), ColorJitter(hue=0.1)]) == 0  # hue: the CPU path
    assert photometric.steps([AddColor((1, 2, 3), colorspace="HSV"), Invert()]) == 1
