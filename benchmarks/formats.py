"""Storage formats compared on real JPEGs (issue 6 item 5): picpac, LMDB, TFRecord, HDF5, npz, SQLite,
WebDataset tar, binary + index, Parquet (as Hugging Face's datasets writes it; issue 39) and a folder of files.

Data: ../shared/data/imagenet-250 (250 ImageNet JPEGs, about 110 KB each), repeated --copies times (the
same bytes; labels from labels.tsv). Every store holds the JPEG bytes, the label and a small meta
{"path": ...}; the folder holds one file per image plus labels.tsv.

For each format, --repeats times, interleaved (every format once per round; medians reported):
  * write: from the JPEG bytes in memory to a finished store, no fsync for any format (picpac's Writer
    with sync=False; picpac.stores writers with sync=False; the folder's files written with open/write)
  * open: open the store (readers that index their file scan it here: tfrecord, tar)
  * sequential read: read every record's image in order, as bytes (the store just opened); Parquet by
    iterating its reader (record batches of 16 rows, as picpac import reads it), the others by index
  * random read: every record once in a random order (the store already open), image as bytes; Parquet
    reads the row group (100 rows) that holds the record, keeping the last one
Reads find the files in the page cache (warm, as after a first epoch). Readers check what their format
checksums (picpac, lmdb and binary: CRC32 per record; tfrecord: CRC32C of every record, with NumPy, and
with google-crc32c's C code when that is installed); the rows "no check" read without it.
  * fork OK: the store opened and read in the parent, then 2 forked processes (multiprocessing "fork"
    pool) read every record; the SHA-1 of each image must equal the parent's.

    python benchmarks/formats.py [--copies 4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import picpac
from picpac import stores
from picpac.stores import checksums

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "imagenet-250")


def load(copies: int) -> tuple[list[tuple[bytes, int, str]], list[str]]:
    labels = {}
    with open(os.path.join(DATA, "labels.tsv")) as f:
        next(f)
        for line in f:
            name, index, _ = line.rstrip("\n").split("\t")
            labels[name] = int(index)
    names = sorted(labels)
    images = [(open(os.path.join(DATA, n), "rb").read(), labels[n], n) for n in names]
    return [(data, label, f"{c}/{name}") for c in range(copies) for data, label, name in images], names


# -- contenders: write(records, path), open(path) -> reader, get(reader, i) -> bytes, close(reader) --------
class Picpac:
    kind = None

    def __init__(self, check=True):
        self.check = check
        self.name = "picpac" if check else "picpac, no check"

    def write(self, records, path):
        with picpac.Writer(path, sync=False) as w:
            for data, label, name in records:
                w.append(image=data, label=label, meta={"path": name})

    def open(self, path):
        return picpac.Reader(path, check=self.check)

    def get(self, reader, i):
        return bytes(reader[i]["image"])

    def scan(self, reader, n):
        """Every image in order: the sequential read."""
        return (self.get(reader, i) for i in range(n))

    def close(self, reader):
        reader.close()

    def size(self, path):
        return os.path.getsize(path)


class Store(Picpac):
    def __init__(self, kind, check=True, crc=None):
        self.kind, self.check, self.crc = kind, check, crc
        self.name = kind if check else f"{kind}, no check"
        if crc:
            self.name += f", {crc} CRC32C" if crc == "numpy" else f", {crc}"

    def _crc(self):
        if self.crc:
            checksums.CRC32C_IMPLEMENTATION = self.crc

    def write(self, records, path):
        self._crc()
        with stores.WRITERS[self.kind](path, sync=False) as w:
            for data, label, name in records:
                w.append(image=data, label=label, meta={"path": name})

    def open(self, path):
        self._crc()
        return stores.open_reader(path, self.kind, check=self.check)

    def size(self, path):
        return stores.store_size(path, self.kind)

    def scan(self, reader, n):
        if self.kind != "parquet":
            return super().scan(reader, n)
        return (bytes(record["image"]) for record in reader)  # streamed record batches


class Folder(Picpac):
    name, kind = "folder of files", "folder"

    def __init__(self):
        pass

    def write(self, records, path):
        os.mkdir(path)
        with open(os.path.join(path, "labels.tsv"), "w") as index:
            for i, (data, label, name) in enumerate(records):
                with open(os.path.join(path, "%06d.jpg" % i), "wb") as f:
                    f.write(data)
                index.write(f"{i:06d}.jpg\t{label}\n")

    def open(self, path):
        with open(os.path.join(path, "labels.tsv")) as f:
            return [os.path.join(path, line.split("\t", 1)[0]) for line in f]

    def get(self, reader, i):
        with open(reader[i], "rb") as f:
            return f.read()

    def close(self, reader):
        pass

    def size(self, path):
        return stores.store_size(path)


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)
    if os.path.exists(path + ".idx"):
        os.unlink(path + ".idx")


_FORK = None


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        print(f"{module} is not installed: its format is left out", file=sys.stderr)
        return False
    return True


def _forked(i):
    contender, reader = _FORK
    return hashlib.sha1(contender.get(reader, i)).digest()


def fork_ok(contender, path, count) -> str:
    global _FORK
    reader = contender.open(path)
    try:
        expected = [hashlib.sha1(contender.get(reader, i)).digest() for i in range(count)]
        _FORK = (contender, reader)
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.map(_forked, range(count), chunksize=16)
        return "yes" if got == expected else "no (other bytes)"
    except Exception as exc:  # reported in the table
        return f"no ({type(exc).__name__})"
    finally:
        _FORK = None
        contender.close(reader)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=4, help="times the 250 images are repeated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not os.path.isdir(DATA):
        print(f"imagenet-250 not found at {DATA}", file=sys.stderr)
        return 2
    records, _ = load(args.copies)
    n = len(records)
    raw = sum(len(d) for d, _, _ in records)
    google = checksums.CRC32C_IMPLEMENTATION == "google-crc32c"  # installed: compare with the NumPy CRC32C
    tfrecord = [Store("tfrecord", crc="numpy"), Store("tfrecord", crc="google-crc32c")] if google else \
        [Store("tfrecord", crc="numpy")]
    contenders = [Picpac(), *(Store(kind) for kind in stores.KINDS if kind != "tfrecord"), *tfrecord,
                  *([Store("parquet")] if _has("pyarrow") else []), Folder()]
    readers_only = [Picpac(check=False), Store("tfrecord", check=False)]
    results = {c.name: {"write": [], "open": [], "seq": [], "rand": []} for c in contenders + readers_only}
    order = np.random.default_rng(0).permutation(n)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as tmp:
        paths = {c.name: os.path.join(tmp, c.name.replace(" ", "_")) for c in contenders}
        for c in readers_only:  # they read the store of the first contender of their kind
            paths[c.name] = next(paths[x.name] for x in contenders if x.kind == c.kind)
        for _ in range(args.repeats):
            for c in contenders + readers_only:
                path = paths[c.name]
                if c in contenders:
                    _remove(path)
                    t = time.perf_counter()
                    c.write(records, path)
                    results[c.name]["write"].append(time.perf_counter() - t)
                t = time.perf_counter()
                reader = c.open(path)
                opened = time.perf_counter()
                total = sum(len(image) for image in c.scan(reader, n))
                results[c.name]["open"].append(opened - t)
                results[c.name]["seq"].append(time.perf_counter() - opened)
                c.close(reader)
                assert total == raw, c.name
                reader = c.open(path)
                t = time.perf_counter()
                for i in order.tolist():
                    c.get(reader, i)
                results[c.name]["rand"].append(time.perf_counter() - t)
                c.close(reader)
        sizes = {c.name: c.size(paths[c.name]) for c in contenders + readers_only}
        forks = {c.name: fork_ok(c, paths[c.name], n) for c in contenders + readers_only}
    print(f"imagenet-250 x {args.copies}: {n} JPEGs, {raw:,} bytes; median of {args.repeats} interleaved rounds, "
          f"warm page cache; CRC32C: {checksums.CRC32C_IMPLEMENTATION}")
    head = (f"{'format':<32}{'size vs raw':>12}{'write s':>8}{'write MB/s':>11}{'open ms':>8}{'seq MB/s':>9}"
            f"{'seq rec/s':>10}{'random rec/s':>13}  fork OK")
    print(head)
    print("-" * len(head))
    for c in contenders + readers_only:
        r = results[c.name]
        write = statistics.median(r["write"]) if r["write"] else None
        seq, rand, opening = statistics.median(r["seq"]), statistics.median(r["rand"]), statistics.median(r["open"])
        write_cells = f"{write:>8.2f}{raw / write / 1e6:>11.0f}" if write else f"{'':>8}{'':>11}"
        print(f"{c.name:<32}{sizes[c.name] / raw:>11.4f}x{write_cells}{opening * 1e3:>8.1f}{raw / seq / 1e6:>9.0f}"
              f"{n / seq:>10,.0f}{n / rand:>13,.0f}  {forks[c.name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
