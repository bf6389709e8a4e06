"""The image layer: decoding (``decoding``, with the optional C extension ``_jpeg``), vector
annotations (``shapes``), per-sample transforms (``transforms``, ``color``, ``dense``, ``specs``)
and their whole-batch versions (``batched``).

The package itself offers the decoding functions, so ``picpac.image.decode(data)`` and
``picpac.image.REGION_DECODE`` read as they always have.
"""
from .decoding import REGION_DECODE, decode, decode_channels, encode, jpeg_header, shape_of, shrink

__all__ = ["REGION_DECODE", "decode", "decode_channels", "encode", "jpeg_header", "shape_of", "shrink"]
