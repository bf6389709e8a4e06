"""The device's JPEG decoders: nvImageCodec decodes the planned regions (tested here on its CPU backend,
libjpeg-turbo: the CPU path's bytes), a JPEG it refuses is None in its place and the stage decodes it on the CPU;
torchvision's nvJPEG names the extra that installs it."""
import re
import sys

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from picpac.device.decoders import NvImageCodec, NvJpeg, decoder  # noqa: E402
from picpac.device.geometry import Planned, plan  # noqa: E402
from picpac.device.stage import DeviceStage, HostBuffers  # noqa: E402
from picpac.errors import MissingFrameworkError, SampleError  # noqa: E402
from helpers import SHARED_DATA  # noqa: E402

CONSTANT = (cv2.BORDER_CONSTANT, 0)


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    return [f.read_bytes() for f in sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:12]]


def host(datas: list[bytes]) -> tuple:
    """The JPEGs in one host buffer, and their spans: what a decoder is called with."""
    ends = np.cumsum([len(d) for d in datas]).tolist()
    return torch.frombuffer(bytearray(b"".join(datas)), dtype=torch.uint8), list(zip([0] + ends[:-1], ends))


@pytest.fixture(scope="module")
def nvimgcodec():
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")
    return NvImageCodec(torch.device("cpu"), 3)


def test_regions_are_decoded_as_libjpeg_decodes_them_and_refused_ones_are_none(nvimgcodec, jpegs):
    regions = [(5 + i, 10 + 2 * i, 105 + 3 * i, 90 + i) for i in range(len(jpegs))]
    out = nvimgcodec(*host(jpegs + [b"\xff\xd8\xff\xe0" + bytes(100)]), regions + [(0, 0, 4, 4)])
    assert out[-1] is None
    for data, (x0, y0, x1, y1), image in zip(jpegs, regions, out):
        rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        assert image.dtype == torch.uint8 and image.shape == (3, y1 - y0, x1 - x0)
        assert np.array_equal(image.permute(1, 2, 0).numpy(), rgb[y0:y1, x0:x1])


