"""The fused sample job: batches byte for byte those of the Python path (fused=False), on the 250 ImageNet JPEGs,
for the benchmarks' workloads and the layouts, dtypes and steps it covers; samples it cannot follow take the Python
path one by one; each sample is written into its batch."""
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.image import decoding
from picpac.image.color import ColorJitter
from picpac.image.transforms import CenterCrop, Flip, Pad, RandomResizedCrop, Resize, Rotate, Rotate90
from picpac.stream.config import StreamConfig
from picpac.stream.fused_job import FusedSampleJob, fused_reason
from helpers import SHARED_DATA, imagenet_db, smooth_jpeg

fused_only = pytest.mark.skipif(not decoding.REGION_DECODE, reason="the fused C path needs picpac.image._jpeg (built "
                                                                   "with libjpeg-turbo's headers)")


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    """The 250 JPEGs, then 6 PNGs and a JPEG followed by 100 bytes (no end marker where the C path looks for one):
    OpenCV decodes these 7, not the C path."""
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))
    return imagenet_db(tmp_path_factory.mktemp("fused") / "imagenet.picpac",
                       ((files[7].read_bytes() + bytes(100), 7),) if files else ())


def batches(path, fused: bool, **config) -> tuple[list[tuple], dict]:
    keys = {"loop": False, "batch": 32, "threads": 2, "seed": 4, "fused": fused, **config}
    with picpac.ImageStream(path, **keys) as stream:
        out = [tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in b) for b in stream]
        return out, stream.stats()


def assert_same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            if isinstance(u, np.ndarray):
                assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
            else:
                assert u == v


W1 = {"transforms": [RandomResizedCrop(224, 224), Flip(horizontal=0.5)], "shuffle": True, "dtype": "uint8",
      "order": "NHWC", "colorspace": "BGR"}
W2 = {"transforms": [Resize(shorter=256), CenterCrop(224, 224)], "dtype": "uint8", "order": "NHWC", "colorspace": "BGR"}


