"""The HDF5 store (picpac/stores/hdf5.py) reads lazily, and checks its layout (types, lengths) at open."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from picpac import stores
from picpac.errors import CorruptError


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_hdf5_reads_lazily(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "lazy.hdf5")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, 40_000, np.uint8).tobytes() for _ in range(100)]  # 4 MB
    with stores.open_writer(path, "hdf5") as w:
        for i, image in enumerate(images):
            w.append(image=image, label=i)
    before = _read_bytes()
    reader = stores.open_reader(path, "hdf5")
    opened = _read_bytes()
    record = reader[5]
    done = _read_bytes()
    assert bytes(record["image"]) == images[5] and record.label == 5
    assert opened - before < 400_000, "opening read the field data"
    assert 40_000 <= done - opened < 400_000, "reading record 5 read other records"
    # the reader holds h5py datasets, not arrays, and they give the same element
    assert isinstance(reader.datasets["image"], h5py.Dataset)
    with h5py.File(path, "r") as f:
        assert f["fields/image"].dtype == h5py.vlen_dtype(np.uint8) and len(f["fields/image"]) == 100
        assert f["fields/image"][5].tobytes() == images[5]
    reader.close()


@pytest.fixture
def store(tmp_path) -> str:
    pytest.importorskip("h5py")
    path = str(tmp_path / "s.hdf5")
    with stores.open_writer(path, "hdf5", metadata={"classes": ["a"]}) as w:
        for i in range(4):
            w.append(image=bytes([i]) * 10, label=i, meta={"i": i})
    return path


def _set_metadata(f, value) -> None:
    f.attrs["picpac_metadata"] = value


def _replace(name: str, data):
    def change(f) -> None:
        del f[name]
        f[name] = data
    return change


def _resize(f) -> None:
    for name in ("label", "group", "meta", "fields/image", "present/image"):
        f[name].resize((10**9,))  # a shape, not data: reading the labels would take 8 GB


@pytest.mark.parametrize("change, message", [
    (lambda f: _set_metadata(f, np.arange(3)), "its picpac_metadata attribute is a ndarray, not a JSON string"),
    (lambda f: _set_metadata(f, "[" * 100_000), "its picpac_metadata attribute is not JSON (nested too deeply)"),
    (lambda f: _set_metadata(f, "[]"), "damaged picpac HDF5 layout (list indices must be integers"),
    (lambda f: _set_metadata(f, '{"fields": [7]}'), "damaged picpac HDF5 layout ("),
    (_replace("label", np.array([b"a", b"b", b"c", b"d"])),
     "dataset label holds |S1 of shape (4,), not what the picpac"),
    (_replace("fields/image", np.zeros((4, 10), np.uint8)), "dataset fields/image holds uint8 of shape (4, 10)"),
    (_replace("present/image", np.ones(3, bool)), "datasets of different lengths (present/image: 3, label: 4)"),
    (lambda f: f.__delitem__("group"), "damaged picpac HDF5 layout (\"Unable to synchronously open object"),
    (_replace("group", np.dtype("<i8")), "group is a Datatype, not a dataset"),
    (_resize, "datasets of 1,000,000,000 records in a file of"),
])
def test_damaged_layouts_are_corrupt_errors(store, change, message):
    import h5py
    with h5py.File(store, "r+") as f:
        change(f)
    with pytest.raises(CorruptError, match=re.escape(f"{store}: {message}")):
        stores.open_reader(store, "hdf5")


# -- sizes declared by a damaged or crafted file --------------------------------------------------
PER_RECORD = ("label", "group", "meta", "fields/image", "present/image")
HUGE = 2**56  # the fuzzer's shape: reading the labels whole would take 512 PiB
BIG = 2**28  # 2 GiB of labels, in a file made (sparsely) larger than the count


def _sparse_tail(path: str, size: int) -> None:
    """Make the file ``size`` bytes long with a hole past libhdf5's end of file, which it ignores: a
    count check against the file's size alone then passes."""
    with open(path, "r+b") as f:
        f.truncate(size)


def _unwritten(f, names, length, **options) -> None:
    """Each dataset replaced by one of ``length`` elements, only its first 4 written (the rest would
    read as fill values): a shape header that lies costs nothing on disk."""
    for name in names:
        old = f[name]
        dtype, values = old.dtype, old[:4]
        del f[name]
        new = f.create_dataset(name, shape=(length,), maxshape=(None,), dtype=dtype, chunks=(4096,), **options)
        new.write_direct(values, dest_sel=np.s_[0:4])


def _huge(f) -> None:
    _unwritten(f, PER_RECORD, HUGE)


def _huge_label(f) -> None:
    _unwritten(f, ["label"], HUGE)


def _resized(f) -> None:
    for name in PER_RECORD:
        f[name].resize((BIG,))


def _compressed(f) -> None:
    _unwritten(f, PER_RECORD, BIG, compression="gzip")


HUGE_CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    from picpac import stores

    def rss(key):
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))

    open("/proc/self/clear_refs", "w").write("5")  # VmHWM from here on
    before = rss("VmRSS")
    error, records = None, []
    try:
        with stores.open_reader(sys.argv[1], "hdf5") as r:
            for i in range(len(r)):
                try:
                    r[i]
                    records.append(None)
                except BaseException as exc:  # a MemoryError too: reported, not a crash
                    records.append([type(exc).__name__, str(exc)])
    except BaseException as exc:
        error = [type(exc).__name__, str(exc)]
    print(json.dumps({"error": error, "records": records, "rss_kib": before, "peak_kib": rss("VmHWM")}))