def test_the_stage_warps_the_decoded_regions_and_decodes_refused_jpegs_on_the_cpu(nvimgcodec, jpegs):
    stage = DeviceStage("cpu", 3, False, np.dtype(np.uint8), False, None, None)
    stage.jpeg, stage.host = nvimgcodec, HostBuffers(torch.device("cpu"))  # as on CUDA, with its CPU backend
    refused = b"\xff\xd8\xff\xe0" + bytes(100)  # not a JPEG nvImageCodec parses; the CPU path fails on it too
    batch = []
    for data in jpegs[:4]:
        h, w = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
        matrix = np.array([[1.0, 0, -(w // 4)], [0, 1, -(h // 4)]])  # the middle 64 x 48
        batch.append(Planned(data, None, plan(matrix, (w, h), (64, 48), CONSTANT), None, None, None, (64, 48)))
    images, _, decoded, failed = stage(batch)
    assert failed == []
    assert decoded == [True] * 4 and images.shape == (4, 48, 64, 3)
    for data, image in zip(jpegs, images):
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        h, w = bgr.shape[:2]
        assert np.array_equal(image.numpy(), bgr[h // 4:h // 4 + 48, w // 4:w // 4 + 64])  # BGR, as the config says
    g = plan(None, (64, 48), (64, 48), CONSTANT)
    images, _, decoded, failed = stage([batch[0], Planned(refused, None, g, None, None, None, (64, 48), (), "db", 7)])
    assert images.shape == (1, 48, 64, 3) and decoded == [True]  # the refused sample left out of the batch
    [(place, error)] = failed
    assert place == 1 and isinstance(error, SampleError) and str(error).startswith("db: record 7 cannot decode")


def test_the_first_installed_decoder_is_chosen(monkeypatch):
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")
    assert isinstance(decoder(torch.device("cpu"), 3), NvImageCodec)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(MissingFrameworkError, match=r"torchvision.*pip install 'picpac\[gpu\]'"):
        decoder(torch.device("cpu"), 3)


def test_nvjpeg_without_torchvision_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision.io", None)  # as if torchvision were not installed
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(MissingFrameworkError, match=r"torchvision.*pip install 'picpac\[gpu\]'"):
        NvJpeg(torch.device("cpu"), 3)


def test_an_nvimagecodec_without_decoders_for_the_device_is_passed_over(monkeypatch):
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")
    monkeypatch.setattr(NvImageCodec, "__call__", lambda self, buffer, spans, regions: [None] * len(spans))
    with pytest.raises(RuntimeError, match="decodes no JPEG on cpu"):
        NvImageCodec(torch.device("cpu"), 3)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(MissingFrameworkError, match="torchvision"):  # the next decoder is tried
        decoder(torch.device("cpu"), 3)


@pytest.mark.parametrize("breaks, why", [
    ("version", r"nvImageCodec 0\.7\.0 is older than the 0\.9 whose API the stage uses"),
    ("api", r"TypeError: __init__\(\): incompatible constructor arguments"),
])
def test_an_nvimgcodec_that_does_not_start_is_a_named_fallback_never_a_crash(monkeypatch, breaks, why):
    """0.7 and 0.8 lack DecodeParams(sample_format=...): a TypeError, which once escaped; an older version is named."""
    nv = pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")
    if breaks == "version":
        monkeypatch.setattr(nv, "__version__", "0.7.0")
    else:
        def old_params(**kwargs):
            raise TypeError("__init__(): incompatible constructor arguments. The following argument types are "
                            "supported: (apply_exif_orientation: bool = True, color_spec: ColorSpec = SRGB)")
        monkeypatch.setattr(nv, "DecodeParams", old_params)
    try:
        import torchvision.io  # noqa: F401
    except ImportError:  # without torchvision, the fallback names the extra that installs it
        with pytest.warns(RuntimeWarning, match=f"picpac's device stage: nvImageCodec does not start here .*{why}.*; "
                          "torchvision's nvJPEG decodes instead"):
            with pytest.raises(MissingFrameworkError, match=r"pip install 'picpac\[gpu\]'"):
                decoder(torch.device("cpu"), 3)
        return
    with pytest.warns(RuntimeWarning, match=why):
        chosen = decoder(torch.device("cpu"), 3)
    assert isinstance(chosen, NvJpeg) and re.search(why, chosen.name)


def test_images_leave_nvimgcodec_without_leaking(nvimgcodec):
    """nvImageCodec 0.9's ``__cuda_array_interface__`` (and ``__array_interface__``) leak a Python int per read: 80 MB
    an ImageNet epoch. The stage takes its images by DLPack: the memory retained over 3,000 images stays flat. Where
    nvImageCodec exports no DLPack of a host image (its CPU backend without a CUDA driver) this cannot be shown; the
    device run (benchmarks/device_run.sh) runs it, on CUDA and on the CPU backend."""
    import gc
    data = torch.from_numpy(np.frombuffer(cv2.imencode(".jpg", np.full((32, 48, 3), 90, np.uint8))[1].tobytes(),
                                          np.uint8).copy())
    image = nvimgcodec.decoder.decode([nvimgcodec.nv.CodeStream(data.numpy())], params=nvimgcodec.params)[0]
    try:
        torch.from_dlpack(image)
    except RuntimeError as exc:
        pytest.skip(f"nvImageCodec exports no DLPack of a host image here ({exc}): no CUDA driver")

    def convert(n):
        for _ in range(n):
            nvimgcodec._tensor(image)
    convert(100)
    gc.collect()
    before = sys.getallocatedblocks()
    convert(3000)
    gc.collect()
    assert sys.getallocatedblocks() - before < 100  # (3,000 or 6,000 with the interfaces)
