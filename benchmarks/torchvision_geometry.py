"""picpac's torchvision-style geometry against torchvision's own PIL transforms (issue 29 item 4), on the 250
ImageNet JPEGs (../shared/data/imagenet-250, or PICPAC_BENCH_DATA), each decoded once by PIL for both:

* CenterCrop(224): how many windows equal torchvision's pixel for pixel;
* Resize(shorter=256) + CenterCrop(224): how many sizes equal torchvision's Resize(256)'s, and the mean absolute
  difference per image in levels of 255 (mean, where the image is enlarged, worst), with a window one pixel off
  as the scale of a geometry error.

Needs torchvision (`pip install torch==2.14.1 torchvision==0.29.1`; tests/image/test_transforms_torchvision.py
asserts the same).

    python benchmarks/torchvision_geometry.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import DATA  # noqa: E402

from picpac.transforms import CenterCrop, Resize, Sample  # noqa: E402


def main() -> int:
    try:
        import torchvision.transforms as T
        from PIL import Image
    except ImportError as exc:
        print(f"benchmarks/torchvision_geometry.py needs torchvision and Pillow ({exc})", file=sys.stderr)
        return 2
    photos = [np.asarray(Image.open(f).convert("RGB")) for f in sorted(DATA.glob("*.JPEG"))]
    windows = sizes = 0
    differences, enlarged, shifted = [], [], []
    steps = T.Compose([T.Resize(256), T.CenterCrop(224)])
    for pixels in photos:
        image = Image.fromarray(pixels)
        windows += np.array_equal(CenterCrop(224, 224)(Sample(pixels, 0, 0), None).image,
                                  np.asarray(T.CenterCrop(224)(image)))
        sizes += Resize(shorter=256)(Sample(pixels, 0, 0), None).size == T.Resize(256)(image).size
        expected = np.asarray(steps(image)).astype(np.int16)
        # as a stream composes them: one map, resampled once
        ours = CenterCrop(224, 224)(Resize(shorter=256)(Sample(pixels, 0, 0), None), None).image.astype(np.int16)
        differences.append(np.abs(ours - expected).mean())
        shifted.append(np.abs(ours[:, 1:] - expected[:, :-1]).mean())
        if min(pixels.shape[:2]) <= 256:
            enlarged.append(differences[-1])
    print(f"{len(photos)} JPEGs of {DATA}")
    print(f"CenterCrop(224): {windows} of {len(photos)} windows equal torchvision's")
    print(f"Resize(shorter=256): {sizes} of {len(photos)} sizes equal torchvision's Resize(256)")
    print(f"Resize(shorter=256) + CenterCrop(224), mean absolute difference per image: mean {np.mean(differences):.2f}, "
          f"enlarged ({len(enlarged)}) {np.mean(enlarged):.2f}, worst {max(differences):.2f}; "
          f"a window one pixel off: mean {np.mean(shifted):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
