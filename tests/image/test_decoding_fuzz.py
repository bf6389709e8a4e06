"""The robustness suite for image decoding (docs/reliability.md): mutated JPEGs, PNGs and every other
format OpenCV reads, through decode, decode_channels (reduced, regions) and the C extension, under a
pixel limit: None, ImageTooLargeError or an image within the limit; a region is the whole decode's."""
from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzz import harness  # noqa: E402
from fuzz.t_image import image_seeds  # noqa: E402

FAST = settings(derandomize=True, database=None, deadline=None, max_examples=200,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEEDS = image_seeds()


def test_a_fixed_seed_run_of_mutated_images_keeps_the_contract():
    report = harness.run("image", 2500, seed=1)
    assert report.cases == 2500 and report.clean, report.summary()
    assert report.outcomes["ok"] > 1000 and report.outcomes["ImageTooLargeError"] > 0


@FAST
@given(st.sampled_from([b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"GIF89a", b"II*\0", b"RIFF", b"P6", b""]),
       st.binary(max_size=300))
def test_any_bytes_after_a_magic_number(magic, rest):
    harness.check_case("image", magic + rest)


@FAST
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8))
def test_any_bytes_over_a_valid_image(seed, at, value):
    data = bytearray(SEEDS[seed])
    at %= len(data)
    data[at:at + len(value)] = value
    harness.check_case("image", bytes(data))
