"""Stream configs (picpac/stream/config.py): values that would reach OpenCV or NumPy out of their range, or
make outputs no machine holds, are refused by StreamConfig.from_dict with the key, the range and the value."""
from __future__ import annotations

import re

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.stream.config import StreamConfig

from helpers import make_db, png

CASES = [  # the fuzzer's reproducers (docs/reliability.md, config-unbounded and config-array-value)
    (dict(resize_width=2**31), PicPacValueError, "config key 'resize_width' must be in [0, 32766], got 2147483648"),
    (dict(crop_width=2**31), PicPacValueError, "config key 'crop_width' must be in [0, 32766]"),
    (dict(min_size=2**31), PicPacValueError, "config key 'min_size' must be in [0, 32766]"),
    (dict(round_div=2**20), PicPacValueError, "config key 'round_div' must be in [0, 32766]"),
    (dict(resize_width=20000, resize_height=20000), PicPacValueError,
     "config keys 'resize_width' x 'resize_height' (20000 x 20000) exceed max_pixels=268,435,456"),
    (dict(anno_thickness=2**31), PicPacValueError, "config key 'anno_thickness' must be in [-1, 32766]"),
    (dict(pert_min_scale=1e300, pert_max_scale=1e300), PicPacValueError,
     "config key 'pert_min_scale' must be in [0, 16], got 1e+300"),
    (dict(pert_color1=float("inf")), PicPacValueError, "config key 'pert_color1' must be a finite number, got inf"),
    (dict(pert_angle=float("nan")), PicPacValueError, "config key 'pert_angle' must be a finite number, got nan"),
    (dict(mean=[0, float("inf"), 0]), PicPacValueError, "config key 'mean' must be a finite number, got inf"),
    (dict(max_boxes=2**40), PicPacValueError, "config key 'max_boxes' must be in [0, 65536]"),
    (dict(onehot=2**31), PicPacValueError, "config key 'onehot' must be in [0, 65536]"),
    (dict(std=[1, 2]), PicPacValueError, "config key 'std' has 2 values for channels=3: give 1 or 3"),
    (dict(mean=[1, 2, 3], channels=1), PicPacValueError, "config key 'mean' has 3 values for channels=1"),
    (dict(split=2**31), PicPacValueError, "config key 'split' must be in [1, 2147483647]"),
    (dict(batch=2**31), PicPacValueError, "config key 'batch' must be in [1, 65536]"),
    (dict(preload=2**31), PicPacValueError, "config key 'preload' must be in [1, 65536]"),
    (dict(workers=2**31), PicPacValueError, "config key 'workers' must be in [1, 1024]"),
    (dict(batch=4096, crop_width=1024, crop_height=1024), PicPacValueError,
     "config key 'batch' (4096) with this output size makes batches of 48.0 GiB (more than 16 GiB)"),
    (dict(batch=2**16, onehot=2**16, max_boxes=1), PicPacValueError, "makes batches of 16.0 GiB"),
    (dict(channels=np.array([1, 3])), PicPacTypeError, "config key 'channels' must be one of 1, 3, -1, got ndarray"),
    (dict(colorspace=np.array(["RGB"])), PicPacTypeError, "config key 'colorspace' must be one of"),
    (dict(mixin=np.array([1, 2])), PicPacTypeError, "config key 'mixin' must be a path, got array([1, 2])"),
]


@pytest.mark.parametrize("config, error, message", CASES, ids=[str(c[0])[:40] for c in CASES])
def test_out_of_range_values_are_refused_by_parse(config, error, message):
    with pytest.raises(error, match=re.escape(message)):
        StreamConfig.from_dict(config)
    with pytest.raises(error, match=re.escape(message)):
        picpac.ImageLoader(config)


def test_values_at_the_bounds_are_kept():
    c = StreamConfig.from_dict(dict(resize_width=32766, resize_height=8192, anno_thickness=32766, pert_min_scale=16,
                   pert_max_scale=16, pert_color1=-255, pert_angle=360, onehot=2**16, max_boxes=2**16,
                   workers=1024, split=2**31 - 1, split_fold=5, mixin="", mean=np.array([1.0, 2.0, 3.0])))
    assert (c["resize_width"], c["anno_thickness"], c["pert_max_scale"], c["onehot"], c["workers"]) == \
        (32766, 32766, 16.0, 65536, 1024)
    assert c["mixin"] is None and c["mean"] == (1.0, 2.0, 3.0) and c["split"] == 2**31 - 1
    c = StreamConfig.from_dict(dict(batch=2**16, preload=2**16, crop_width=128, crop_height=128))  # 12 GiB batches
    assert (c["batch"], c["preload"]) == (65536, 65536)


