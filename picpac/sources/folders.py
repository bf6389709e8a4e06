"""Folder layouts: a plain folder of images (dir, label 0) and class folders, one subfolder per class
(classdirs: folders named 0..N-1; imagefolder: class names, numbered in sorted order)."""
from __future__ import annotations

import os

from ..errors import SourceError
from .base import Listing, SourceItem, is_integer, walk_images


def scan_folder(src: str, format: str) -> Listing:
    top = os.path.abspath(src)
    found = walk_images(top)
    classes = _class_folders(found)
    if format == "auto":
        # Images lying directly in the folder mean it is no class layout (they would be left out).
        if not classes or any(len(parts) == 1 for parts in found):
            format = "dir"
        else:
            format = "classdirs" if all(map(is_integer, classes)) else "imagefolder"
    source = f"{format} {top}"
    if format == "dir":
        return Listing([SourceItem(os.path.join(top, *parts)) for parts in found], None, source, top)
    if format == "classdirs":
        bad = [name for name in classes if not is_integer(name)]
        if bad:
            raise SourceError(f"{src}: format classdirs needs subfolders named 0..N-1, found {bad[0]!r}; "
                              "use -f imagefolder for class names")
        labels = {name: float(int(name)) for name in classes}
        names = None
    else:
        names = classes
        labels = {name: float(i) for i, name in enumerate(names)}
    items = [SourceItem(os.path.join(top, *parts), label=labels[parts[0]]) for parts in found if len(parts) > 1]
    return Listing(items, names, source, top)


def _class_folders(found: list[tuple[str, ...]]) -> list[str]:
    """Top-level subfolders holding images, sorted (images directly in the source folder are no class)."""
    return sorted({parts[0] for parts in found if len(parts) > 1})
