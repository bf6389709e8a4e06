"""Byte mutations, deterministic for a given ``random.Random``: what every target's cases are made of.

``mutate(data, rng)`` applies 1 to 4 of: bit flips, byte replacements, "interesting" integers written
little- or big-endian (0, 1, -1, 2**31, 2**63, ... : the values that break counts, sizes and offsets),
truncation, insertion, deletion, duplication of a chunk, a splice of another part of the input, and
the same at 8-byte aligned positions (where picpac's index columns and slots keep their u64s).
"""
from __future__ import annotations

import random
import struct

INTERESTING = (0, 1, 2, 3, 7, 8, 12, 16, 31, 32, 33, 63, 64, 100, 112, 127, 128, 255, 256, 1000, 1024, 4095,
               4096, 32767, 32768, 65535, 65536, 2**20, 2**24 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
               2**48, 2**48 + 1, 2**53, 2**62, 2**63 - 1, 2**63, 2**64 - 1)
"""Unsigned values; each is also written as its negation (two's complement) when it fits."""

_WIDTHS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def interesting(rng: random.Random, width: int) -> int:
    bits = 8 * width
    value = rng.choice(INTERESTING)
    if rng.random() < 0.2:
        value = -value
    if rng.random() < 0.1:
        value += rng.choice((-1, 1))
    return value % (1 << bits)


def put_int(buf: bytearray, at: int, value: int, width: int, big: bool = False) -> None:
    if at < 0 or at + width > len(buf):
        return
    buf[at:at + width] = struct.pack((">" if big else "<") + _WIDTHS[width], value % (1 << 8 * width))


def _position(rng: random.Random, n: int, hot: int | None = None) -> int:
    """A position in [0, n): uniform, or (often) near the start, where every format keeps its heads."""
    if n <= 1:
        return 0
    if hot is not None and rng.random() < 0.35:
        return min(n - 1, int(rng.expovariate(1 / max(1, hot))))
    return rng.randrange(n)


def mutate_once(buf: bytearray, rng: random.Random, hot: int | None = None) -> None:
    n = len(buf)
    op = rng.randrange(12)
    if n == 0:
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return
    if op == 0:  # flip 1-8 bits
        for _ in range(rng.randint(1, 8)):
            i = _position(rng, n, hot)
            buf[i] ^= 1 << rng.randrange(8)
    elif op == 1:  # replace 1-4 bytes
        for _ in range(rng.randint(1, 4)):
            buf[_position(rng, n, hot)] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
    elif op == 2:  # an interesting integer anywhere
        width = rng.choice((1, 2, 4, 8))
        put_int(buf, _position(rng, n, hot), interesting(rng, width), width, big=rng.random() < 0.3)
    elif op == 3:  # an interesting integer at an aligned position
        width = rng.choice((2, 4, 8))
        at = _position(rng, n, hot) // width * width
        put_int(buf, at, interesting(rng, width), width, big=rng.random() < 0.3)
    elif op == 4:  # truncate
        del buf[rng.randrange(n):]
    elif op == 5:  # insert random or repeated bytes
        at = _position(rng, n + 1, hot)
        size = rng.choice((1, 2, 4, 8, rng.randint(1, 64)))
        fill = bytes(rng.randrange(256) for _ in range(size)) if rng.random() < 0.5 else bytes([rng.randrange(256)]) * size
        buf[at:at] = fill
    elif op == 6:  # delete a run
        at = _position(rng, n, hot)
        del buf[at:at + rng.choice((1, 2, 4, 8, rng.randint(1, 64)))]
    elif op == 7:  # duplicate a chunk in place
        at = _position(rng, n, hot)
        chunk = buf[at:at + rng.randint(1, 64)]
        buf[at:at] = chunk
    elif op == 8:  # copy a chunk over another place (a splice of the input with itself)
        src, dst = rng.randrange(n), _position(rng, n, hot)
        chunk = buf[src:src + rng.randint(1, 64)]
        buf[dst:dst + len(chunk)] = chunk
    elif op == 9:  # zero or 0xFF a run
        at = _position(rng, n, hot)
        size = rng.randint(1, 32)
        buf[at:at + size] = bytes([rng.choice((0, 0xFF))]) * len(buf[at:at + size])
    elif op == 10:  # an ASCII digit or JSON punctuation (text formats: JSON, PNM, tar headers)
        buf[_position(rng, n, hot)] = ord(rng.choice('0123456789-.eE{}[]",: \n\0'))
    else:  # increment or decrement a byte
        i = _position(rng, n, hot)
        buf[i] = (buf[i] + rng.choice((-1, 1, -16, 16))) % 256


def mutate(data: bytes, rng: random.Random, *, hot: int | None = None, max_ops: int = 4) -> bytes:
    """``data`` with 1 to ``max_ops`` random mutations (``hot``: bias positions to the first ~hot bytes)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        mutate_once(buf, rng, hot)
    return bytes(buf)