def test_a_wide_output_at_the_side_bound_streams(tmp_path):
    db = make_db(tmp_path / "db.picpac", 2)
    with picpac.ImageStream(db, batch=1, resize_width=32766, resize_height=2, order="NHWC", dtype="uint8",
                            shuffle=False) as s:
        images, labels, _ = next(s)
    assert images.shape == (1, 2, 32766, 3) and labels.tolist() == [0.0]
    assert (images[0] == (0, 0, 0)).all()  # record 0 is black (B, G, R) = (0, 0, 0), as RGB


def test_more_folds_than_records_keep_each_record_in_its_own_fold(tmp_path):
    """split=2**31-1 on 6 records: each record is its own fold, at once (before: a heap of 2**31 folds)."""
    db = make_db(tmp_path / "db.picpac", 6, groups=[0, 0, 1, 1, 2, 3])
    folds = []
    for fold in range(4):
        with picpac.ImageStream(db, split=2**31 - 1, split_fold=fold, split_negate=True, loop=False,
                                shuffle=False, batch=2) as s:
            folds.append([int(x) for b in s for x in b[1]])
    assert folds == [[0.0, 1.0], [2.0, 3.0], [4.0], [5.0]]  # the groups, then the ungrouped records, in order
    with pytest.raises(PicPacValueError, match=re.escape("the stream has no samples (split=2147483647, "
                                                         "split_fold=4, split_negate=True)")):
        picpac.ImageStream(db, split=2**31 - 1, split_fold=4, split_negate=True, loop=False, shuffle=False)


def test_mean_of_the_wrong_length_for_the_stored_channels_is_an_error_at_construction(tmp_path):
    db = make_db(tmp_path / "db.picpac", 2)
    message = "config key 'mean' has 2 values, but with channels=-1 the images have 3 channel(s) (record 0)"
    with pytest.raises(picpac.PicPacValueError, match=re.escape(message)):
        picpac.ImageStream(db, channels=-1, mean=[1, 2], batch=1, shuffle=False)
    with picpac.ImageStream(db, channels=-1, mean=[1, 2, 3], std=2, batch=1) as s:
        assert next(s)[0].shape == (1, 3, 6, 8)
    loader = picpac.ImageLoader(dict(channels=-1, std=[1, 2]))
    with pytest.raises(picpac.PicPacError, match=re.escape("std has 2 values for an image of 3 channels")):
        loader.load_binary(png(np.zeros((4, 4, 3), np.uint8)))


def test_a_crop_larger_than_a_fixed_resize_is_refused():
    with pytest.raises(PicPacValueError, match=re.escape("config key 'crop_width' (40) exceeds 'resize_width' (32)")):
        StreamConfig.from_dict(dict(resize_width=32, resize_height=32, crop_width=40, crop_height=28))
    with pytest.raises(PicPacValueError, match=re.escape("'crop_height' (30) exceeds 'resize_height' (20)")):
        StreamConfig.from_dict(dict(resize_height=20, crop_height=30))
    assert StreamConfig.from_dict(dict(resize_width=32, resize_height=32, crop_width=32, crop_height=28))["crop_width"] == 32
    assert StreamConfig.from_dict(dict(crop_width=4000))["crop_width"] == 4000  # no fixed size: smaller images are padded


def test_label_dtype_and_value_range(tmp_path):
    db = make_db(tmp_path / "db.picpac", 4, labels=[0, 1, 2, 3])
    with picpac.ImageStream(db, batch=4, loop=False, shuffle=False, label_dtype="int64") as s:
        _, labels, _ = next(s)
    assert labels.dtype == np.int64 and labels.tolist() == [0, 1, 2, 3]
    with picpac.ImageStream(db, batch=4, loop=False, shuffle=False, onehot=4, label_dtype="int64") as s:
        assert next(s)[1].dtype == np.int64
    plain = dict(batch=4, loop=False, shuffle=False, order="NHWC")
    with picpac.ImageStream(db, **plain) as a, \
            picpac.ImageStream(db, value_range="0-1", mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.5], **plain) as b:
        pixels, scaled = next(a)[0], next(b)[0]
    want = (pixels / 255 - np.float32([0.5, 0.4, 0.3])) / np.float32([0.2, 0.25, 0.5])
    np.testing.assert_allclose(scaled, want, atol=1e-5)
    with picpac.ImageStream(db, value_range="0-1", **plain) as c:
        np.testing.assert_allclose(next(c)[0], pixels / 255, atol=1e-6)
    with pytest.raises(PicPacValueError, match="'value_range' .* needs dtype='float32'"):
        StreamConfig.from_dict(dict(value_range="0-1", dtype="uint8"))
