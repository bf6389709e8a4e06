"""picpac.stream.loader.ImageLoader on real JPEGs: exactly what ImageStream makes of the same images under the
same deterministic config, its errors naming the image, and a StreamConfig taken as its keys."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.errors import ImageTooLargeError, MissingPathError, PicPacError, PicPacValueError
from picpac.stream.config import StreamConfig
from picpac.stream.loader import ImageLoader

IMAGENET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet-250"
CONFIGS = [
    dict(resize_width=96, resize_height=80, crop_width=64, crop_height=48),
    dict(max_size=120, round_div=16, order="NHWC", colorspace="BGR", mean=[100, 110, 120], std=[50, 60, 70]),
    dict(resize_width=64, resize_height=64, channels=1, dtype="uint8"),
    dict(transforms=[{"type": "resize", "size": 72}, {"type": "clip", "size": 56, "shift": 8}], value_range="0-1",
         mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
]


@pytest.fixture(scope="module")
def jpegs() -> list[Path]:
    if not IMAGENET.is_dir():
        pytest.skip(f"real data not found at {IMAGENET}")
    return sorted(IMAGENET.glob("*.JPEG"))[:6]


@pytest.fixture(scope="module")
def db(jpegs, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("loader") / "six.picpac"
    with picpac.Writer(path) as w:
        for i, jpeg in enumerate(jpegs):
            w.append(image=jpeg.read_bytes(), label=float(i))
    return path


@pytest.mark.parametrize("config", CONFIGS, ids=range(len(CONFIGS)))
def test_the_same_images_as_the_stream(db, jpegs, config):
    with picpac.ImageStream(db, batch=1, shuffle=False, loop=False, perturb=False, workers=1, **config) as stream:
        streamed = [batch[0] for batch in stream]
    loader = ImageLoader(**config)  # (keywords, as the stream's: the same layout)
    channels = 1 if config.get("channels") == 1 else 3
    for jpeg, want in zip(jpegs, streamed, strict=True):
        got = loader.load_path(jpeg)
        assert got.ndim == 4 and got.shape[0] == 1
        assert got.shape[3 if config.get("order") == "NHWC" else 1] == channels
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert np.array_equal(loader.load_binary(jpeg.read_bytes()), got)


def test_shape_of_a_known_resize(jpegs):
    got = ImageLoader(resize_width=40, resize_height=30).load_path(jpegs[0])
    assert got.shape == (1, 3, 30, 40) and got.dtype == np.float32
    got = ImageLoader({"resize_width": 40, "resize_height": 30, "order": "NHWC"}, dtype="uint8").load_path(jpegs[0])
    assert got.shape == (1, 30, 40, 3) and got.dtype == np.uint8


def test_random_keys_take_their_centre_version(jpegs):
    """perturb is forced off: the pert_* keys do nothing and the crop is the centre one, on every call."""
    plain = ImageLoader(resize_width=64, resize_height=64, crop_width=32, crop_height=32).load_path(jpegs[1])
    noisy = ImageLoader(resize_width=64, resize_height=64, crop_width=32, crop_height=32, perturb=True,
                        pert_angle=30, pert_hflip=True, pert_color1=40)
    assert all(np.array_equal(noisy.load_path(jpegs[1]), plain) for _ in range(3))
    whole = ImageLoader(resize_width=64, resize_height=64).load_path(jpegs[1])
    assert np.array_equal(plain, whole[:, :, 16:48, 16:48])


def test_stream_only_keys_are_accepted_and_ignored(jpegs):
    want = ImageLoader(resize_width=32, resize_height=32).load_path(jpegs[2])
    got = ImageLoader(resize_width=32, resize_height=32, annotate="json", task="detect", images=[2], db="x.picpac",
                      annotation_field=3, image_field="pixels", batch=8, shuffle=False).load_path(jpegs[2])
    assert np.array_equal(got, want)


def test_a_stream_config_is_taken_as_its_keys(jpegs):
    keys = {"resize_width": 48, "resize_height": 36, "mean": [1, 2, 3], "threads": 2, "bgr2rgb": False}
    from_config = ImageLoader(StreamConfig.from_dict(keys))
    from_dict = ImageLoader(keys)
    assert from_config.config == from_dict.config
    assert from_config.config.output.colorspace == "BGR" and from_config.config.parallelism.workers == 2
    for jpeg in jpegs[:3]:
        assert np.array_equal(from_config.load_path(jpeg), from_dict.load_path(jpeg))
    more = ImageLoader(StreamConfig.from_dict(keys), resize_width=24)  # keyword keys over the config's
    assert more.load_path(jpegs[0]).shape == (1, 3, 36, 24)


def test_corrupt_bytes_name_where(jpegs):
    data = jpegs[0].read_bytes()
    loader = ImageLoader()
    for bad in (b"not an image", data[:100], data[:len(data) // 3], b""):
        with pytest.raises(PicPacValueError, match=r"^cut\.jpg: cannot decode the image \(corrupt, truncated or not "
                                                   r"an image\)$"):
            loader.load_binary(bad, where="cut.jpg")
    with pytest.raises(PicPacValueError, match=r"^image bytes: cannot decode"):
        loader.load_binary(b"junk")


def test_a_corrupt_file_names_its_path(jpegs, tmp_path):
    path = tmp_path / "half.jpg"
    path.write_bytes(jpegs[0].read_bytes()[:500])
    with pytest.raises(PicPacValueError, match=rf"^{path}: cannot decode the image"):
        ImageLoader().load_path(path)


def test_missing_and_unreadable_paths(tmp_path):
    missing = tmp_path / "nope.jpg"
    with pytest.raises(MissingPathError, match=rf"^{missing}: no such file$") as info:
        ImageLoader().load_path(missing)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(PicPacError, match=rf"^{tmp_path}: cannot read: Is a directory$"):
        ImageLoader().load_path(tmp_path)


def test_an_image_over_max_pixels_names_where(jpegs):
    with pytest.raises(ImageTooLargeError, match=r"^big\.jpg: image of 500x375 = 187,500 pixels, over the limit "
                                                 r"max_pixels=1000") as info:
        ImageLoader(max_pixels=1000).load_binary((IMAGENET / "n01440764_tench.JPEG").read_bytes(), where="big.jpg")
    assert (info.value.width, info.value.height, info.value.limit) == (500, 375, 1000)
