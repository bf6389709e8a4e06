"""The device stage (issue 28, docs/gpu.md): how close its pixels are to the CPU path's, and what the batched warp
costs against warping each sample alone.

1. Agreement: one pass over the 250 ImageNet JPEGs (../shared/data/imagenet-250, or PICPAC_BENCH_DATA; --samples:
   the first N) per workload,
   ImageStream(device=D) against the CPU path (device=None) with the same seed: labels equal, and the mean absolute
   difference per image in levels of 255 (mean over the images, and the worst image); for segmentation, the share of
   mask pixels that differ. D is 'cuda' where torch sees a GPU (nvImageCodec or nvJPEG decodes there), else 'cpu' (the
   same stage in torch, the CPU path's decoder); ``--emulate`` runs the stage on the CPU with the GPU's decoding code,
   nvImageCodec's regions and the box averages that stand for a reduced decode, over its CPU backend.
2. Warp: img/s of warp.warp over batches of the stage's own inputs (the pooled crops of W1 samples) against the
   same geometry warped one sample per grid_sample call, both on D, with the ratio measured in the same run.

    python benchmarks/device_stage.py [--device cuda|cpu] [--emulate] [--batch 256] [--repeats 5] [--samples 250]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import DATA, picpac_transforms  # noqa: E402

import picpac  # noqa: E402
from picpac.image.transforms import RandomResizedCrop, Resize, Rotate  # noqa: E402

WORKLOADS = {
    "W1 (RandomResizedCrop 224 + flip)": {"transforms": picpac_transforms("W1"), "shuffle": True},
    "W2 (shorter side 256 + centre crop 224)": {"transforms": picpac_transforms("W2")},
    "resize 100x120, normalised": {"resize_width": 100, "resize_height": 120, "mean": [120, 115, 100],
                                   "std": [1, 1, 1], "dtype": "float32"},
    "rotate 20 + RandomResizedCrop 96": {"transforms": [Resize(shorter=100), Rotate(20), RandomResizedCrop(96, 96)]},
    "PicPac pert_* (angle, scale, flip)": {"perturb": True, "pert_angle": 15, "pert_min_scale": 0.5,
                                           "pert_max_scale": 0.8, "pert_hflip": True, "resize_width": 320,
                                           "resize_height": 240, "crop_width": 160, "crop_height": 128},
    "resize 224x32 (one axis shrinks 12x)": {"resize_width": 224, "resize_height": 32},
    "resize 1x224 (a row averaged whole)": {"resize_width": 1, "resize_height": 224},
    "resize 640x48 (x grows, y shrinks)": {"resize_width": 640, "resize_height": 48},
}


def database(folder: str, masks: bool, samples: int) -> str:
    """The first ``samples`` JPEGs (labelled by position), with a label mask of a box per image when ``masks``."""
    path = str(Path(folder) / ("masks.picpac" if masks else "images.picpac"))
    if Path(path).exists():
        return path
    with picpac.Writer(path) as w:
        for i, file in enumerate(sorted(DATA.glob("*.JPEG"))[:samples]):
            data = file.read_bytes()
            fields = {"image": data, "label": i % 1000}
            if masks:
                h, w_ = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
                mask = np.zeros((h, w_), np.uint8)
                mask[h // 4:3 * h // 4, w_ // 5:4 * w_ // 5] = 1 + i % 3
                fields["mask"] = cv2.imencode(".png", mask)[1].tobytes()
            w.append(**fields)
    return path


def emulate_cuda_decoding() -> None:
    """The stage on the CPU decodes JPEGs as on CUDA: nvImageCodec's regions (its CPU backend) and pinned-style host
    buffers, instead of leaving them to the planning threads."""
    import torch

    from picpac.device import stage
    from picpac.device.decoders import NvImageCodec
    made = stage.DeviceStage.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.jpeg, self.host = NvImageCodec(torch.device("cpu"), self.channels), stage.HostBuffers(torch.device("cpu"))
    stage.DeviceStage.__init__ = init


def stream(db: str, device: str | None, **keys) -> list[tuple]:
    import torch
    config = {"loop": False, "batch": 50, "seed": 3, "dtype": "uint8", "order": "NHWC", **keys}
    with picpac.ImageStream(db, device=device, **config) as s:
        return [tuple(a.cpu().numpy() if isinstance(a, torch.Tensor) else a for a in batch) for batch in s]


def agreement(folder: str, device: str, samples: int) -> None:
    images = database(folder, False, samples)
    print(f"agreement with the CPU path (device={device!r}), mean absolute difference per image, levels of 255:")
    for name, keys in WORKLOADS.items():
        cpu, dev = stream(images, None, **keys), stream(images, device, **keys)
        assert all(np.array_equal(a[1], b[1]) for a, b in zip(cpu, dev)), f"{name}: the labels differ"
        x, y = (np.concatenate([b[0] for b in run]).astype(np.float64) for run in (cpu, dev))
        scale = float(np.mean(keys.get("std", [1])))
        mad = np.abs(x - y).reshape(len(x), -1).mean(1) * scale
        print(f"  {name:42s} mean {mad.mean():6.3f}   worst image {mad.max():6.3f}   ({len(x)} images)")
    masks = database(folder, True, samples)
    keys = {"task": "segment", "annotate": "image", "perturb": True, "pert_angle": 20, "pert_hflip": True,
            "pert_min_scale": 0.7, "pert_max_scale": 1.2, "resize_width": 160, "resize_height": 128}
    cpu, dev = stream(masks, None, **keys), stream(masks, device, **keys)
    differ = np.mean([np.mean(a[1] != b[1]) for a, b in zip(cpu, dev)])
    print(f"  {'masks (nearest), pert_* keys':42s} {differ:.3%} of the mask pixels differ")


def warp_timing(folder: str, device: str, batch: int, repeats: int, samples: int) -> None:
    """The stage's batched warp against one grid_sample call per sample, over the same inputs."""
    import torch

    from picpac.device import warp as warp_module
    from picpac.stream.device_job import DeviceJob
    db = database(folder, False, samples)
    sources, geometries = [], []
    with picpac.ImageStream(db, device="cpu", batch=batch, loop=False, transforms=picpac_transforms("W1")) as s:
        job: DeviceJob = s._pipeline.job
        for record in range(min(batch, len(s._pipeline.pool.records))):
            planned, _ = job((record, record, 0, 0, record, 0.0))
            pixels = planned.pixels
            sources.append(torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).to(device))
            geometries.append(planned.geometry)
    while len(sources) < batch:
        sources, geometries = sources * 2, geometries * 2
    sources, geometries = sources[:batch], geometries[:batch]
    size = (224, 224)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def alone() -> None:
        for image, g in zip(sources, geometries):
            warp_module.warp([image], [g], size)

    rates = {}
    for name, run in (("batched (the stage's warp)", lambda: warp_module.warp(sources, geometries, size)),
                      ("one sample per call", alone)):
        run()
        sync()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        sync()
        rates[name] = repeats * batch / (time.perf_counter() - start)
    base = rates["one sample per call"]
    print(f"\nwarp of {batch} W1 samples on {device}:")
    for name, rate in rates.items():
        print(f"  {name:30s} {rate:9,.0f} img/s   {rate / base:5.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda where torch sees one)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--samples", type=int, default=250, help="the first N JPEGs of the data")
    ap.add_argument("--emulate", action="store_true",
                    help="device cpu, JPEGs decoded as on CUDA: by nvImageCodec (its CPU backend), in regions")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("benchmarks/device_stage.py needs torch: pip install 'picpac[gpu]'", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.emulate else "cpu")
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else "the CPU"
    if args.emulate:
        emulate_cuda_decoding()
        where += " (JPEGs decoded as on CUDA, by nvImageCodec's CPU backend)"
    print(f"device stage on {where}; data {DATA}\n")
    with tempfile.TemporaryDirectory(prefix="picpac-device-") as folder:
        agreement(folder, device, args.samples)
        warp_timing(folder, device, args.batch, args.repeats, args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
