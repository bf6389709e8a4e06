"""tensorpack's own LMDBs both ways: `picpac import --from lmdb --unpickle` reads what tensorpack's
LMDBSerializer.save writes (pickles: refused without the opt-in), and `picpac export --to lmdb --layout tensorpack`
writes what tensorpack's LMDBSerializer.load reads. tensorpack runs in processes of its own (its import patches
msgpack for the whole process)."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac import stores
from picpac.errors import FormatError, PicPacValueError
from helpers import run_console, smooth_jpeg

pytest.importorskip("lmdb")
if importlib.util.find_spec("tensorpack") is None:
    pytest.skip("tensorpack is not installed (pip install tensorpack: the test extra has it)", allow_module_level=True)

TESTS = str(Path(__file__).resolve().parents[1])
WRITE = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from helpers import smooth_jpeg
from tensorpack.dataflow import DataFromList, LMDBSerializer
dps = [[smooth_jpeg(20 + i, 16, i), i % 3, np.arange(i, i + 4, dtype=np.float32)] for i in range(6)]
LMDBSerializer.save(DataFromList(dps, shuffle=False), sys.argv[1])
"""
READ = """
import hashlib, json, sys
from tensorpack.dataflow import LMDBSerializer
flow = LMDBSerializer.load(sys.argv[1], shuffle=False)
flow.reset_state()
print(json.dumps([[hashlib.sha256(dp[0]).hexdigest(), dp[-1], type(dp[-1]).__name__] for dp in flow]))
"""


def tensorpack(script: str, *args: str, env: dict | None = None) -> str:
    return subprocess.run([sys.executable, "-c", script, *args], check=True, capture_output=True, text=True,
                          timeout=240, env=None if env is None else {**os.environ, **env}).stdout


def test_tensorpacks_lmdb_imports_with_the_opt_in_only(tmp_path):
    src = str(tmp_path / "train.lmdb")
    tensorpack(WRITE, src, TESTS)
    with pytest.raises(FormatError, match=r"a tensorpack LMDB .* picpac import --from lmdb --unpickle"):
        stores.import_store(src, tmp_path / "refused.picpac", "lmdb")
    assert not (tmp_path / "refused.picpac").exists()
    db = tmp_path / "train.picpac"
    stores.import_store(src, db, "lmdb", unpickle=True)
    with picpac.Reader(db) as r:
        assert len(r) == 6 and r.labels.tolist() == [i % 3 for i in range(6)] and r.fields == ["image", "field2"]
        for i in range(6):
            assert bytes(r[i]["image"]) == smooth_jpeg(20 + i, 16, i)
            assert np.array_equal(np.load(io.BytesIO(bytes(r[i]["field2"]))), np.arange(i, i + 4, dtype=np.float32))
        assert r.metadata["source"] == f"tensorpack lmdb {src}"


def test_tensorpacks_msgpack_lmdb_imports_without_the_opt_in(tmp_path):
    """tensorpack before 0.10 (or TENSORPACK_SERIALIZE=msgpack) wrote msgpack, which runs no code: no --unpickle
    asked for, and no word of pickles."""
    src = str(tmp_path / "old.lmdb")
    tensorpack(WRITE, src, TESTS, env={"TENSORPACK_SERIALIZE": "msgpack"})
    out = run_console("picpac", "import", "--from", "lmdb", src, str(tmp_path / "old.picpac"), cwd=tmp_path)
    assert out.returncode == 0 and "pickle" not in out.stdout + out.stderr
    with picpac.Reader(tmp_path / "old.picpac") as r:
        assert len(r) == 6 and r.labels.tolist() == [i % 3 for i in range(6)] and r.fields == ["image", "field2"]
        for i in range(6):
            assert bytes(r[i]["image"]) == smooth_jpeg(20 + i, 16, i)
            assert np.array_equal(np.load(io.BytesIO(bytes(r[i]["field2"]))), np.arange(i, i + 4, dtype=np.float32))


def test_an_export_in_tensorpacks_layout_reads_in_tensorpack(tmp_path):
    db = tmp_path / "a.picpac"
    with picpac.Writer(db) as w:
        for i in range(5):
            w.append(image=smooth_jpeg(30, 20, i), label=i)
    stores.export_store(db, tmp_path / "a.lmdb", "lmdb", layout="tensorpack")
    read = json.loads(tensorpack(READ, str(tmp_path / "a.lmdb")).strip().splitlines()[-1])  # (after its logs)
    assert read == [[hashlib.sha256(smooth_jpeg(30, 20, i)).hexdigest(), i, "int"] for i in range(5)]
    with pytest.raises(PicPacValueError, match="layout 'tensorpack' is an LMDB layout"):
        stores.export_store(db, tmp_path / "a.npz", "npz", layout="tensorpack")


def test_the_options_go_with_their_formats(tmp_path):
    out = run_console("picpac", "import", "--from", "npz", str(tmp_path / "x.npz"), str(tmp_path / "x.picpac"),
                      "--unpickle", cwd=tmp_path)
    assert out.returncode == 2 and "--unpickle reads tensorpack's LMDBs: it goes with --from lmdb" in out.stderr