""")


def _run_child(path: str) -> dict:
    """Open the store and read every record in a child under 1 GiB of address space: what was raised, and
    how much memory the reading took (peak RSS above the RSS after the imports, KiB)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", HUGE_CHILD, path], capture_output=True, text=True, env=env,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["peak_kib"] - report["rss_kib"] < 64 << 10, report  # nothing of a declared size
    return report


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc/self/clear_refs")
@pytest.mark.parametrize("change, size, message", [
    (_huge, None, rf"datasets of {HUGE:,} records in a file of [\d,]+ bytes"),
    (_huge_label, None, rf"datasets of different lengths \(group: 4, label: {HUGE}\)"),
    (_resized, BIG + 4096, rf"dataset label declares {BIG:,} elements of 8 bytes \({8 * BIG:,} bytes\) but "
                           r"stores 32,768 bytes; a damaged shape or chunk layout"),
    (_compressed, BIG + 4096, rf"dataset label declares {BIG:,} elements of 8 bytes \({8 * BIG:,} bytes\) but "
                              r"stores \d+ bytes \(compressed: more than 1032:1\); a damaged shape or chunk layout"),
], ids=["huge", "huge-label", "resized", "compressed"])
def test_huge_declared_datasets_are_refused_before_reading(store, change, size, message):
    """A dataset whose shape claims far more elements than the file stores is a CorruptError naming the
    file and the dataset, raised before anything is read: no MemoryError, no gigabytes read as fill
    values. Before the storage check, the resized and compressed files (their count under the file's
    size) were read whole at open: MemoryError: Unable to allocate 2.00 GiB (here under 1 GiB of
    address space)."""
    import h5py
    with h5py.File(store, "r+") as f:
        change(f)
    if size is not None:
        _sparse_tail(store, size)
    report = _run_child(store)
    assert report["error"] is not None, "the damaged store opened"
    kind, text = report["error"]
    assert kind == "CorruptError", f"{kind}: {text}"
    assert re.fullmatch(re.escape(f"{store}: ") + message, text), text


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc/self/clear_refs")
@pytest.mark.parametrize("dataset", ["fields/image", "meta"])
def test_huge_element_lengths_are_refused_before_reading(store, dataset):
    """A variable-length element (a field's bytes, a meta string) is stored as a u32 length and a global
    heap ID. libhdf5 allocates and zeroes the length before it finds the heap object shorter: before the
    check, a length of 4 GiB took 4 GiB of memory per read (here, under 1 GiB of address space, a
    CorruptError about a failed allocation). Now the record is a CorruptError naming the dataset, the
    others read."""
    import h5py
    with h5py.File(store, "r") as f:
        chunk = f[dataset].id.get_chunk_info(0)
        assert chunk.filter_mask == 0 and chunk.size == 16 * f[dataset].chunks[0]
        written = len(f[dataset][2])
    with open(store, "r+b") as f:
        f.seek(chunk.byte_offset + 2 * 16)  # record 2's element: its length comes first
        assert int.from_bytes(f.read(4), "little") == written
        f.seek(chunk.byte_offset + 2 * 16)
        f.write((2**32 - 16).to_bytes(4, "little"))
    report = _run_child(store)
    assert report["error"] is None and report["records"][:2] + report["records"][3:] == [None, None, None]
    kind, text = report["records"][2]
    assert (kind, text) == ("CorruptError", f"{store}: record 2 has an element of dataset {dataset} of "
                                            f"{2**32 - 16:,} bytes in a file of {os.path.getsize(store):,} bytes")


def test_recompressed_stores_still_read(store, tmp_path):
    """The storage checks refuse lies, not HDF5's own options: a store copied with every dataset
    gzip-compressed (as ``h5repack -f GZIP`` does; with shuffle too), or contiguous,
    reads as written (the element lengths are found through those filters)."""
    import h5py
    for name, options in [("gzip", {"compression": "gzip", "chunks": (2,)}), ("contiguous", {}),
                          ("shuffled", {"compression": "gzip", "shuffle": True, "chunks": (3,)})]:
        copy = str(tmp_path / f"{name}.hdf5")
        with h5py.File(store, "r") as f, h5py.File(copy, "w") as g:
            for key, value in f.attrs.items():
                g.attrs[key] = value
            for dataset in PER_RECORD:
                g.create_dataset(dataset, data=f[dataset][:], dtype=f[dataset].dtype, **options)
        with stores.open_reader(copy, "hdf5") as r:
            assert len(r) == 4 and [bytes(rec["image"]) for rec in r] == [bytes([i]) * 10 for i in range(4)]
            assert [rec.label for rec in r] == [0, 1, 2, 3] and r[2].meta == {"i": 2}


def test_datasets_stored_outside_the_file_are_refused(store, tmp_path):
    """An external-storage dataset would read another file (any path the file names): refused."""
    import h5py
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.arange(4, dtype="<f8").tobytes())
    with h5py.File(store, "r+") as f:
        del f["label"]
        f.create_dataset("label", shape=(4,), dtype="<f8", external=[(str(outside), 0, 32)])
    with pytest.raises(CorruptError, match=re.escape(f"{store}: dataset label keeps its data outside the file")):
        stores.open_reader(store, "hdf5")
