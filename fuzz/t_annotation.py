"""Target ``annotation``: PicPac annotation JSON through the stream's ``annotate='json'`` path.

A case's bytes are one record's ``annotation`` field. They go through the per-sample processor of a
stream (the code ImageStream's workers run) under one of several configs: detection with random
rotation, scaling and flips; keypoints; segmentation filled and outlined; dense targets (anchors,
keypoint maps, box features). Seeds are valid documents with every shape type (rect, ellipse,
polygon, polygons, point; labels as numbers or colours; tags); mutations edit the JSON tree (wrong
types, NaN and infinities, huge and negative numbers, missing keys, deep nesting, many shapes) or its
bytes. The contract: a SampleError (or another PicPacError), else targets of the documented shapes,
finite, and boxes within the image.
"""
from __future__ import annotations

import copy
import json
import random
import zlib
from typing import Any

import cv2
import numpy as np

from picpac.stream.config import StreamConfig
from picpac.stream.processor import LazyRng, Processor

from . import jsongen
from .common import Target, attempt, check, outcome

_P = {"x": 0.1, "y": 0.2}
SEEDS = [
    {"shapes": [{"type": "rect", "geometry": {"x": 0.1, "y": 0.2, "width": 0.3, "height": 0.4}, "label": 1}]},
    {"shapes": [
        {"type": "rect", "geometry": {"x": 0.1, "y": 0.2, "width": 0.3, "height": 0.4}, "label": 1},
        {"type": "ellipse", "geometry": {"x": 0.5, "y": 0.5, "width": 0.2, "height": 0.1}, "label": 2},
        {"type": "polygon", "geometry": {"points": [{"x": 0.1, "y": 0.1}, {"x": 0.3, "y": 0.1}, {"x": 0.2, "y": 0.3}]}},
        {"type": "polygons", "geometry": {"polygons": [[{"x": 0.6, "y": 0.6}, {"x": 0.7, "y": 0.6}, {"x": 0.7, "y": 0.7}],
                                                       [{"x": 0.1, "y": 0.8}, {"x": 0.2, "y": 0.9}, _P]]}},
        {"type": "point", "geometry": {"x": 0.9, "y": 0.9}, "label": 3, "tag": 7}]},
    {"shapes": [{"type": "point", "geometry": {"x": 0.25, "y": 0.5}, "label": 1},
                {"type": "point", "geometry": {"x": 0.75, "y": 0.5}, "label": 2, "tag": 1}]},
    {"shapes": [{"type": "polygon", "label": [255, 0, 0], "geometry": {"points": [_P, {"x": 0.9, "y": 0.2}, {"x": 0.5, "y": 0.9}]}},
                {"type": "ellipse", "label": [1, 2], "geometry": {"x": 0.0, "y": 0.0, "width": 1.0, "height": 1.0}}]},
    {"shapes": []},
]

_DENSE = [{"type": "anchors.dense.box", "downsize": 4, "upper_th": 0.7}, {"type": "box_feature", "max_boxes": 4}]
CONFIGS = [
    dict(task="detect", perturb=True, pert_angle=30.0, pert_min_scale=0.8, pert_max_scale=1.25, pert_hflip=True,
         resize_width=32, resize_height=24),
    dict(task="keypoints", perturb=True, pert_vflip=True, transforms=[{"type": "keypoints.basic", "downsize": 2,
                                                                       "classes": 3}]),
    dict(task="segment", channels=1, order="NHWC", crop_width=24, crop_height=16, perturb=True),
    dict(task="segment", anno_thickness=1, anno_color1=2.0, transforms=[{"type": "augment.rotate", "range": 45}]),
    dict(task="detect", transforms=_DENSE, max_boxes=3),
    dict(task="detect", transforms=[{"type": "anchors.dense.circle", "downsize": 2},
                                    {"type": "anchors.dense.point", "downsize": 2}]),
]

_PROCESSORS: list[tuple[dict, Processor]] = []
_IMAGES: list[bytes] = []


def _setup() -> None:
    if _PROCESSORS:
        return
    for config in CONFIGS:
        c = StreamConfig.from_dict(config)
        _PROCESSORS.append((c, Processor.of(c)))
    pixels = np.random.default_rng(3).integers(0, 256, (24, 32, 3), np.uint8)
    _IMAGES.append(cv2.imencode(".png", pixels)[1].tobytes())
    _IMAGES.append(cv2.imencode(".jpg", pixels)[1].tobytes())  # deferred decoding, regions


