"""The binary store's two files (picpac/stores/binary.py) appear together or not at all: a crash at
any step of the replace leaves the old pair, no store, or the new pair, and a reader refuses a data
file beside another store's index."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from picpac import stores
from picpac.errors import CorruptError, MissingPathError, PicPacValueError
from picpac.file import durable
from picpac.stores import binary
from picpac.stores.binary import BinaryReader, BinaryWriter, index_path, pair_steps

OLD = [b"old record %d" % i for i in range(5)]
NEW = [b"the new store's record %d" % i * 3 for i in range(3)]
STEPS = [name for name, _ in pair_steps("d", "i", "p")]


def write(path, images: list[bytes], **options) -> None:
    with BinaryWriter(path, metadata={"classes": ["x"]}, **options) as w:
        for i, image in enumerate(images):
            w.append(image=image, label=i, meta={"i": i})


def state(path) -> str:
    """'old', 'new' or 'none' (no store: MissingPathError); anything else fails the test."""
    try:
        r = BinaryReader(path)
    except MissingPathError:
        return "none"
    with r:
        images = [bytes(r[i]["image"]) for i in range(len(r))]
        assert [r[i].label for i in range(len(r))] == list(range(len(r))) and r.classes == ["x"]
    assert images in (OLD, NEW), images
    return "old" if images == OLD else "new"


def test_the_replace_steps_are_ordered_so_no_mixed_pair_can_be_seen():
    assert STEPS == ["fsync the temporaries", "remove the old data file", "fsync the directory", "rename the index",
                     "fsync the directory", "rename the data file", "fsync the directory"]
    assert [name for name, _ in pair_steps("d", "i", "p", sync=False)] == \
        ["remove the old data file", "rename the index", "rename the data file"]


@pytest.mark.parametrize("existing", [True, False])
def test_stopping_after_each_step_leaves_old_none_or_new(existing, tmp_path, monkeypatch):
    seen = []
    for done in range(len(STEPS) + 1):
        path = str(tmp_path / f"s{done}.bin")
        if existing:
            write(path, OLD)

        def stop_after(data_temp, index_temp, path, sync=True, done=done):
            def crash():
                raise KeyboardInterrupt("crash")
            return pair_steps(data_temp, index_temp, path, sync)[:done] + [("crash", crash)]

        monkeypatch.setattr(binary, "pair_steps", stop_after)
        with pytest.raises(KeyboardInterrupt):
            write(path, NEW)
        monkeypatch.undo()
        seen.append(state(path))
    removed, renamed = STEPS.index("remove the old data file") + 1, STEPS.index("rename the data file") + 1
    assert seen == [("old" if existing else "none") if done < removed else "none" if done < renamed else "new"
                    for done in range(len(STEPS) + 1)]


CHILD = textwrap.dedent("""
    import os, signal, sys
    from picpac.stores import binary
    path, kill_at = sys.argv[1], int(sys.argv[2])
    steps = binary.pair_steps

    def dying(*args, **kwargs):
        chosen = steps(*args, **kwargs)
        return chosen[:kill_at] + [("SIGKILL", lambda: os.kill(os.getpid(), signal.SIGKILL))]

    binary.pair_steps = dying
    with binary.BinaryWriter(path, metadata={"classes": ["x"]}) as w:
        for i in range(3):
            w.append(image=b"the new store's record %d" % i * 3, label=i, meta={"i": i})
