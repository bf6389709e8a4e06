"""The device job with device='cpu' (the device stage's code path, in torch on the CPU): the same crops, flips,
labels and boxes as the CPU path for the same seed, pixels within the stated tolerance, samples the device cannot
follow made by the CPU path, resume and ranks as on the CPU path."""
from pathlib import Path

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import picpac  # noqa: E402
from picpac.errors import PicPacValueError  # noqa: E402
from picpac.image.color import ColorJitter, Invert  # noqa: E402
from picpac.image.transforms import CenterCrop, Flip, Pad, RandomResizedCrop, Resize  # noqa: E402
from helpers import SHARED_DATA, imagenet_db  # noqa: E402

TOLERANCE = 2.0
"""The largest mean absolute difference per image, in levels of 255, allowed between the device's and the CPU path's
pixels on W1 and W2 (issue 28): the resamplers differ (docs/gpu.md gives the measured figures)."""


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    """The 250 JPEGs, then 6 PNGs of the first of them (decoded on the CPU, warped on the device)."""
    return imagenet_db(tmp_path_factory.mktemp("device") / "imagenet.picpac")


def batches(path, device, **config) -> tuple[list[tuple], dict]:
    keys = {"loop": False, "batch": 32, "threads": 2, "seed": 4, **config}
    with picpac.ImageStream(path, device=device, **keys) as stream:
        out = [tuple(a.cpu().numpy().copy() if isinstance(a, torch.Tensor) else np.copy(a) if isinstance(a, np.ndarray)
                     else a for a in b) for b in stream]
        return out, stream.stats()


def per_image_difference(a: list[tuple], b: list[tuple]) -> np.ndarray:
    x, y = (np.concatenate([batch[0] for batch in run]).astype(np.float64) for run in (a, b))
    assert x.shape == y.shape
    return np.abs(x - y).reshape(len(x), -1).mean(1)


W1 = {"transforms": [RandomResizedCrop(224, 224), Flip(horizontal=0.5)], "shuffle": True, "dtype": "uint8",
      "order": "NHWC"}
W2 = {"transforms": [Resize(shorter=256), CenterCrop(224, 224)], "dtype": "uint8", "order": "NHWC"}


@pytest.mark.parametrize("config", [W1, W2], ids=["W1", "W2"])
def test_w1_and_w2_match_the_cpu_paths_crops_flips_and_labels_within_two_levels(imagenet, config):
    cpu, _ = batches(imagenet, None, **config)
    device, stats = batches(imagenet, "cpu", **config)
    assert [len(b) for b in device] == [len(b) for b in cpu]
    for d, c in zip(device, cpu):
        assert d[0].dtype == c[0].dtype and d[0].shape == c[0].shape
        assert np.array_equal(d[1], c[1]) and d[2] == c[2]  # labels and padding
    difference = per_image_difference(device, cpu)
    assert difference.max() <= TOLERANCE / 2 and difference.mean() < 0.1  # the same decoder here: closer still
    assert stats["cpu_decoded"] == 256 and stats["device_decoded"] == 0  # device='cpu': decoded by the threads
    assert stats["fused_reason"] == "device='cpu' (the device stage makes the batches)"
    assert stats["device_decoder"] == "the planning threads (libjpeg-turbo, as the CPU path)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU's decoder)")
@pytest.mark.parametrize("config", [W1, W2], ids=["W1", "W2"])
def test_on_cuda_w1_and_w2_match_the_cpu_path_within_two_levels(imagenet, config):
    pytest.importorskip("torchvision")
    cpu, _ = batches(imagenet, None, **config)
    device, stats = batches(imagenet, "cuda", **config)
    for d, c in zip(device, cpu):
        assert np.array_equal(d[1], c[1])
    assert per_image_difference(device, cpu).max() <= TOLERANCE
    assert stats["device_decoded"] == 250 and stats["cpu_decoded"] == 6  # the PNGs


def test_normalised_channel_first_rgb_output(imagenet):
    config = {"resize_width": 64, "resize_height": 48, "colorspace": "RGB", "mean": [120, 115, 100],
              "std": [60, 60, 60], "batch": 50}
    cpu, _ = batches(imagenet, None, **config)
    device, _ = batches(imagenet, "cpu", **config)
    assert device[0][0].dtype == np.float32 and device[0][0].shape == (50, 3, 48, 64)
    assert (per_image_difference(device, cpu) * 60).mean() < 1.0  # in levels of 255


def test_trailing_colour_steps_run_on_the_device_with_the_cpu_paths_bytes(imagenet, monkeypatch):
    from picpac.device import photometric
    applied = []
    apply = photometric.apply
    monkeypatch.setattr(photometric, "apply", lambda values, colours, order: applied.append(len(colours)) or
                        apply(values, colours, order))
    config = {"transforms": [CenterCrop(96, 96), Flip(horizontal=0.5),
                             ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3), Invert(p=0.3)],
              "pert_color1": 10, "pert_color2": 20, "pert_color3": 5, "perturb": True, "dtype": "uint8"}
    cpu, _ = batches(imagenet, None, **config)
    device, stats = batches(imagenet, "cpu", **config)
    assert all(np.array_equal(d[0], c[0]) for d, c in zip(device, cpu))  # a crop and a flip: no resampling
    assert sum(applied) == 256  # ColorJitter and Invert ran there (PicPac's pert_color*, before the crop, here)


def test_colour_steps_the_device_does_not_make_read_the_pixels_on_the_cpu(imagenet):
    for steps in ([CenterCrop(96, 96), ColorJitter(hue=0.2)], [ColorJitter(brightness=0.3), CenterCrop(96, 96)]):
        cpu, _ = batches(imagenet, None, transforms=steps, dtype="uint8")
        device, _ = batches(imagenet, "cpu", transforms=steps, dtype="uint8")
        assert all(np.array_equal(d[0], c[0]) for d, c in zip(device, cpu))


def test_a_border_the_device_cannot_follow_takes_the_cpu_path_whole(imagenet):
    config = {"transforms": [Resize(shorter=80), Pad(120, 120, border="reflect"), RandomResizedCrop(100, 100)],
              "dtype": "uint8"}
    cpu, _ = batches(imagenet, None, **config)
    device, _ = batches(imagenet, "cpu", **config)
    assert all(np.array_equal(d[0], c[0]) for d, c in zip(device, cpu))


def test_resume_gives_the_uninterrupted_batches(imagenet):
    config = {**W1, "loop": True, "batch": 16, "seed": 9}
    with picpac.ImageStream(imagenet, device="cpu", **config) as stream:
        whole = [next(stream) for _ in range(5)]
    with picpac.ImageStream(imagenet, device="cpu", **config) as stream:
        [next(stream) for _ in range(2)]
        state = stream.state_dict()
    with picpac.ImageStream(imagenet, device="cpu", **config) as stream:
        stream.load_state_dict(state)
        rest = [next(stream) for _ in range(3)]
    for a, b in zip(whole[2:], rest):
        assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_ranks_share_the_epoch_as_on_the_cpu_path(imagenet):
    config = {"resize_width": 32, "resize_height": 32, "shuffle": True, "world_size": 2, "batch": 16}
    for rank in (0, 1):
        cpu, _ = batches(imagenet, None, rank=rank, **config)
        device, _ = batches(imagenet, "cpu", rank=rank, **config)
        assert [b[1].tolist() for b in device] == [b[1].tolist() for b in cpu]


def test_a_damaged_record_is_skipped_as_on_the_cpu_path(imagenet, tmp_path):
    path = tmp_path / "damaged.picpac"
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:20]
    with picpac.Writer(path) as w:
        for i, file in enumerate(files):
            w.append(image=file.read_bytes() if i != 5 else b"not an image", label=i)
    device, stats = batches(path, "cpu", resize_width=32, resize_height=32, batch=8, skip_errors=True)
    assert sorted(np.concatenate([b[1] for b in device]).tolist()) == [i for i in range(20) if i != 5]
    assert stats["skipped"] == 1
    with pytest.raises(picpac.errors.SampleError, match="record 5"):
        batches(path, "cpu", resize_width=32, resize_height=32, batch=8)


def test_keys_the_device_cannot_follow_are_refused_by_name(imagenet):
    for keys, name in (({"backend": "process"}, "backend"), ({"channels": -1}, "channels")):
        with pytest.raises(PicPacValueError, match=f"config key '{name}'.*device='cpu'"):
            picpac.ImageStream(imagenet, device="cpu", **keys)


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    """30 of the JPEGs, each with a box and a point (JSON shapes) and a label mask of the box."""
    import json
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    path = tmp_path_factory.mktemp("device") / "annotated.picpac"
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:30]
    with picpac.Writer(path) as w:
        for i, file in enumerate(files):
            data = file.read_bytes()
            height, width = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
            x, y, bw, bh = 0.1 + 0.02 * (i % 5), 0.2 + 0.01 * (i % 7), 0.5, 0.4
            doc = {"shapes": [{"type": "rect", "geometry": {"x": x, "y": y, "width": bw, "height": bh},
                               "label": 1 + i % 3},
                              {"type": "point", "geometry": {"x": x + 0.1, "y": y + 0.1}, "label": 7}]}
            mask = np.zeros((height, width), np.uint8)
            mask[round(y * height):round((y + bh) * height), round(x * width):round((x + bw) * width)] = 1 + i % 3
            w.append(image=data, annotation=json.dumps(doc).encode(), mask=cv2.imencode(".png", mask)[1].tobytes(),
                     label=i % 3)
    return path


PERTURB = {"perturb": True, "pert_angle": 20, "pert_hflip": True, "pert_min_scale": 0.7, "pert_max_scale": 1.2,
           "resize_width": 160, "resize_height": 128, "batch": 10, "dtype": "uint8"}


@pytest.mark.parametrize("task", ["detect", "keypoints"])
def test_boxes_and_keypoints_are_the_cpu_paths_exactly(annotated, task):
    cpu, _ = batches(annotated, None, task=task, **PERTURB)
    device, _ = batches(annotated, "cpu", task=task, **PERTURB)
    for d, c in zip(device, cpu):
        assert np.array_equal(d[1], c[1]) and np.array_equal(d[2], c[2])  # the boxes (points) and their counts
    assert per_image_difference(device, cpu).mean() < 1.0


@pytest.mark.parametrize("annotate", ["image", "json"])
def test_masks_follow_the_same_maps(annotated, annotate):
    keys = {"task": "segment", "annotate": annotate, **PERTURB}
    cpu, _ = batches(annotated, None, **keys)
    device, _ = batches(annotated, "cpu", **keys)
    for d, c in zip(device, cpu):
        assert d[1].shape == c[1].shape and d[1].dtype == c[1].dtype == np.float32
        assert set(np.unique(d[1])) <= {0.0, 1.0, 2.0, 3.0, 7.0}  # the point: a disc of label 7
        assert (d[1] != c[1]).mean() < 0.01  # nearest rounds a few edge pixels the other way (image masks)
    onehot, _ = batches(annotated, "cpu", onehot=8, order="NCHW", **keys)
    assert onehot[0][1].shape == (10, 8, 128, 160) and np.array_equal(onehot[0][1].sum(1), np.ones((10, 128, 160)))


@pytest.mark.parametrize("annotate", ["image", "json"])
def test_a_mask_value_past_onehot_is_refused_on_the_host_naming_the_record(annotated, annotate):
    """Checked where the sample is planned (the device reads nothing back), as the CPU path refuses it."""
    keys = {"task": "segment", "annotate": annotate, "onehot": 3, "batch": 10, "resize_width": 160,
            "resize_height": 128, "shuffle": False}
    for device in (None, "cpu"):  # record 2's box is labelled 3; the json's point, 7
        with pytest.raises(picpac.PicPacValueError, match=r"record \d+: mask value [37] is not a class id in \[0, "
                                                          r"onehot=3\)"):
            batches(annotated, device, **keys)


@pytest.mark.parametrize("skip_errors", [True, False])
def test_a_jpeg_the_stage_cannot_decode_is_skipped_or_raised_by_name(imagenet, skip_errors):
    from picpac.engine.executor import Delivery
    from picpac.errors import SampleError
    with picpac.ImageStream(imagenet, device="cpu", batch=3, skip_errors=skip_errors) as stream:
        job = stream._pipeline.job
    units = [(i, i, 0, 0, i, 0.0) for i in range(6)]
    error = SampleError("db", 4, "cannot decode its image")
    deliveries = [Delivery((torch.zeros(3, 2), None, [False] * 3, []), units[:3], [(None, ())] * 3, 3),
                  Delivery((torch.zeros(2, 2), None, [False] * 2, [(1, error)]), units[3:], [(None, ())] * 3, 3)]
    skipped = []
    parts = job.collect(iter(deliveries), None, lambda exc, index: skipped.append((str(exc), index)))
    if not skip_errors:
        next(parts)
        with pytest.raises(SampleError, match="db: record 4 cannot decode its image"):
            next(parts)
        return
    first, second = list(parts)
    assert first.positions == [0, 1, 2] and second.positions == [3, 5] and second.taken == 3
    assert skipped == [("db: record 4 cannot decode its image", 4)]
