"""The image layer: decoding (``decoding``, with the optional C extension ``_jpeg``, and ``headers``,
image sizes read from headers for the pixel limit), vector
annotations (``shapes``), per-sample transforms (``transforms``, ``color``, ``dense``, ``specs``)
and their whole-batch versions (``batched``).

The package itself offers the decoding functions, so ``picpac.image.decode(data)`` and
``picpac.image.REGION_DECODE`` read as they always have.
"""
from .decoding import (MAX_PIXELS, REGION_DECODE, check_pixels, check_scans, decode, decode_channels, encode, read_image,
                       shape_of, shrink)
from .headers import image_size, jpeg_frame, jpeg_header

__all__ = ["MAX_PIXELS", "REGION_DECODE", "check_pixels", "check_scans", "decode", "decode_channels", "encode", "image_size",
           "jpeg_frame", "jpeg_header", "read_image", "shape_of", "shrink"]
