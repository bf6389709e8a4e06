"""Imports of LMDB and HDF5 stores read them in a child process (picpac/stores/convert.py): a crash or an
endless loop of liblmdb or libhdf5 on a damaged store is a PicPacError naming it, and no child outlives
an error or a Ctrl-C."""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import struct
import subprocess
import sys
import time

import pytest

import picpac
from picpac import stores
from picpac.errors import CorruptError, FormatError, MissingPathError
from picpac.stores.convert import IsolatedReader

from helpers import alive, children, payload


def write_db(path, count: int = 8, size: int = 3000) -> str:
    with picpac.Writer(path, metadata={"classes": ["a", "b"]}) as w:
        for i in range(count):
            w.append(image=payload(i, size), label=i % 2, meta={"i": i})
    return str(path)


def sigbus_lmdb(tmp_path) -> str:
    """An LMDB store whose record 1 is a value on overflow pages that claims 2 GiB: liblmdb copies past the
    end of the file it mapped, and dies of SIGBUS (its page checks pass: only the node's size changed)."""
    pytest.importorskip("lmdb")
    path = str(tmp_path / "bad.lmdb")
    stores.export_store(write_db(tmp_path / "src.picpac", size=20_000), path, "lmdb")
    data = bytearray((tmp_path / "bad.lmdb" / "data.mdb").read_bytes())
    page = 4096
    for base in range(2 * page, len(data), page):
        pgno, _, flags, lower, _ = struct.unpack_from("<QHHHH", data, base)
        if pgno != base // page or not flags & 0x02:  # a leaf page
            continue
        for k in range((lower - 16) // 2):
            node = base + struct.unpack_from("<H", data, base + 16 + 2 * k)[0]
            node_flags, key_size = struct.unpack_from("<HH", data, node + 4)
            if node_flags & 0x01 and data[node + 8:node + 8 + key_size] == b"0000000001":  # F_BIGDATA
                struct.pack_into("<HH", data, node, 0xFFFF, 0x7FFF)
                (tmp_path / "bad.lmdb" / "data.mdb").write_bytes(data)
                return path
    raise AssertionError("no overflow node for record 1")


def looping_hdf5(tmp_path) -> str:
    """An HDF5 store whose global heap's first object claims 2**64 - 16 bytes: libhdf5 loops forever
    reading record 0 (it neither crashes nor reports it)."""
    pytest.importorskip("h5py")
    path = tmp_path / "loop.hdf5"
    stores.export_store(write_db(tmp_path / "src.picpac"), path, "hdf5")
    data = bytearray(path.read_bytes())
    collection = data.index(b"GCOL")
    struct.pack_into("<Q", data, collection + 24, 2**64 - 16)  # object 1: index, references, reserved, size
    path.write_bytes(data)
    return str(path)


IMPORT = """
import sys
from picpac import stores
try:
    stores.import_store(sys.argv[1], sys.argv[2], sys.argv[3])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def import_in_python(src: str, db: str, kind: str) -> str:
    """What import_store raises, from a separate interpreter (the test run survives a regression)."""
    done = subprocess.run([sys.executable, "-c", IMPORT, src, db, kind], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_lmdb_store_that_crashes_liblmdb_is_a_corrupt_error(tmp_path):
    src, db = sigbus_lmdb(tmp_path), str(tmp_path / "db.picpac")
    pid = os.fork()  # the crash itself, in a process of its own: an in-process read dies of SIGBUS
    if pid == 0:
        try:
            faulthandler.disable()  # no dump of pytest's stack
            with stores.open_reader(src, "lmdb") as r:
                r[1]
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] & 0x7F == signal.SIGBUS
    assert import_in_python(src, db, "lmdb") == (f"CorruptError {src}: the process reading this lmdb store died of "
                                                 "SIGBUS in liblmdb: the store is damaged or truncated")
    assert not os.path.exists(db) and [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")] == []


def test_the_cli_reports_a_crash_in_one_line(tmp_path):
    src = sigbus_lmdb(tmp_path)
    done = subprocess.run(["picpac", "import", "--from", "lmdb", src, str(tmp_path / "db")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"picpac: error: {src}: the process reading this lmdb store died of SIGBUS "
                                        "in liblmdb: the store is damaged or truncated"]


def test_a_store_that_makes_libhdf5_loop_is_stopped(tmp_path):
    src = looping_hdf5(tmp_path)
    before = children()  # e.g. a forkserver that earlier tests started
    start = time.monotonic()
    with pytest.raises(CorruptError, match=re.escape(f"{src}: the process reading this hdf5 store sent nothing "
                                                     "for 2 s")):
        with IsolatedReader(src, "hdf5", stall=2) as reader:
            assert len(reader) == 8
            list(reader)
    assert time.monotonic() - start < 30
    assert children() == before


def test_records_and_errors_come_back_as_they_were(tmp_path):
    pytest.importorskip("lmdb")
    before = children()
    db = write_db(tmp_path / "src.picpac")
    src = str(tmp_path / "s.lmdb")
    stores.export_store(db, src, "lmdb")
    with picpac.Reader(db) as a, IsolatedReader(src, "lmdb") as b, stores.open_reader(src, "lmdb") as c:
        assert b.metadata == c.metadata and len(b) == len(a)
        assert [(bytes(x["image"]), x.label, x.meta, x.index) for x in a] == \
            [(bytes(y["image"]), y.label, y.meta, y.index) for y in b]
    with pytest.raises(MissingPathError, match=re.escape(str(tmp_path / "none.lmdb"))):
        IsolatedReader(tmp_path / "none.lmdb", "lmdb")
    (tmp_path / "junk.hdf5").write_bytes(b"junk" * 100)
    with pytest.raises(FormatError, match=re.escape(f"{tmp_path / 'junk.hdf5'}: not an HDF5 file")):
        IsolatedReader(tmp_path / "junk.hdf5", "hdf5")
    data = bytearray((tmp_path / "s.lmdb" / "data.mdb").read_bytes())
    at = data.index(payload(5, 3000)[:64])
    data[at] ^= 1  # record 5 fails its CRC32 in the child: the same error, record number included
    (tmp_path / "s.lmdb" / "data.mdb").write_bytes(data)
    with pytest.raises(CorruptError, match=re.escape(f"{src}: record 5 fails its CRC32")) as caught:
        with IsolatedReader(src, "lmdb") as reader:
            list(reader)
    assert (caught.value.path, caught.value.index) == (src, 5)
    assert children() == before


def test_ctrl_c_stops_the_reading_child(tmp_path):
    src = looping_hdf5(tmp_path)
    cli = subprocess.Popen(["picpac", "import", "--from", "hdf5", src, str(tmp_path / "db")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not found and time.monotonic() < deadline:
            time.sleep(0.05)
            found = children(cli.pid)
        assert len(found) == 1
        time.sleep(0.5)  # the child is in libhdf5's loop by now
        os.kill(cli.pid, signal.SIGINT)
        _, stderr = cli.communicate(timeout=30)
        assert cli.returncode == 1 and "Aborted!" in stderr
        deadline = time.monotonic() + 5
        while any(map(alive, found)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(alive, found))
    finally:  # nothing left spinning if this fails
        for pid in [cli.pid, *found]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        cli.communicate()
    assert not (tmp_path / "db").exists() and [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")] == []
