"""The device's batched warp: each sample's pooled crop on one canvas, then one ``grid_sample`` for the batch.

Images of a batch differ in size, so each sample's crop (``geometry.Geometry``) is copied to the top left of a
canvas as large as the largest, with one more channel of ones that says where the crop is; a single
``affine_grid`` + ``grid_sample`` maps every sample at once. The ones channel, sampled as the pixels are, is the
weight that fell inside the source, so a constant border is ``value + (1 - weight) * fill``: OpenCV's
BORDER_CONSTANT for bilinear sampling. A replicating border clamps the grid to the crop's pixel centres.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import require
from .geometry import Geometry, thetas

torch = require("torch", "gpu", "picpac's device stage (the config key device)")
functional = torch.nn.functional

CANVAS_BYTES = 512 << 20
"""The most one canvas may take; a batch whose canvas would be larger is warped in parts."""


def warp(images: Sequence, geometries: Sequence[Geometry], size: tuple[int, int], nearest: bool = False):
    """``(n, C, height, width)`` float32: each ``(C, H, W)`` tensor of ``images`` mapped by its geometry onto
    ``size`` = (width, height), bilinearly (``nearest`` for label masks; box averages for ``area`` geometries);
    on the images' device."""
    crops = [_crop(image, g) for image, g in zip(images, geometries)]
    parts, order = [], []
    for area in (False, True):
        make = _area_part if area else _warp_part
        for part in _canvases([i for i, g in enumerate(geometries) if g.area == area], crops, size):
            parts.append(make([crops[i] for i in part], [geometries[i] for i in part], size, nearest))
            order += part
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    if order != sorted(order):  # back to the batch's order
        out = out[_to(np.argsort(order), out.device)]
    return out


def _canvases(group: list[int], crops: list, size: tuple[int, int]) -> list[list[int]]:
    """``group`` in runs that share a canvas: by the crops' sizes, so that a canvas is at most twice the area of
    any crop on it (padding costs memory and time), and within ``CANVAS_BYTES``."""
    runs: list[list[int]] = []
    shapes = {i: crops[i].shape for i in group}
    height = width = smallest = 0  # the last run's canvas, and its smallest crop's area (the first, by the sort)
    for i in sorted(group, key=lambda i: shapes[i][1] * shapes[i][2]):
        channels, h, w = shapes[i]
        if runs:
            grown = max(h, height), max(w, width)
            per_sample = (channels + 1) * 8 * max(grown[0] * grown[1], size[0] * size[1])
            if grown[0] * grown[1] <= 2 * smallest and (len(runs[-1]) + 1) * per_sample <= CANVAS_BYTES:
                runs[-1].append(i)
                height, width = grown
                continue
        runs.append([i])
        height, width, smallest = h, w, h * w
    return runs


def _crop(image, g: Geometry):
    """The part of ``image`` the map reads, box-averaged ``g.pool`` x ``g.pool`` and shrunk by ``g.shrink``'s boxes
    (float32 then)."""
    x0, y0, x1, y1 = g.crop
    whole = x0 == y0 == 0 and (y1, x1) == tuple(image.shape[1:])  # (a decoded region: no view to make)
    part = image if whole else image[:, y0:y1, x0:x1]
    if g.pool > 1:
        # ceil_mode: a last block past the edge averages the pixels it has, as a reduced JPEG decode does
        part = functional.avg_pool2d(part[None].float(), g.pool, ceil_mode=True)[0]
    if g.shrink is None:
        return part
    fx, fy, ox, oy, nx, ny = g.shrink
    part = part[None].float()
    for axis, f, origin, count in ((3, fx, ox, nx), (2, fy, oy, ny)):
        edges = np.clip(origin + f * np.arange(count + 1, dtype=np.float64), 0, part.shape[axis])[None]
        part = _box_means(part, edges, axis)
    return part[0]


def _canvas(crops: list, ones: bool):
    """The crops at the top left of one zero canvas; with ``ones``, one more channel of ones where each crop is. The
    crops are copied in one operation (a multi-tensor copy: one kernel for many crops on CUDA)."""
    channels = crops[0].shape[0]
    canvas = torch.zeros((len(crops), channels + ones, max(c.shape[1] for c in crops), max(c.shape[2] for c in crops)),
                         dtype=torch.float32, device=crops[0].device)
    strides, step = canvas.stride()[1:], canvas.stride(0)
    _copy([canvas.as_strided(crop.shape, strides, i * step) for i, crop in enumerate(crops)], crops)
    if ones:  # (one operation for the batch, not one per sample)
        sizes = _to(np.array([c.shape[1:] for c in crops], np.int64), canvas.device)
        rows = torch.arange(canvas.shape[2], device=canvas.device)[None, :, None] < sizes[:, 0, None, None]
        columns = torch.arange(canvas.shape[3], device=canvas.device)[None, None, :] < sizes[:, 1, None, None]
        canvas[:, channels] = rows & columns
    return canvas