""")


def test_a_process_killed_at_each_step_leaves_old_none_or_new_and_its_temps_are_collected(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    for kill_at in range(len(STEPS) + 1):
        directory = tmp_path / str(kill_at)
        directory.mkdir()
        path = str(directory / "data.bin")
        write(path, OLD)
        child = subprocess.run([sys.executable, "-c", CHILD, path, str(kill_at)], env=env, capture_output=True)
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()
        got = state(path)
        renamed_data = kill_at > STEPS.index("rename the data file")
        assert got == ("new" if renamed_data else "old" if kill_at <= 1 else "none"), (kill_at, got)
        left = sorted(set(os.listdir(directory)) - {"data.bin", "data.bin.idx"})
        assert len(left) == 2 - renamed_data - (kill_at > STEPS.index("rename the index"))
        removed = durable.remove_stale_temps(path, grace=0) + durable.remove_stale_temps(index_path(path), grace=0)
        assert sorted(os.path.basename(p) for p in removed) == left
        write(path, NEW)  # the next export puts the new pair in place
        assert state(path) == "new" and sorted(os.listdir(directory)) == ["data.bin", "data.bin.idx"]


def swapped_index(tmp_path, a: list[bytes], b: list[bytes]) -> str:
    write(tmp_path / "a.bin", a)
    write(tmp_path / "b.bin", b)
    os.replace(tmp_path / "b.bin.idx", tmp_path / "a.bin.idx")
    return str(tmp_path / "a.bin")


def test_a_data_file_beside_another_store_s_index_is_refused(tmp_path):
    path = swapped_index(tmp_path, OLD, NEW)
    with pytest.raises(CorruptError, match=re.escape(path)):
        BinaryReader(path)
    # the same number of records and the same total size, different offsets: the CRC32 tells
    path = swapped_index(tmp_path, [b"ab", b"cdef"], [b"abcd", b"ef"])
    with pytest.raises(CorruptError, match=rf"{re.escape(path)}: its index .* belongs to another store"):
        BinaryReader(path)


def test_identical_offsets_read_correctly_whichever_index(tmp_path):
    path = swapped_index(tmp_path, [b"ab", b"cd"], [b"xy", b"zw"])
    with BinaryReader(path) as r:
        assert [bytes(x["image"]) for x in r] == [b"ab", b"cd"]


def test_the_description_records_the_count_and_the_index_crc(tmp_path):
    path = str(tmp_path / "d.bin")
    write(path, NEW)
    offsets = np.load(index_path(path))
    raw = open(index_path(path), "rb").read()
    head = json.loads(open(path, "rb").read()[offsets[-1]:])
    assert head["count"] == 3 and head["index"] == {"bytes": len(raw), "crc32": zlib.crc32(raw)}
    assert head["store"] == "picpac-binary" and head["version"] == 1 and head["metadata"]["classes"] == ["x"]


def test_a_store_written_before_the_pair_check_still_reads(tmp_path):
    path = tmp_path / "legacy.bin"
    records = [stores.encode_record({"image": image}, float(i), None, b"") for i, image in enumerate(OLD)]
    description = json.dumps({"store": "picpac-binary", "version": 1, "serialisation": "PPR1",
                              "metadata": {"fields": ["image"], "classes": ["x"]}}).encode()
    path.write_bytes(b"".join(records) + description)
    with open(tmp_path / "legacy.bin.idx", "wb") as f:
        np.save(f, np.cumsum([0] + [len(r) for r in records]).astype("<i8"))
    with BinaryReader(path) as r:
        assert [bytes(x["image"]) for x in r] == OLD and r.classes == ["x"]


def test_the_index_lies_beside_the_target_of_a_linked_data_file(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink("real/data.bin", tmp_path / "link.bin")
    write(tmp_path / "link.bin", NEW)
    assert sorted(os.listdir(tmp_path / "real")) == ["data.bin", "data.bin.idx"]
    assert sorted(os.listdir(tmp_path)) == ["link.bin", "real"]
    assert state(str(tmp_path / "link.bin")) == "new"
    os.symlink("real/data.bin.idx", tmp_path / "link.bin.idx")  # both linked: the same pair
    assert state(str(tmp_path / "link.bin")) == "new"


def test_a_linked_index_is_refused(tmp_path):
    write(tmp_path / "elsewhere.bin", OLD)
    os.symlink("elsewhere.bin.idx", tmp_path / "data.bin.idx")
    with pytest.raises(PicPacValueError, match="symbolic link"):
        BinaryWriter(tmp_path / "data.bin")
    assert state(str(tmp_path / "elsewhere.bin")) == "old"
    assert sorted(os.listdir(tmp_path)) == ["data.bin.idx", "elsewhere.bin", "elsewhere.bin.idx"]
