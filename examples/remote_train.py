"""Process 2 of 2: train on batches that another process augments (``examples/remote_augment.py``).

``RemoteDataZMQ`` binds the address and receives the sender's batches (pickle-free ``'arrays'``
format: uint8 images, int64 labels, pad). ``DevicePrefetcher``, which takes any iterable of batch
tuples, turns them into torch tensors on the device, converting and normalising the images there,
the next batch copied while the current step runs. A few SGD steps follow::

    python examples/remote_train.py  --addr tcp://127.0.0.1:5555 --steps 8 &
    python examples/remote_augment.py --addr tcp://127.0.0.1:5555 --epochs 2

``--steps`` is the number of batches to train on; the sender's ``--epochs`` times its batches per
pass (4 for the demo database) should cover it, or the receiver raises ``RemoteTimeout`` after
``--timeout`` seconds without a batch. ``--dump FILE.npz`` saves the batches as received (the test
compares them with the stream's).
"""
from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np
import torch

from picpac.adapters.torch import DevicePrefetcher
from picpac.dataflow import RemoteDataZMQ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addr", default="tcp://127.0.0.1:5555", help="the ZMQ endpoint to bind")
    ap.add_argument("--steps", type=int, default=8, help="batches to train on")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a batch")
    ap.add_argument("--dump", help="save the batches as received to this .npz")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, args.classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    remote = RemoteDataZMQ(args.addr, hwm=8, timeout=args.timeout)  # 'arrays' only: nothing is unpickled
    remote.reset_state()                                              # binds; the sender connects
    print(f"remote_train: listening on {remote.addresses[0]} ({device})", flush=True)
    received: list[tuple] = []

    def batches():
        # the remote flow is endless: take --steps batches, so the prefetcher never waits for one more
        for batch in itertools.islice(remote, args.steps):
            if args.dump:
                received.append(batch)
            yield batch

    prefetcher = DevicePrefetcher(batches(), device, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25],
                                  value_range="0-1")
    try:
        for step, (images, labels, pad) in enumerate(prefetcher):
            assert images.dtype == torch.float32 and labels.dtype == torch.int64
            keep = len(labels) - int(pad)                             # pad: repeats that fill the last batch
            loss = torch.nn.functional.cross_entropy(model(images[:keep]), labels[:keep])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"step {step}: images {tuple(images.shape)} loss {loss.item():.4f}", flush=True)
    finally:
        remote.close()
    if args.dump:
        np.savez(args.dump, **{f"{k}_{i}": np.asarray(item) for i, batch in enumerate(received)
                               for k, item in zip(("images", "labels", "pad"), batch)})
    print(f"remote_train: {step + 1} steps, {remote.cnt1} batches received", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
