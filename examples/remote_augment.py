"""Process 1 of 2: decode and augment in this process, send the batches to a trainer over ZeroMQ.

The augmentation runs here (an ImageStream with random crops and flips, its decoding threads), and
the batches go to ``examples/remote_train.py`` (process 2, possibly on a GPU machine) through
``send_dataflow_zmq`` in the pickle-free ``'arrays'`` format: tensorpack's ZMQInput, with a picpac
stream as the DataFlow. Start the trainer first (it binds the address), then this sender (it connects)::

    python examples/remote_train.py  --addr tcp://127.0.0.1:5555 --steps 8 &
    python examples/remote_augment.py --addr tcp://127.0.0.1:5555 --epochs 2

Without ``--db`` it writes a small demo database (64 images of 4 classes) to a temporary folder.
``--addr`` is any ZMQ endpoint: ``tcp://127.0.0.1:PORT`` or ``ipc:///tmp/NAME``; keep it on loopback
unless another machine must connect.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import cv2
import numpy as np

import picpac
from picpac.dataflow import DataFromIterable, send_dataflow_zmq

BATCH = 16
SIZE = 32


def make_demo_db(path: str, n: int = 64) -> str:
    """``n`` PNG images of 40x50 in 4 classes, each a gradient that its class shifts (so crops differ)."""
    with picpac.Writer(path) as w:
        for i in range(n):
            y, x = np.mgrid[0:40, 0:50]
            image = np.stack([(x * 5 + 60 * (i % 4)) % 256, (y * 6 + i) % 256, np.full_like(x, 17 * i % 256)], -1)
            w.append(image=cv2.imencode(".png", image.astype(np.uint8))[1].tobytes(), label=i % 4)
    return path


def make_stream(db: str, seed: int = 0, batch: int = BATCH) -> picpac.ImageStream:
    """The augmenting stream: one pass per iteration (``loop=False``), uint8 NCHW images (the trainer
    normalises them on its device: a quarter of float32's bytes on the wire), int64 class ids."""
    return picpac.ImageStream(db, loop=False, batch=batch, seed=seed, shuffle=True, threads=2,
                              resize_width=SIZE, resize_height=SIZE, perturb=True, pert_hflip=True,
                              pert_angle=10, dtype="uint8", label_dtype="int64")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", help="a picpac database (default: a demo database in a temporary folder)")
    ap.add_argument("--addr", default="tcp://127.0.0.1:5555", help="the trainer's ZMQ endpoint")
    ap.add_argument("--epochs", type=int, default=2, help="passes to send (0: forever, as tensorpack's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=BATCH)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="picpac-remote-") as tmp:
        db = args.db or make_demo_db(os.path.join(tmp, "demo.picpac"))
        with make_stream(db, args.seed, args.batch) as stream:
            print(f"remote_augment: {len(stream)} batches of {args.batch} per pass to {args.addr}", flush=True)
            # an ImageStream is an iterable of batch tuples; DataFromIterable makes it a DataFlow, and each
            # pass send_dataflow_zmq asks for is one epoch of the stream (epoch 0, 1, ...)
            sent = send_dataflow_zmq(DataFromIterable(stream), args.addr, hwm=8, epochs=args.epochs or None,
                                     progress=False)
    print(f"remote_augment: sent {sent} batches", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
