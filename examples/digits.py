"""The digits database that examples/train_torch.py, train_tf.py and train_jax.py train on.

scikit-learn's bundled digits (``sklearn.datasets.load_digits``: 1797 grey 8x8 images, values
0..16, labels 0..9; no download) upscaled to 32x32 uint8 and written with ``picpac.write_arrays``
as one picpac file. The held-out set is picpac's fold 0 of 5 (``split=5, split_fold=0``):
training streams every other fold, evaluation ``split_negate=True``, only that fold.

    python examples/digits.py digits.picpac      # build it (the training scripts do it themselves)
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import picpac

SIZE = 32
CLASSES = 10
DEFAULT_DB = os.path.join(tempfile.gettempdir(), "picpac-digits.picpac")

STREAM = dict(batch=64, value_range="0-1", mean=0.5, std=0.5)
"""The output every example trains on: 64 images a batch, scaled to [-1, 1]."""


def arguments(description: str | None) -> argparse.ArgumentParser:
    """The options every training example takes (--db, --epochs); each adds its own."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=DEFAULT_DB, help="the digits database (built if missing)")
    parser.add_argument("--epochs", type=int, default=12)
    return parser

# the split: fold 0 of 5 is held out
SPLIT = dict(split=5, split_fold=0)
# training: the other folds, augmented with a small rotation and scale (PicPac's pert_* keys)
TRAIN = dict(SPLIT, perturb=True, pert_angle=12, pert_min_scale=0.9, pert_max_scale=1.1)
# evaluation: the held-out fold, no augmentation
HELD_OUT = dict(SPLIT, split_negate=True, perturb=False)


def build(path: str | os.PathLike = DEFAULT_DB, overwrite: bool = False) -> str:
    """Write the digits database at ``path`` (kept if it is there, unless ``overwrite``); return the path."""
    import cv2
    from sklearn.datasets import load_digits

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        return path
    digits = load_digits()
    small = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.float32)
    images = np.stack([cv2.resize(image, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR) for image in small])
    images = np.clip(np.rint(images), 0, 255).astype(np.uint8)[..., None]   # (N, 32, 32, 1)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".digits-", suffix=".picpac", dir=folder)
    os.close(fd)
    try:  # written beside the target, then renamed: a reader never sees half a file
        picpac.write_arrays(partial, images, digits.target, overwrite=True,
                            metadata={"source": "sklearn.datasets.load_digits", "classes": [str(c) for c in range(CLASSES)]})
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", nargs="?", default=DEFAULT_DB, help=f"the database to write (default {DEFAULT_DB})")
    target = build(parser.parse_args().db, overwrite=True)
    with picpac.Reader(target) as reader:
        print(f"{target}: {len(reader)} records")
