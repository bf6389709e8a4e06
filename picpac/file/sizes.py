"""Byte sizes written for people: "500MB", "1GB" (10**9), "1GiB" (2**30), "1.5G", or an int of bytes."""
from __future__ import annotations

import re

from ..errors import PicPacValueError

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: int | str, what: str = "size") -> int:
    """Bytes from an int or a size such as "500MB", "1GB" (10**9), "1GiB" (2**30), "1.5G"; ``what`` names
    the setting in the error a bad or non-positive value raises."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, ""
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or match.group(2).lower() not in _UNITS:
            raise PicPacValueError(f"{what} {value!r} is no size: give bytes or e.g. 500MB, 1GB, 1GiB")
        number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * _UNITS[unit])
    if size < 1:
        raise PicPacValueError(f"{what} must be positive, got {value!r}")
    return size