def _warp_part(crops: list, geometries: Sequence[Geometry], size: tuple[int, int], nearest: bool):
    """Bilinear (or nearest) sampling of the pooled crops, with the border's fill."""
    n, channels = len(crops), crops[0].shape[0]
    canvas = _canvas(crops, True)
    ch, cw = canvas.shape[2:]
    device = canvas.device
    theta, bounds = thetas(list(geometries), [(c.shape[2], c.shape[1]) for c in crops], size, (cw, ch))
    width, height = size
    grid = functional.affine_grid(_to(theta, device), [n, channels + 1, height, width], align_corners=False)
    clamped = np.flatnonzero(~np.isnan(bounds[:, 0]))
    if len(clamped):  # replicating borders: the grid clamped to the crop's pixel centres
        low = _to(bounds[clamped][:, [0, 2]], device)[:, None, None, :]
        high = _to(bounds[clamped][:, [1, 3]], device)[:, None, None, :]
        rows = _to(clamped, device)
        grid[rows] = torch.maximum(torch.minimum(grid[rows], high), low)
    out = functional.grid_sample(canvas, grid, mode="nearest" if nearest else "bilinear", padding_mode="zeros",
                                 align_corners=False)
    fills = np.array([0.0 if g.fill is None else g.fill for g in geometries], np.float32)
    values, weight = out[:, :channels], out[:, channels:]
    if fills.any():
        values = values + (1 - weight) * _to(fills, device).reshape(-1, 1, 1, 1)
    return values


def _area_part(crops: list, geometries: Sequence[Geometry], size: tuple[int, int], nearest: bool):
    """Axis-aligned shrinks as OpenCV's INTER_AREA makes them: each output pixel the mean of the source box it
    covers, fractional pixels weighed by the part covered. The box sums are differences of the crop's running sum,
    which is piecewise linear, so interpolating it linearly at the box edges is exact; one axis, then the other."""
    canvas = _canvas(crops, False)
    inverse = np.array([g.inverse for g in geometries], np.float64)
    width, height = size
    for axis, extent, scale, offset in ((3, width, 0, 2), (2, height, 4, 5)):
        # the box edges of output pixels 0..extent in the pooled crop's coordinates (decreasing where flipped)
        edges = inverse[:, scale, None] * np.arange(extent + 1) + inverse[:, offset, None]
        edges = np.clip(edges, 0, canvas.shape[axis])
        canvas = _box_means(canvas, edges, axis)
    return canvas


def _box_means(values, edges: np.ndarray, axis: int):
    """The means of ``values`` (n, C, H, W) over the boxes between consecutive ``edges`` (n, k + 1) along ``axis``."""
    n, k = edges.shape[0], edges.shape[1] - 1
    running = functional.pad(values.cumsum(axis), (1, 0) if axis == 3 else (0, 0, 1, 0))  # running[i]: sum before i
    low = np.minimum(np.floor(edges), running.shape[axis] - 2).astype(np.int64)
    frac = _to((edges - low).astype(np.float32), values.device)
    index = _to(low, values.device)
    shape = [n, 1, 1, 1]
    shape[axis] = k + 1
    expand = list(running.shape)
    expand[axis] = k + 1
    at = running.gather(axis, index.view(shape).expand(expand))
    after = running.gather(axis, (index + 1).view(shape).expand(expand))
    sums = at + frac.view(shape) * (after - at)  # the running sum at each edge
    widths = _to((edges[:, 1:] - edges[:, :-1]).astype(np.float32), values.device)
    widths_shape = list(shape)
    widths_shape[axis] = k
    first = [slice(None)] * 4
    last = [slice(None)] * 4
    first[axis], last[axis] = slice(1, None), slice(None, -1)
    return (sums[tuple(first)] - sums[tuple(last)]) / widths.view(widths_shape)


def _copy_each(targets: list, sources: list) -> None:
    for target, source in zip(targets, sources):
        target.copy_(source)


_copy = getattr(torch, "_foreach_copy_", _copy_each)
"""``targets[i].copy_(sources[i])`` for all i at once (torch >= 2.2; one at a time before)."""


def _to(array: np.ndarray, device):
    """A small host array on ``device`` (asynchronously from pinned memory on CUDA)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor
