"""The sources layer: turn an import source (a folder layout, a list file, a CSV, a COCO JSON file,
YOLO labels) into items.

This layer parses layouts only; it never opens an image, so a missing image file is not an error
here (the importer skips it). A malformed layout raises :class:`SourceError` naming the file, the
line and the fix. docs/import.md describes every format. One module per layout:

* ``folders``: a plain folder of images (dir), class folders (classdirs, imagefolder);
* ``lists``: PicPac's list files (list, annolist, masklist);
* ``csv``: CSV files with a header;
* ``coco``: COCO JSON files (instances and panoptic);
* ``yolo``: YOLO and YOLO-seg label files, class-name files (a dataset YAML or one name a line);
* ``masks``: mask folders (maskdir);
* ``base``: what they share (:class:`SourceItem`, :class:`Listing`, the PicPac JSON shapes);
* ``dispatch``: :func:`scan`, which reads a source as the format it names or detects it (auto).
"""
from __future__ import annotations

from .base import FORMATS, IMAGE_EXTENSIONS, Listing, SourceItem, centres_to_continuous
from .dispatch import scan

__all__ = ["FORMATS", "IMAGE_EXTENSIONS", "Listing", "SourceItem", "centres_to_continuous", "scan"]
