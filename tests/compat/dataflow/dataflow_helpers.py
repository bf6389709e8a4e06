"""Helpers of the dataflow tests (``from dataflow_helpers import ...``); the tests of every folder share
tests/helpers.py, and this folder's fixtures are in its conftest.py."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac.dataflow import DataFlowError, DataFromList, codec

DATA, ERROR = codec.DATA, codec.ERROR


# -- small flows ------------------------------------------------------------------------------------------
def numbers(n: int, shuffle: bool = False, **kw) -> DataFromList:
    return DataFromList([[i] for i in range(n)], shuffle=shuffle, **kw)


def ready(df):
    df.reset_state()
    return df


def refuses_a_second_iterator(df) -> None:
    """While one iterator of the (reset) flow is open, a second is a DataFlowError; closing the first frees it."""
    first = iter(df)
    next(first)
    with pytest.raises(DataFlowError, match="not reentrant"):
        next(iter(df))
    first.close()


def firsts(df) -> list:
    return [dp[0] for dp in df]


def double(dp):
    return [dp[0] * 2]


def take(df, n: int) -> list:
    """The first ``n`` datapoints of one iterator of ``df`` (the iterator is left open)."""
    it = iter(df)
    return [next(it) for _ in range(n)]


def engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("picpac-")]


# -- files ----------------------------------------------------------------------------------------------
def write_png(path, rgb: np.ndarray) -> str:
    """``rgb`` (H, W, 3) written as a PNG at ``path`` (OpenCV writes BGR, so the channels are reversed)."""
    cv2.imwrite(str(path), np.ascontiguousarray(rgb[:, :, ::-1]))
    return str(path)


# -- messages of the wire format, as any peer could send them ----------------------------------------------
def head(kind: int, fmt: str = "arrays", version: int = codec.VERSION) -> bytes:
    return b"PPDF" + bytes((version, kind, len(fmt))) + fmt.encode()


def header(*specs: dict, container: str = "list") -> bytes:
    return json.dumps({"container": container, "arrays": list(specs)}).encode()


U8x4 = {"dtype": "|u1", "shape": [4]}
MALFORMED = {
    "no picpac head": [b"garbage", b"x"],
    "another version": [head(DATA, version=9), header(U8x4), bytes(4)],
    "an unknown kind": [head(7), header(U8x4), bytes(4)],
    "an unknown format": [head(DATA, "json"), b"{}"],
    "stray bytes after the head": [head(DATA) + b"junk", header(U8x4), bytes(4)],
    "no frame after the head": [head(DATA)],
    "a header that is not JSON": [head(DATA), b"{not json", bytes(4)],
    "a header nested deeply": [head(DATA), b"[" * 100_000 + b"]" * 100_000],
    "a header over the size limit": [head(DATA), b" " * (codec.MAX_HEADER_BYTES + 1)],
    "a header that is a list": [head(DATA), b"[]"],
    "a header without arrays": [head(DATA), b'{"container": "list"}'],
    "a bad container": [head(DATA), json.dumps({"container": "set", "arrays": []}).encode()],
    "fewer frames than declared": [head(DATA), header(U8x4, U8x4), bytes(4)],
    "more frames than declared": [head(DATA), header(U8x4), bytes(4), bytes(4)],
    "a frame of the wrong size": [head(DATA), header(U8x4), bytes(3)],
    "an object dtype": [head(DATA), header({"dtype": "|O", "shape": [1]}), bytes(8)],
    "a structured dtype": [head(DATA), header({"dtype": [["a", "<i4"]], "shape": [1]}), bytes(4)],
    "a dtype that is no dtype": [head(DATA), header({"dtype": "not a dtype", "shape": [1]}), bytes(1)],
    "a negative dimension": [head(DATA), header({"dtype": "|u1", "shape": [-4]}), bytes(4)],
    "a float dimension": [head(DATA), header({"dtype": "|u1", "shape": [4.0]}), bytes(4)],
    "a huge shape": [head(DATA), header({"dtype": "<f8", "shape": [2**62, 2**62, 2**62]}), bytes(8)],
    "too many dimensions": [head(DATA), header({"dtype": "|u1", "shape": [1] * 100}), bytes(1)],
    "a scalar of many values": [head(DATA), header({"dtype": "|u1", "shape": [2], "scalar": True}), bytes(2)],
    "an error that is not JSON": [head(ERROR), b"\xff\xfe"],
    "an error without its keys": [head(ERROR), b'{"type": 1}'],
    "an error with two frames": [head(ERROR), b'{}', b'{}'],
}


class RunsCode:
    """Unpickling this runs ``touch marker``: what a hostile peer sends, or a crafted file holds."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)
