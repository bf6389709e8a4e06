"""The robustness suite for the foreign store readers (docs/reliability.md): each format's store,
mutated (and, for TFRecord and binary, with valid checksums again), opened, read record by record and
imported: PicPacErrors only, and a record whose checksum holds is the one written. LMDB and HDF5 may
crash inside their C libraries: every case runs in a worker process, so a crash is a reported case."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzz import harness  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402

CASES = {"store-hdf5": 300, "store-lmdb": 300}  # the slower ones


@pytest.mark.parametrize("name", [name for name in TARGETS if name.startswith("store-")])
def test_a_fixed_seed_run_of_mutated_stores_keeps_the_contract(name):
    missing = TARGETS[name].available()
    if missing:
        pytest.skip(missing)
    cases = CASES.get(name, 1000)
    report = harness.run(name, cases, seed=1)
    assert report.cases == cases and report.clean, report.summary()
    assert report.outcomes["ok"] > 0 and sum(report.outcomes.values()) > cases // 2
