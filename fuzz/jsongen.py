"""Hostile JSON values, deterministic for a ``random.Random``: for metadata, record meta, annotations."""
from __future__ import annotations

import json
import random
from typing import Any

NUMBERS = (0, 1, -1, 0.5, -0.0, 1e-300, 1e300, 2**31, 2**53 + 1, 2**63, -(2**63), 2**64, 10**30,
           float("nan"), float("inf"), float("-inf"))
STRINGS = ("", "x", "image", "annotation", "mask", "\u00e9t\u00e9", "a/b", "picpac/label", "\0", "\ud800", "1", "nan")


def scalar(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice(STRINGS)
    if kind == 2:
        return rng.choice((None, True, False))
    if kind == 3:
        return rng.uniform(-2, 2)
    if kind == 4:
        return rng.randint(-5, 70000)
    return "x" * rng.choice((0, 1, 33, 300))


def value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON-ish value (NaN and infinities included, as Python's json writes them)."""
    kind = rng.randrange(8)
    if depth > 3 or kind < 4:
        return scalar(rng)
    if kind < 6:
        return [value(rng, depth + 1) for _ in range(rng.choice((0, 1, 2, 3, 5)))]
    return {rng.choice(STRINGS + ("shapes", "type", "geometry", "label")): value(rng, depth + 1)
            for _ in range(rng.choice((0, 1, 2, 3)))}


def dumps(obj: Any) -> bytes:
    try:
        return json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError):
        return b"null"


def hostile_text(rng: random.Random) -> bytes:
    """JSON text that breaks parsers: deep nesting, huge integers, bad UTF-8, truncation, NaN, duplicates."""
    kind = rng.randrange(9)
    if kind == 0:
        depth = rng.choice((50, 999, 1000, 5000, 100_000))
        return b"[" * depth + b"]" * (depth if rng.random() < 0.5 else 0)
    if kind == 1:
        depth = rng.choice((100, 3000, 50_000))
        return b'{"a":' * depth + b"1" + b"}" * depth
    if kind == 2:
        return b"1" * rng.choice((4300, 4301, 5000, 100_000))
    if kind == 3:
        return rng.choice((b"\xff\xfe\xfa", b'{"a": "\xc3"}', b'"\\ud800"', b"\xef\xbb\xbf{}"))
    if kind == 4:
        return rng.choice((b"NaN", b"Infinity", b"-Infinity", b"[NaN]", b'{"fields": NaN}'))
    if kind == 5:
        return b'{"a": 1, "a": 2}'
    if kind == 6:
        return rng.choice((b"", b" ", b"{", b"[", b'"', b"nul", b"{}", b"[]", b"0", b'""', b"null"))
    if kind == 7:
        return dumps(value(rng))
    return b"1e" + b"9" * rng.choice((3, 400, 5000))
