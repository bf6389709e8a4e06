"""The robustness suite for stream configs (docs/reliability.md): random keys and values through
StreamConfig.from_dict, ImageLoader and a first ImageStream batch: PicPacTypeError / PicPacValueError, or batches."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzz import harness  # noqa: E402
from picpac.errors import PicPacTypeError, PicPacValueError  # noqa: E402
from picpac.stream.config import KEYS, LEGACY, StreamConfig  # noqa: E402

FAST = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow])


def test_a_fixed_seed_run_of_random_configs_keeps_the_contract():
    report = harness.run("config", 500, seed=1, timeout=60)
    assert report.cases == 500 and report.clean, report.summary()
    assert report.outcomes["ok"] > 100 and report.outcomes["PicPacTypeError"] > 10


VALUES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
          | st.lists(st.integers() | st.floats(), max_size=4) | st.sampled_from(["RGB", "json", "NHWC", "detect"]))


@FAST
@given(st.dictionaries(st.sampled_from(sorted(KEYS) + sorted(LEGACY) + ["threds", "x"]), VALUES, max_size=6))
def test_parse_accepts_or_names_the_key(config):
    try:
        parsed = StreamConfig.from_dict(config)
    except (PicPacTypeError, PicPacValueError) as exc:
        assert any(repr(k) in str(exc) or k in str(exc) for k in config) or "config key" in str(exc)
        return
    assert set(parsed) == set(KEYS)
    for name in ("batch", "split", "max_pixels", "onehot", "max_boxes"):
        assert isinstance(parsed[name], int) and parsed[name] >= 0
    for name in ("pert_min_scale", "pert_max_scale"):
        assert isinstance(parsed[name], float) and 0 < parsed[name] <= 16
    assert all(math.isfinite(parsed[name]) for name, value in parsed.items() if isinstance(value, float))


@pytest.mark.parametrize("key, value", [("batch", 0), ("channels", 2), ("colorspace", "XYZ"), ("threds", 2),
                                        ("pert_min_scale", 0.0), ("seed", -1), ("transforms", 5)])
def test_bad_values_are_picpac_errors(key, value):
    with pytest.raises((PicPacTypeError, PicPacValueError)):
        StreamConfig.from_dict({key: value})
