"""picpac's torchvision-style geometry against torchvision itself (its PIL transforms) on the 250 ImageNet JPEGs,
decoded once by PIL for both: CenterCrop's windows are torchvision's pixel for pixel, and Resize(shorter=256) +
CenterCrop(224) sizes as torchvision does and stays within the stated difference.

torchvision is not in the test extra: PyPI's build does not import beside the CPU build of torch the suite runs
with, so this module skips where it is missing (`pip install torch==2.14.1 torchvision==0.29.1` runs it)."""
import numpy as np
import pytest

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed (PyPI's build does not "
                                                        "import beside the CPU build of torch the suite runs with)")
Image = pytest.importorskip("PIL.Image")

from picpac.transforms import CenterCrop, Resize, Sample  # noqa: E402
from helpers import SHARED_DATA  # noqa: E402

MEAN_TOLERANCE = 2.5
"""The largest mean over the images of the mean absolute difference per image (levels of 255) of
Resize(shorter=256) + CenterCrop(224) against torchvision's: measured 1.94 (the worst image 7.45), the resamplers
differing where the image shrinks; a window one pixel off measures 9.39 (benchmarks/torchvision_geometry.py)."""
ENLARGE_TOLERANCE = 1.0
"""The same per image where it enlarges (both bilinear): measured 0.18 on average."""


@pytest.fixture(scope="module")
def photos() -> list[np.ndarray]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    return [np.asarray(Image.open(f).convert("RGB")) for f in sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))]


def test_center_crop_windows_are_torchvisions(photos):
    crop = torchvision.transforms.CenterCrop(224)
    for pixels in photos:
        expected = np.asarray(crop(Image.fromarray(pixels)))
        assert np.array_equal(CenterCrop(224, 224)(Sample(pixels, 0, 0), None).image, expected)


def test_resize_shorter_and_center_crop_are_close_to_torchvisions(photos):
    steps = torchvision.transforms.Compose([torchvision.transforms.Resize(256), torchvision.transforms.CenterCrop(224)])
    resize = torchvision.transforms.Resize(256)
    differences, enlarged = [], []
    for pixels in photos:
        assert Resize(shorter=256)(Sample(pixels, 0, 0), None).size == resize(Image.fromarray(pixels)).size
        expected = np.asarray(steps(Image.fromarray(pixels))).astype(np.int16)
        sample = CenterCrop(224, 224)(Resize(shorter=256)(Sample(pixels, 0, 0), None), None)
        differences.append(np.abs(sample.image.astype(np.int16) - expected).mean())
        if min(pixels.shape[:2]) <= 256:
            enlarged.append(differences[-1])
    assert np.mean(differences) <= MEAN_TOLERANCE, (np.mean(differences), max(differences))
    assert enlarged and max(enlarged) <= ENLARGE_TOLERANCE, max(enlarged)
