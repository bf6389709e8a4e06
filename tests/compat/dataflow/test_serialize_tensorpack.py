"""Files tensorpack itself writes: its LMDBSerializer.save with its default settings (pickled values, since
tensorpack 0.10) read through picpac.dataflow.LMDBSerializer.load, only with the opt-in to unpickling."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from picpac.dataflow import LMDBSerializer
from picpac.compat.dataflow.codec import WireFormatError
from helpers import smooth_jpeg

pytest.importorskip("lmdb")
if importlib.util.find_spec("tensorpack") is None:
    pytest.skip("tensorpack is not installed (pip install tensorpack: the test extra has it)", allow_module_level=True)

# tensorpack is run in a process of its own: importing it patches msgpack for the whole process (msgpack_numpy)
WRITE = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from helpers import smooth_jpeg
from tensorpack.dataflow import DataFromList, LMDBSerializer
datapoints = [[smooth_jpeg(20 + i, 16, i), i % 3, np.arange(i, i + 4, dtype=np.float32)] for i in range(7)]
LMDBSerializer.save(DataFromList(datapoints, shuffle=False), sys.argv[1])
"""


@pytest.fixture
def tensorpack_lmdb(tmp_path) -> tuple[str, list]:
    """What tensorpack's ILSVRC example stores, [JPEG bytes, class id], with an array too: written by tensorpack's
    own LMDBSerializer.save, its default settings."""
    path = str(tmp_path / "train.lmdb")
    tests = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", WRITE, path, tests], check=True, capture_output=True, timeout=240)
    datapoints = [[smooth_jpeg(20 + i, 16, i), i % 3, np.arange(i, i + 4, dtype=np.float32)] for i in range(7)]
    return path, datapoints


def test_tensorpacks_pickles_are_refused_unless_asked_for(tensorpack_lmdb):
    path, _ = tensorpack_lmdb
    flow = LMDBSerializer.load(path, shuffle=False)
    flow.reset_state()
    with pytest.raises(WireFormatError, match=r"a pickle, as tensorpack's LMDBSerializer writes them since 0\.10; "
                                              r".*LMDBSerializer\.load\(path, unpickle=True\)"):
        next(iter(flow))


def test_with_the_opt_in_they_read_as_tensorpack_wrote_them(tensorpack_lmdb):
    path, datapoints = tensorpack_lmdb
    ours = LMDBSerializer.load(path, shuffle=False, unpickle=True)
    ours.reset_state()
    got = list(ours)
    assert len(got) == len(datapoints)
    for a, original in zip(got, datapoints):
        assert a[0] == original[0] and a[1] == original[1] and np.array_equal(a[2], original[2])
    shuffled = LMDBSerializer.load(path, shuffle=True, seed=3, unpickle=True)
    shuffled.reset_state()
    assert sorted(dp[1] for dp in shuffled) == sorted(dp[1] for dp in datapoints)