@fused_only
@pytest.mark.parametrize("config", [
    W1,
    W2,
    {"resize_width": 224, "resize_height": 224, "dtype": "uint8", "order": "NHWC"},
    {"resize_width": 100, "resize_height": 120, "mean": [1, 2, 3], "std": [50, 60, 70], "colorspace": "RGB"},
    {"channels": 1, "transforms": [RandomResizedCrop(64, 48), Flip(horizontal=0.5, vertical=0.5)], "mean": [100]},
    {"transforms": [Resize(shorter=100), Pad(140, 130, fill=7), RandomResizedCrop(96, 96)], "value_range": "0-1",
     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    {"transforms": [Resize(shorter=100), Rotate(20), CenterCrop(90, 90), Rotate90()], "shuffle": True},
    {"pert_angle": 15, "pert_min_scale": 0.5, "pert_max_scale": 0.8, "pert_hflip": True, "crop_width": 160,
     "crop_height": 128, "resize_width": 320, "resize_height": 240},
], ids=["W1", "W2", "resize", "normalised", "gray", "pad", "rotate", "picpac-perturb"])
def test_batches_are_byte_for_byte_those_of_the_python_path(imagenet, config):
    python, plain = batches(imagenet, False, **config)
    fused, stats = batches(imagenet, True, **config)
    assert_same(fused, python)
    assert plain["fused_reason"] == "fused=False" and stats["fused_reason"] is None
    assert (stats["fused_samples"], stats["python_samples"]) == (250, 7)  # the PNGs and the padded JPEG


@fused_only
def test_colour_steps_read_the_pixels_and_keep_the_python_path(imagenet):
    config = {"transforms": [RandomResizedCrop(64, 64), ColorJitter(brightness=0.3)], "shuffle": True}
    python, _ = batches(imagenet, False, **config)
    fused, stats = batches(imagenet, True, **config)
    assert_same(fused, python)
    assert (stats["fused_samples"], stats["python_samples"]) == (0, 257)


@fused_only
def test_each_sample_is_written_into_its_batch(imagenet):
    """A full batch is the job's buffer itself (no stacking copy); buffers leave the job once delivered."""
    with picpac.ImageStream(imagenet, loop=False, batch=50, threads=2, resize_width=32, resize_height=32) as stream:
        job = stream._pipeline.job
        assert isinstance(job, FusedSampleJob)
        batches = iter(stream)
        first = next(batches)[0]
        assert first.shape == (50, 3, 32, 32) and first.base is not None and first.ctypes.data % 64 == 0
        rest = [b[0].shape[0] for b in batches]
        assert rest == [50, 50, 50, 50, 7] and job.batches == {}


@fused_only
def test_skipped_samples_shift_the_slots_and_batches_stay_right(imagenet, tmp_path):
    """With skip_errors, a failed sample's batch takes the next one: deliveries no longer fill whole buffers."""
    path = tmp_path / "broken.picpac"
    with picpac.Reader(imagenet) as r, picpac.Writer(path) as w:
        for i in range(40):
            w.append(image=b"not an image" if i in (3, 17) else bytes(r[i].fields["image"]), label=i)
    config = {"resize_width": 40, "resize_height": 30, "skip_errors": True, "batch": 8, "shuffle": False}
    python, _ = batches(path, False, **config)
    fused, stats = batches(path, True, **config)
    assert_same(fused, python)
    assert stats["skipped"] == 2 and [list(b[1]) for b in fused][0] == [0, 1, 2, 4, 5, 6, 7, 8]


@fused_only
def test_the_process_backend_runs_the_fused_job_in_its_workers(imagenet, clean):
    config = {**W1, "backend": "process", "workers": 2, "batch": 64}
    python, _ = batches(imagenet, False, **config)
    fused, stats = batches(imagenet, True, **config)
    assert_same(fused, python)
    assert stats["fused_reason"] is None and stats["fused_samples"] + stats["python_samples"] == 257
    assert stats["python_samples"] == 7  # counted here, from what the workers delivered


@fused_only
def test_resume_gives_the_uninterrupted_batches(imagenet):
    config = {**W1, "batch": 16, "loop": True, "fused": True, "threads": 2}
    with picpac.ImageStream(imagenet, **config) as stream:
        whole = [next(stream) for _ in range(6)]
    with picpac.ImageStream(imagenet, **config) as stream:
        [next(stream) for _ in range(3)]
        state = stream.state_dict()
    with picpac.ImageStream(imagenet, **config) as stream:
        stream.load_state_dict(state)
        resumed = [next(stream) for _ in range(3)]
    assert_same(resumed, whole[3:])


def test_fused_reason_says_why_a_config_takes_the_python_path():
    def reason(**keys):
        return fused_reason(StreamConfig.from_dict(keys))
    assert reason(fused=False) == "fused=False"
    assert reason(channels=-1) == "channels=-1 (images as stored)" or not decoding.REGION_DECODE
    if decoding.REGION_DECODE:
        assert reason() is None
        assert "cache=True" in reason(cache=True)
        assert "task='segment'" in reason(task="segment", annotate="image")
        assert "reduced_decode" in reason(region_decode=False)
    assert "holds arrays" in fused_reason(StreamConfig.from_dict({}), arrays=True)



@fused_only
def test_a_pass_left_early_leaves_no_buffer_behind(imagenet):
    """Breaking out of a pass leaves the batches it was making; the next pass starts without them and gives what
    the Python path gives after the same break."""
    passes = []
    for fused in (False, True):
        with picpac.ImageStream(imagenet, loop=False, **{**W1, "batch": 16, "threads": 2, "fused": fused}) as stream:
            for i, _ in enumerate(stream):
                if i == 2:
                    break
            if fused:
                assert stream._pipeline.job.batches  # batches in the making when the pass was left
            passes.append([b[0].copy() for b in stream])
    assert len(passes[0]) == len(passes[1]) == 17
    assert all(np.array_equal(a, b) for a, b in zip(*passes))


def test_without_the_extension_every_sample_takes_the_python_path(imagenet, monkeypatch):
    """A build without libjpeg's headers (no picpac.image._jpeg): the stream says why and runs SampleJob."""
    monkeypatch.setattr(decoding, "REGION_DECODE", False)
    monkeypatch.setattr(decoding, "FAST_PATH_OFF", "the fast path is off: picpac.image._jpeg was not built")
    with picpac.ImageStream(imagenet, loop=False, batch=32, resize_width=64, resize_height=64) as stream:
        assert type(stream._pipeline.job).__name__ == "SampleJob"
        assert stream.stats()["fused_reason"] == "the fast path is off: picpac.image._jpeg was not built"
        assert sum(len(b[0]) for b in stream) == 257 and "fused_samples" not in stream.stats()


@fused_only
@pytest.mark.parametrize("task", ["detect", "keypoints"])
def test_boxes_and_keypoints_follow_the_same_plan(tmp_path, task):
    """Detection and keypoint tasks take the fused path too: the image in C, the shapes moved by the same maps."""
    import json
    path, rng = tmp_path / "shapes.picpac", np.random.default_rng(3)
    with picpac.Writer(path) as w:
        for i in range(24):
            x, y = rng.uniform(0.1, 0.5, 2)
            doc = {"shapes": [{"type": "rect", "geometry": {"x": x, "y": y, "width": 0.3, "height": 0.25}, "label": 1},
                              {"type": "point", "geometry": {"x": x + 0.1, "y": y + 0.1}, "label": 2}]}
            w.append(image=smooth_jpeg(240, 180, i), annotation=json.dumps(doc).encode(), label=i)
    config = {"task": task, "annotate": "json", "batch": 8, "shuffle": True,
              "transforms": [RandomResizedCrop(96, 80, scale=(0.5, 1)), Flip(horizontal=0.5, vertical=0.5)]}
    python, _ = batches(path, False, **config)
    fused, stats = batches(path, True, **config)
    assert_same(fused, python)
    assert (stats["fused_samples"], stats["python_samples"]) == (24, 0)
    assert any(len(b[1][0]) for b in fused)  # shapes survive the crops


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> Path:
    """The 250 JPEGs alone: every sample decoded by libjpeg-turbo through picpac, none by OpenCV."""
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))
    if not files:
        pytest.skip(f"real data not found at {SHARED_DATA}")
    path = tmp_path_factory.mktemp("jpegs") / "jpegs.picpac"
    with picpac.Writer(path) as w:
        for i, file in enumerate(files):
            w.append(image=file.read_bytes(), label=i % 10)
    return path


