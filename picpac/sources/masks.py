"""Mask folders (maskdir): each image with the mask of the same name stem at the same place in a
second folder."""
from __future__ import annotations

import os

from ..errors import SourceError
from .base import SourceItem, walk_images


def match_masks(top: str, found: list[tuple[str, ...]], masks: str) -> list[SourceItem]:
    """Each image with the mask of the same stem (any image extension) at the same place under ``masks``.

    An image without a mask gets the path ``<stem>.png`` that does not exist: the importer skips it
    and lists it as missing its mask.
    """
    by_stem: dict[tuple[str, ...], tuple[str, ...]] = {}
    for parts in walk_images(masks):
        key = parts[:-1] + (os.path.splitext(parts[-1])[0],)
        if key in by_stem:
            raise SourceError(f"{masks}: masks {os.path.join(*by_stem[key])} and {os.path.join(*parts)} have "
                              "the same name stem; keep one mask per image")
        by_stem[key] = parts
    items = []
    for parts in found:
        key = parts[:-1] + (os.path.splitext(parts[-1])[0],)
        mask = by_stem.get(key, key[:-1] + (key[-1] + ".png",))
        items.append(SourceItem(os.path.join(top, *parts), mask_path=os.path.join(masks, *mask)))
    return items
