"""The device stage on the CPU (CUDA where there is one): the output's dtype, layout and normalisation, samples the
CPU path made kept in batch order, masks, and the errors that name the fix."""
import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from picpac.device.geometry import Planned, plan  # noqa: E402
from picpac.device.stage import DeviceStage  # noqa: E402
from picpac.errors import PicPacValueError  # noqa: E402

CONSTANT = (cv2.BORDER_CONSTANT, 0)


def planned(pixels: np.ndarray, size=(8, 6), mask=None, done=None) -> Planned:
    source = (pixels.shape[1], pixels.shape[0])
    scale = np.array([[size[0] / source[0], 0, 0], [0, size[1] / source[1], 0]])
    return Planned(None, pixels, plan(scale, source, size, CONSTANT), done, mask,
                   None if mask is None else plan(scale, source, size, CONSTANT, nearest=True), size)


def stage(**keys) -> DeviceStage:
    args = dict(device="cpu", channels=3, rgb=False, dtype=np.dtype(np.uint8), channel_first=True, mean=None,
                std=None)
    return DeviceStage(**{**args, **keys})


def test_pixels_come_out_in_the_outputs_dtype_layout_and_normalisation():
    pixels = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    images, masks, decoded, _ = stage()([planned(pixels)] * 2)
    assert images.dtype == torch.uint8 and images.shape == (2, 3, 6, 8) and masks is None and decoded == [False] * 2
    assert np.array_equal(images[1].numpy(), pixels.transpose(2, 0, 1))
    mean, std = np.float32([1, 2, 3]), np.float32([2, 4, 8])
    images, _, _, _ = stage(dtype=np.dtype(np.float32), channel_first=False, mean=mean, std=std)([planned(pixels)])
    assert images.dtype == torch.float32 and images.shape == (1, 6, 8, 3)
    assert np.allclose(images[0].numpy(), (pixels - mean) / std)


def test_samples_made_on_the_cpu_keep_their_place_in_the_batch():
    pixels = np.full((12, 16, 3), 10, np.uint8)
    done = np.full((3, 6, 8), 200, np.uint8)
    batch = [planned(pixels), planned(pixels, done=done)._replace(pixels=None, geometry=None), planned(pixels)]
    images, _, _, _ = stage()(batch)
    assert [int(images[i].float().mean()) for i in range(3)] == [10, 200, 10]


def test_a_batch_of_different_sizes_names_the_keys_that_make_them_equal():
    pixels = np.zeros((6, 8, 3), np.uint8)
    with pytest.raises(PicPacValueError, match="different sizes.*resize_width"):
        stage()([planned(pixels), planned(pixels, size=(4, 4))])


def test_masks_take_the_warp_by_nearest_and_onehot_checks_the_class_ids():
    pixels = np.zeros((12, 16, 3), np.uint8)
    mask = np.zeros((12, 16), np.uint8)
    mask[:, 8:] = 2
    _, masks, _, _ = stage()([planned(pixels, mask=mask)])
    assert masks.dtype == torch.float32 and masks.shape == (1, 1, 6, 8)
    assert set(masks.unique().tolist()) == {0.0, 2.0} and masks[0, 0, :, 4:].eq(2).all()
    _, onehot, _, _ = stage(onehot=3, channel_first=False)([planned(pixels, mask=mask)])
    assert onehot.shape == (1, 6, 8, 3) and onehot[0, :, 4:, 2].eq(1).all() and onehot.sum(-1).eq(1).all()
    # (class ids are checked where each sample is planned, on the host: tests/stream/test_device_job.py)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_says_so():
    with pytest.raises(PicPacValueError, match="device='cuda'.*no CUDA device.*device='cpu'"):
        stage(device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_jpegs_are_decoded_by_the_gpu_close_to_libjpeg():
    pytest.importorskip("torchvision")
    rng = np.random.default_rng(1)
    pixels = cv2.GaussianBlur(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8), (9, 9), 3)
    data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    reference = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    g = plan(None, (128, 96), (128, 96), CONSTANT)
    images, _, decoded, _ = stage(device="cuda")([Planned(data, None, g, None, None, None, (128, 96))] * 3)
    assert decoded == [True] * 3 and images.device.type == "cuda"
    assert np.abs(images[0].cpu().numpy().transpose(1, 2, 0).astype(int) - reference).mean() < 1.5  # BGR, as cv2


def test_jpegs_are_decoded_in_runs_that_bound_the_pixels_held(monkeypatch):
    from picpac.device import stage as stage_module
    g = plan(None, (100, 50), (100, 50), CONSTANT)  # 15,000 bytes decoded with 3 channels
    batch = [Planned(b"jpeg", None, g, None, None, None, (100, 50))] * 5
    monkeypatch.setattr(stage_module, "DECODE_BYTES", 40_000)
    assert stage_module._chunks([0, 1, 2, 3, 4], batch, 3) == [[0, 1], [2, 3], [4]]
    monkeypatch.setattr(stage_module, "DECODE_BYTES", 1)  # one image at least
    assert stage_module._chunks([0, 2], batch, 3) == [[0], [2]]


def test_sources_are_cut_to_what_the_warp_reads_before_they_go_up():
    from picpac.device.stage import _cut
    pixels = np.arange(20 * 30 * 3, dtype=np.uint8).reshape(20, 30, 3)
    g = plan(np.array([[1.0, 0, -10], [0, 1, -5]]), (30, 20), (8, 6), CONSTANT)
    part, moved = _cut(pixels, g)
    x0, y0, x1, y1 = g.crop
    assert np.array_equal(part, pixels[y0:y1, x0:x1]) and moved.crop == (0, 0, x1 - x0, y1 - y0)
    assert moved.inverse == g.inverse  # the map was relative to the crop already
    tensor = torch.from_numpy(pixels).permute(2, 0, 1)
    from picpac.device.warp import warp
    assert torch.equal(warp([tensor], [g], (8, 6)), warp([torch.from_numpy(part).permute(2, 0, 1)], [moved], (8, 6)))
