"""CRC32C (Castagnoli), for TFRecord framing: NumPy-vectorised, byte by byte, or google-crc32c's C code."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np


_CRC32C_POLY = 0x82F63B78  # reflected


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()
_TABLE_NP = np.array(_TABLE, np.uint32)
_ROW = 32  # bytes per row of the NumPy version: many rows are advanced at once, then joined


def crc32c_python(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` continuing ``crc``: a byte at a time (for short inputs)."""
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


@functools.lru_cache(maxsize=None)
def _shift_columns(log2: int) -> tuple[int, ...]:
    """The 32 columns of the linear map that advances a raw CRC register over 2**log2 zero bytes."""
    if log2 == 0:
        return tuple(_TABLE[(1 << b) & 0xFF] ^ ((1 << b) >> 8) for b in range(32))
    half = _shift_columns(log2 - 1)

    def apply(v: int) -> int:
        out, bit = 0, 0
        while v:
            if v & 1:
                out ^= half[bit]
            v >>= 1
            bit += 1
        return out

    return tuple(apply(c) for c in half)


@functools.lru_cache(maxsize=None)
def _shift_tables(log2: int) -> np.ndarray:
    """(4, 256) uint32: the map of :func:`_shift_columns` applied to each byte of a register."""
    columns = np.array(_shift_columns(log2), np.uint32)
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)
    return np.stack([np.bitwise_xor.reduce(np.where(bits, columns[8 * k:8 * k + 8], np.uint32(0)), axis=1)
                     for k in range(4)])


def crc32c_numpy(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` continuing ``crc``, vectorised with NumPy (about 270 MB/s on one core here).

    The bytes are cut into rows of 32 (zero-padded in front, which leaves a CRC register of 0 at 0),
    every row's register is advanced together, then pairs of rows are joined (the left one advanced
    over the right one's length by a table of the linear map) until one remains. The initial value
    enters as the first four bytes XORed with it.
    """
    buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    n = len(buf)
    if n < 8 * _ROW:
        return crc32c_python(buf, crc)
    rows = -(-n // _ROW)
    padded = np.zeros(rows * _ROW, np.uint8)
    start = rows * _ROW - n
    padded[start:] = buf
    padded[start:start + 4] ^= np.frombuffer((crc ^ 0xFFFFFFFF).to_bytes(4, "little"), np.uint8)
    columns = padded.reshape(rows, _ROW).T.copy()
    state = np.zeros(rows, np.uint32)
    table = _TABLE_NP
    for j in range(_ROW):
        state = table[(state ^ columns[j]) & 0xFF] ^ (state >> 8)
    level = _ROW.bit_length() - 1
    while len(state) > 1:
        if len(state) & 1:  # a leading zero row changes nothing
            state = np.concatenate((np.zeros(1, np.uint32), state))
        left, right = state[0::2], state[1::2]
        t = _shift_tables(level)
        state = t[0][left & 0xFF] ^ t[1][(left >> 8) & 0xFF] ^ t[2][(left >> 16) & 0xFF] ^ t[3][left >> 24] ^ right
        level += 1
    return int(state[0]) ^ 0xFFFFFFFF


def _google_crc32c():
    try:
        import google_crc32c
    except ImportError:
        return None
    return google_crc32c if google_crc32c.implementation == "c" else None


_GOOGLE = _google_crc32c()
CRC32C_IMPLEMENTATION = "google-crc32c" if _GOOGLE is not None else "numpy"
"""Which CRC32C :func:`crc32c` uses: google-crc32c's C code when installed, else :func:`crc32c_numpy`."""


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing ``crc``."""
    if _GOOGLE is not None and CRC32C_IMPLEMENTATION == "google-crc32c":
        # its argument parser takes bytes and arrays but not memoryviews: an array view, no copy
        return _GOOGLE.extend(crc, data if isinstance(data, bytes) else np.frombuffer(data, np.uint8))
    if len(data) < 8 * _ROW:
        return crc32c_python(data, crc)
    return crc32c_numpy(data, crc)


def masked_crc32c(data: Any) -> int:
    """TFRecord's masked CRC32C: the CRC rotated right by 15 bits plus 0xa282ead8."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
