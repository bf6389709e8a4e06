"""The device's batched warp against OpenCV, the CPU path's resampler: bilinear warps and box-averaged shrinks
within one level of 255, borders, flips, masks by nearest, and batches of mixed sizes kept in order; on the CPU and,
where there is one, on CUDA (the ``device`` fixture)."""
import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from picpac.device import warp as warp_module  # noqa: E402
from picpac.device.geometry import plan  # noqa: E402
from picpac.device.warp import warp  # noqa: E402
from picpac.image.sample import resample  # noqa: E402


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    rng = np.random.default_rng(0)
    return cv2.GaussianBlur(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8), (7, 7), 2)


def device_warp(image: np.ndarray, matrix, size, border=(cv2.BORDER_CONSTANT, 0), device="cpu") -> np.ndarray:
    g = plan(matrix, (image.shape[1], image.shape[0]), size, border)
    out = warp([torch.from_numpy(image).permute(2, 0, 1).to(device)], [g], size)[0]
    assert out.device.type == device
    return out.round().clamp(0, 255).permute(1, 2, 0).cpu().numpy().astype(np.uint8)


MAPS = {
    "crop": (np.array([[1.0, 0, -10], [0, 1, -20]]), (224, 224), (cv2.BORDER_CONSTANT, 0)),
    "rotate-fill": (np.array([[0.8, 0.1, 5], [-0.1, 0.8, 3]]), (224, 224), (cv2.BORDER_CONSTANT, 127)),
    "rotate-replicate": (np.array([[0.8, 0.1, 5], [-0.1, 0.8, 3]]), (224, 224), (cv2.BORDER_REPLICATE, 0)),
    "flip-enlarge": (np.array([[-1.2, 0, 480], [0, 1.2, -30]]), (224, 224), (cv2.BORDER_CONSTANT, 0)),
    "shrink-slice": (np.array([[0.7, 0, -7], [0, 0.7, -14]]), (200, 160), (cv2.BORDER_CONSTANT, 0)),
    "shrink-flipped": (np.array([[-0.7, 0, 217], [0, -0.7, 174]]), (200, 160), (cv2.BORDER_CONSTANT, 0)),
    "shrink-warp": (np.array([[0.56, 0, -20.3], [0, 0.6, -10.1]]), (200, 160), (cv2.BORDER_CONSTANT, 0)),
}


@pytest.mark.parametrize("name", sorted(MAPS))
def test_each_map_is_the_cpu_paths_within_one_level(photo, name, device):
    matrix, size, border = MAPS[name]
    expected = resample(photo, matrix, size, *border)
    got = device_warp(photo, matrix, size, border, device)
    assert got.shape == expected.shape
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1


def test_a_warp_that_shrinks_more_than_2x_shrinks_by_area_boxes_first_as_the_cpu_path(photo, device):
    matrix = np.array([[0.3, 0.05, 0], [-0.05, 0.3, 20]])
    expected = resample(photo, matrix, (120, 90)).astype(int)
    got = device_warp(photo, matrix, (120, 90), device=device).astype(int)
    assert np.abs(got - expected).max() <= 1


def test_a_batch_of_mixed_sizes_and_kinds_is_each_samples_own_warp_in_order(photo, monkeypatch, device):
    small = np.ascontiguousarray(photo[50:170, 30:230])
    images = [photo, small, photo, small]
    size = (64, 48)
    maps = [(cv2.getRotationMatrix2D((200, 150), 30, 0.3), (cv2.BORDER_CONSTANT, 9)),
            (np.array([[0.32, 0, 0], [0, 0.4, 0]]), (cv2.BORDER_CONSTANT, 0)),  # all of the small one
            (np.array([[-0.16, 0, 64], [0, 0.16, 0]]), (cv2.BORDER_CONSTANT, 0)),  # mirrored [0, 400] x [0, 300]
            (np.array([[1.0, 0, -5], [0, 1, -5]]), (cv2.BORDER_REPLICATE, 0))]
    geometries = [plan(m, (im.shape[1], im.shape[0]), size, border) for im, (m, border) in zip(images, maps)]
    tensors = [torch.from_numpy(im).permute(2, 0, 1).to(device) for im in images]
    alone = [warp([t], [g], size)[0] for t, g in zip(tensors, geometries)]
    together = warp(tensors, geometries, size)
    assert [g.area for g in geometries] == [False, True, True, False]
    assert torch.allclose(together, torch.stack(alone), atol=1e-3)
    monkeypatch.setattr(warp_module, "CANVAS_BYTES", 1)  # one sample per canvas
    assert torch.allclose(warp(tensors, geometries, size), together, atol=1e-3)


def test_masks_by_nearest_keep_their_labels_and_fill_zero(device):
    mask = np.zeros((60, 80), np.uint8)
    mask[10:40, 20:70] = 3
    mask[40:, :30] = 7
    matrix = cv2.getRotationMatrix2D((40, 30), 25, 0.9)
    g = plan(matrix, (80, 60), (80, 60), (cv2.BORDER_CONSTANT, 0), nearest=True)
    out = warp([torch.from_numpy(mask)[None].to(device)], [g], (80, 60), nearest=True)[0, 0].cpu().numpy()
    assert set(np.unique(out)) <= {0, 3, 7}
    expected = cv2.warpAffine(mask, matrix, (80, 60), flags=cv2.INTER_NEAREST)
    assert (out != expected).mean() < 0.03  # labels move with the map; edges may round the other way


def test_crops_share_a_canvas_only_with_crops_of_a_like_size():
    crops = [torch.zeros(3, 10, 10), torch.zeros(3, 40, 40), torch.zeros(3, 12, 12), torch.zeros(3, 11, 10)]
    assert warp_module._canvases([0, 1, 2, 3], crops, (8, 8)) == [[0, 3, 2], [1]]  # by area; 144 <= 2 x 100
