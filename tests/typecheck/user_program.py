"""A small typed program that uses picpac as a user would: a database written with Writer and write_arrays, read
with Reader, streamed with ImageStream (its config as keys and as a StreamConfig, resumed from a state), and with
the torch adapter. tests/test_typing.py type-checks it against the package with the project's mypy config (the
``assert_type`` lines pin what the public API's annotations promise) and runs it."""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from typing import Any, assert_type

import numpy as np

import picpac
from picpac import ImageStream, Reader, Record, StreamConfig, Writer, write_arrays


def write_records(path: str, count: int) -> list[int]:
    """Records of raw bytes, labels, groups and meta; their indices."""
    indices = []
    with Writer(path, metadata={"classes": ["even", "odd"]}) as writer:
        for i in range(count):
            index = writer.append(payload=bytes([i]) * 16, label=float(i % 2), group=i // 2, meta={"i": i})
            assert_type(index, int)
            indices.append(index)
        assert_type(len(writer), int)
    return indices


def read_records(path: str) -> float:
    """The labels' sum, each record checked on the way."""
    total = 0.0
    with Reader(path) as reader:
        assert_type(reader, Reader)
        classes: list[str] = reader.classes
        assert classes == ["even", "odd"]
        labels: np.ndarray = reader.labels
        for i in range(len(reader)):
            record = reader[i]
            assert_type(record, Record)
            payload: memoryview = record["payload"]
            meta: dict[str, Any] = record.meta
            assert payload.nbytes == 16 and meta["i"] == record.index
            total += record.label
        assert total == float(labels.sum())
    return total


def stream_arrays(path: str) -> int:
    """Every sample of a database of arrays, once, in batches of 4; resumed after the first batch from a state."""
    images = np.arange(10 * 8 * 8 * 3, dtype=np.uint8).reshape(10, 8, 8, 3)
    written: int = write_arrays(path, images, labels=np.arange(10) % 2, overwrite=True)
    config = StreamConfig.from_dict({"batch": 4, "loop": False, "shuffle": False, "order": "NHWC"})
    assert_type(config, StreamConfig)
    seen = 0
    with ImageStream(path, config, dtype="uint8") as stream:
        assert_type(stream.size(), int)
        assert len(stream) == 3 and stream.size() == written
        batches = iter(stream)
        first = next(batches)
        state = stream.state_dict()
        batches.close()  # the pass's workers stop
        stream.load_state_dict(state)
        stream.set_epoch(0)  # and back to the start
        for pixels, labels, pad in stream:
            assert pixels.shape[1:] == (8, 8, 3) and len(labels) == len(pixels)
            seen += len(pixels) - pad
        assert len(first[0]) == 4
        stats: dict[str, Any] = stream.stats()
        assert stats["path"] == "batch"
    return seen


def torch_epoch(path: str) -> int:
    """One epoch of the arrays through the torch adapter: the samples it gave."""
    from picpac.adapters.torch import TorchLoader

    loader = TorchLoader(path, batch=5, shuffle=False, dtype="uint8")
    try:
        loader.set_epoch(0)
        return sum(len(batch[1]) for batch in loader)
    finally:
        loader.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        records = os.path.join(folder, "records.picpac")
        assert write_records(records, 6) == list(range(6))
        assert read_records(records) == 3.0
        arrays = os.path.join(folder, "arrays.picpac")
        assert stream_arrays(arrays) == 10
        if importlib.util.find_spec("torch") is not None:
            assert torch_epoch(arrays) == 10
    print(f"picpac {picpac.__version__}: the typed user program ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
