"""The robustness suite for picpac files (docs/reliability.md): mutated files, checksums kept or made valid
again, read every way the Reader offers; a fixed-seed run of each fuzz target and hypothesis properties.
Only PicPacErrors, bytes as written where the checksums hold, and the read paths agree."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import picpac  # noqa: E402
from fuzz import harness  # noqa: E402
from fuzz.common import write  # noqa: E402
from fuzz.t_file import fix_crcs  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402

FAST = settings(derandomize=True, database=None, deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEEDS = TARGETS["picpac"].seed_list()


def test_a_fixed_seed_run_of_mutated_files_keeps_the_contract():
    report = harness.run("picpac", 1500, seed=1)
    assert report.cases == 1500 and report.clean, report.summary()
    assert report.outcomes["ok"] > 0 and report.outcomes["CorruptError"] > 0  # both sides are reached


def test_a_fixed_seed_run_of_crafted_files_keeps_the_contract():
    report = harness.run("picpac-crafted", 1000, seed=1)
    assert report.cases == 1000 and report.clean, report.summary()
    assert report.outcomes["ok"] > 100 and report.outcomes["CorruptRecordError"] > 0


@FAST
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 1 << 20), st.integers(1, 255))
def test_any_one_byte_changed_reads_as_written_or_raises(seed, at, xor):
    data = bytearray(SEEDS[seed])
    data[at % len(data)] ^= xor
    harness.check_case("picpac", bytes(data))


@FAST
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 1 << 20))
def test_any_truncation_reads_as_written_or_raises(seed, at):
    harness.check_case("picpac", SEEDS[seed][:at % len(SEEDS[seed])])


@FAST
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16),
       st.sampled_from([1, 2, 4, 8]))
def test_any_value_at_a_position_with_valid_checksums_is_a_picpac_error_or_agrees(seed, at, value, width):
    data = bytearray(SEEDS[seed])
    at %= len(data)
    data[at:at + width] = value[:width].ljust(width, b"\0")
    harness.check_case("picpac-crafted", bytes(data))


def test_fix_crcs_makes_a_changed_record_read_back_changed():
    """The crafted mode's premise: with the checksums made valid again, the Reader returns the new bytes."""
    data = bytearray(SEEDS[2])  # records b"first-0", b"first-1", b"appended"
    at = bytes(data).index(b"first-1")
    data[at:at + 7] = b"FIRST-1"
    with picpac.Reader(write("fixed.picpac", fix_crcs(bytes(data)))) as r:
        assert bytes(r[1]["image"]) == b"FIRST-1" and bytes(r[2]["image"]) == b"appended"
    with picpac.Reader(write("unfixed.picpac", bytes(data))) as r:
        assert [i for i in range(len(r)) if not _reads(r, i)] == [1]


def _reads(reader: picpac.Reader, i: int) -> bool:
    try:
        reader[i]
        return True
    except picpac.CorruptRecordError:
        return False


def test_the_harness_survives_crashes_and_hangs_and_saves_their_inputs(tmp_path):
    report = harness.run("selftest", 60, seed=0, timeout=2.0, out_dir=str(tmp_path))
    assert report.cases == 60
    assert report.crashes and all(why == "killed by SIGSEGV" and Path(saved).read_bytes() == b"crash"
                                  for _, why, saved, _ in report.crashes)
    assert report.hangs and all(Path(saved).read_bytes() == b"hang" for _, saved in report.hangs)
    [failure] = report.failures.values()
    assert failure.signature == "ValueError at targets._selftest < harness._worker" and failure.saved
    assert report.outcomes["ok"] == 60 - len(report.crashes) - len(report.hangs) - failure.count
    assert not report.clean and report.peak_rss_kb > 0


def test_a_signature_names_the_same_frames_wherever_the_checkout_lies(tmp_path):
    """A checkout in a folder named ``picpac`` (as CI's clone may be) gave ``fuzz.targets._selftest``."""
    checkout = tmp_path / "picpac"
    shutil.copytree(Path(harness.__file__).parent, checkout / "fuzz", ignore=shutil.ignore_patterns("__pycache__"))
    script = ("from fuzz.common import signature\nfrom fuzz.targets import TARGETS\n"
              "try:\n    TARGETS['selftest'].run(b'fail')\nexcept ValueError as exc:\n    print(signature(exc))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=checkout, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ValueError at targets._selftest"