def annotation_seeds() -> list[bytes]:
    _setup()
    return [json.dumps(doc).encode() for doc in SEEDS]


def _nodes(tree: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _nodes(v, path + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _nodes(v, path + (i,))
    return out


def _edit(tree: Any, rng: random.Random) -> Any:
    paths = _nodes(tree)
    path = rng.choice(paths)
    if not path:
        return jsongen.value(rng) if rng.random() < 0.3 else tree
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    op = rng.randrange(7)
    if op == 0:
        parent[key] = jsongen.scalar(rng)
    elif op == 1:
        parent[key] = jsongen.value(rng)
    elif op == 2:  # a coordinate-like number
        parent[key] = rng.choice((float("nan"), float("inf"), -1e308, 1e308, -5.0, 2.0, 1e9, 0, -0.0, 2**63, 10**400 // 10**399))
    elif op == 3:
        del parent[key]
    elif op == 4 and isinstance(parent, list):  # many copies: a big document
        parent.extend(copy.deepcopy(parent[key]) for _ in range(rng.choice((1, 10, 300))))
    elif op == 5 and isinstance(parent, dict):
        parent[rng.choice(("type", "geometry", "label", "tag", "points", "polygons", "x", "width", "extra"))] = \
            rng.choice(("rect", "ellipse", "polygon", "polygons", "point", "circle", "", None, [], {}, [[]], 1))
    else:  # wrap in a list or a dict
        parent[key] = rng.choice(([parent[key]], {"x": parent[key]}, [[parent[key]]]))
    return tree


def annotation_mutate(seed: bytes, rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.6:
        tree = json.loads(seed)
        for _ in range(rng.randint(1, 3)):
            tree = _edit(tree, rng)
        return jsongen.dumps(tree)
    if r < 0.85:
        from .mutate import mutate
        return mutate(seed, rng)
    if r < 0.95:
        return jsongen.hostile_text(rng)
    return jsongen.dumps({"shapes": [jsongen.value(rng) for _ in range(rng.randint(0, 3))]})


def run_annotation(data: bytes) -> str:
    _setup()
    pick = zlib.crc32(data)
    errors = []
    for k in (pick % len(_PROCESSORS), (pick >> 8) % len(_PROCESSORS)):
        config, proc = _PROCESSORS[k]
        fields = {"image": _IMAGES[(pick >> 16) % len(_IMAGES)], "annotation": data}
        result, err = attempt(_one, proc, fields)
        errors.append(err)
        if result is None:
            continue
        size, target, dense = result
        task = config["task"]
        if task in ("detect", "keypoints"):
            width = 5 if task == "detect" else 3
            check(target.ndim == 2 and target.shape[1] == width and target.dtype == np.float32,
                  f"{task} target of shape {target.shape}", "target-shape")
            check(np.isfinite(target).all(), f"{task} target holds non-finite values: {target[:4].tolist()}",
                  "target-nonfinite")
            if task == "detect":
                w, h = size
                check((target[:, 1:] >= 0).all() and (target[:, [1, 3]] <= w).all() and (target[:, [2, 4]] <= h).all(),
                      f"boxes outside the {w}x{h} image: {target[:4].tolist()}", "boxes-outside")
        for array in dense:
            check(np.isfinite(np.asarray(array, np.float64)).all(), "a dense target holds non-finite values",
                  "dense-nonfinite")
    return outcome(errors)


def _one(proc: Processor, fields: dict) -> tuple:
    sample = proc.decode(fields, 1.0, 0, "fuzz")
    rng = LazyRng(2016, 0, 0, 0)
    sample = proc.augment(proc.settle(sample, rng), rng)
    size = sample.size
    _, target, dense = proc.output(sample)
    proc.targets([target], np.array([1.0]), [0], [dense])  # the batch's arrays, as the stream assembles them
    return size, target, dense


TARGETS = [
    Target("annotation", "annotation JSON through the stream's per-sample path (detect, keypoints, segment, dense)",
           annotation_seeds, annotation_mutate, run_annotation),
]