RECORDED = {"W1": "93de91cd08c3fc61", "W2": "0927358e03494a6d"}
"""The first 16 hex digits of SHA-256 over an epoch's batches (images, then labels) of W1 and W2 on the 250 JPEGs, seed 4:
recorded once, the same on every OpenCV release and CPU (CI runs this on several OpenCV releases). They change only
where picpac's arithmetic changes on purpose (or libjpeg-turbo's decoding does)."""


@fused_only
@pytest.mark.parametrize("name, config", [("W1", W1), ("W2", W2)])
def test_an_epochs_bytes_are_the_ones_recorded_on_both_paths(jpegs, name, config):
    for fused in (True, False):
        out, _ = batches(jpegs, fused, **config)
        digest = hashlib.sha256()
        for images, labels, *_ in out:
            digest.update(images.tobytes())
            digest.update(labels.tobytes())
        assert digest.hexdigest()[:16] == RECORDED[name], (name, fused, digest.hexdigest()[:16])


def test_a_process_with_the_fast_path_off_says_why_what_it_costs_and_how_to_get_it(tmp_path):
    """PICPAC_FAST_PATH=off (as a build without libjpeg-turbo's headers): stats() and picpac bench say so."""
    code = textwrap.dedent("""
        import picpac, sys
        from picpac.image import decoding
        with picpac.ImageStream(sys.argv[1], loop=False, batch=8) as stream:
            print(decoding.REGION_DECODE, stream.stats()["fused_reason"])
    """)
    db = picpac.Writer(tmp_path / "one.picpac")
    db.append(image=smooth_jpeg(40, 30), label=0)
    db.close()
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "one.picpac")], capture_output=True, text=True,
                         env={**os.environ, "PICPAC_FAST_PATH": "off"}, timeout=120)
    assert run.stdout.startswith("False the fast path is off: the environment variable PICPAC_FAST_PATH=off turns it "
                                 "off"), run.stderr
    assert "x faster); to get it, unset PICPAC_FAST_PATH" in run.stdout
    bench = subprocess.run(["picpac", "bench", str(tmp_path / "one.picpac"), "--seconds", "0.5"], capture_output=True,
                           text=True, env={**os.environ, "PICPAC_FAST_PATH": "off"}, timeout=120)
    assert "no fused C path: the fast path is off: the environment variable" in bench.stdout, bench.stdout + bench.stderr
