"""picpac/stores/mds.py: MDS shards that MosaicML Streaming's own MDSWriter wrote (tests/stores/mds/README.md),
uncompressed, zstd and gz; the columns picked; damaged and hostile shards named before anything is allocated."""
from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError, SourceError

FIXTURES = Path(__file__).with_name("mds")
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("kind", ["plain", "zstd", "gz"])
def test_reads_what_mdswriter_wrote_byte_for_byte(kind):
    if kind == "zstd":
        pytest.importorskip("zstandard", reason="zstd shards need zstandard (pip install picpac[mds])")
    with stores.open_reader(FIXTURES / kind, "mds") as r:
        assert len(r) == 5 and r.fields == ["image", "raw"] and r.classes == []
        for record, want in zip(r, EXPECTED):
            assert bytes(record["image"]) == base64.b64decode(want["image"])  # the JPEG file's own bytes
            assert bytes(record["raw"]) == base64.b64decode(want["raw"])
            assert record.label == want["label"]
            assert record.meta == {"info": want["info"], "name": want["name"], "score": want["score"]}
        assert r[3].meta["name"] == "img3" and r[0].meta["name"] == "img0"  # random access, across shards
        assert r.where(4).endswith(f"{kind}/shard.0000{4 + (kind == 'zstd')}.mds: sample 0")


def test_columns_named_by_the_options(tmp_path):
    with stores.open_reader(FIXTURES / "plain", "mds", image_column="raw", label_column="score") as r:
        assert r.fields == ["raw"] and [x.label for x in r] == [i / 4 for i in range(5)]
        assert set(r[0].meta) == {"info", "name", "label"}
    with pytest.raises(SourceError, match=r"column 'name' is encoded 'str'; picpac imports encoded images"):
        stores.open_reader(FIXTURES / "plain", "mds", image_column="name")
    with pytest.raises(SourceError, match=r"column 'info' is encoded 'json', not as a number"):
        stores.open_reader(FIXTURES / "plain", "mds", label_column="info")
    folder = copy(tmp_path)
    index = json.loads((folder / "index.json").read_text())
    for shard in index["shards"]:
        shard["column_encodings"] = ["pil", "pkl", "int", "str", "pkl", "float32"]
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(SourceError, match=r"column 'image' is encoded 'pil'; .* \(--image-column\)"):
        stores.open_reader(folder, "mds")
    for shard in index["shards"]:
        shard["column_names"][0] = "photo"
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(SourceError, match="no column holds images; picpac imports encoded images"):
        stores.open_reader(folder, "mds")


def copy(tmp_path: Path, kind: str = "plain") -> Path:
    return Path(shutil.copytree(FIXTURES / kind, tmp_path / kind))


def test_damaged_shards_are_named(tmp_path):
    folder = copy(tmp_path)
    shard = folder / "shard.00001.mds"
    data = shard.read_bytes()
    shard.write_bytes(data[:40])  # truncated
    with stores.open_reader(folder, "mds") as r:
        assert r[0].meta["name"] == "img0"
        with pytest.raises(CorruptError, match=r"shard.00001.mds: its sample offsets .* beyond its 40 bytes"):
            r[1]
    shard.write_bytes(struct.pack("<I", 7) + data[4:])  # another sample count than the index's
    with stores.open_reader(folder, "mds") as r, pytest.raises(CorruptError, match="not an MDS shard of the 1"):
        r[1]
    offsets = bytearray(data)
    offsets[8:12] = struct.pack("<I", 2**31)  # the sample's end far past the file
    shard.write_bytes(bytes(offsets))
    with stores.open_reader(folder, "mds") as r, pytest.raises(CorruptError, match="out of order or beyond"):
        r[1]
    (folder / "index.json").write_text("{}")
    with pytest.raises(FormatError, match="no `shards` list; not an MDS index"):
        stores.open_reader(folder, "mds")
    (folder / "index.json").write_text(json.dumps({"shards": [{"format": "mds"}]}))
    with pytest.raises(FormatError, match=r"shards\[0\]: not an MDS shard entry \(KeyError"):
        stores.open_reader(folder, "mds")


def test_compressed_shards_are_bounded_by_the_declared_size(tmp_path):
    folder = copy(tmp_path, "gz")
    index = json.loads((folder / "index.json").read_text())
    index["shards"][2]["raw_data"]["bytes"] = 100  # a shard that decompresses to more than declared
    (folder / "index.json").write_text(json.dumps(index))
    with stores.open_reader(folder, "mds") as r:
        assert r[1].meta["name"] == "img1"
        with pytest.raises(CorruptError, match=r"shard.00002.mds.gz: record 0 decompresses to more than the 100"):
            r[2]
    index["shards"][2]["compression"] = "br"
    (folder / "index.json").write_text(json.dumps(index))
    with stores.open_reader(folder, "mds") as r, pytest.raises(FormatError, match="compressed as 'br'"):
        r[2]


def test_zstd_shards_without_zstandard_name_the_extra():
    code = textwrap.dedent(f"""
        import sys
        sys.modules["zstandard"] = None
        from picpac import stores
        try:
            stores.open_reader({str(FIXTURES / "zstd")!r}, "mds")[1]
        except stores.MissingPackageError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == ("the mds (zstd shards) format needs the 'zstandard' package: "
                                  "pip install picpac[mds]")
