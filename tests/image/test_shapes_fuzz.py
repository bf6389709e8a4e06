"""The robustness suite for annotation JSON (docs/reliability.md): PicPac shapes, mutated, through the
stream's per-sample path (detect, keypoints, segment, dense targets): a SampleError or sound targets."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzz import harness  # noqa: E402

FAST = settings(derandomize=True, database=None, deadline=None, max_examples=200,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_a_fixed_seed_run_of_mutated_annotations_keeps_the_contract():
    report = harness.run("annotation", 2000, seed=1)
    assert report.cases == 2000 and report.clean, report.summary()
    assert report.outcomes["ok"] > 100 and report.outcomes["SampleError"] > 100


NUMBER = st.floats(-2.0, 3.0) | st.integers(-3, 3)
POINT = st.fixed_dictionaries({"x": NUMBER, "y": NUMBER})
SHAPE = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["rect", "ellipse"]),
                           "geometry": st.fixed_dictionaries({"x": NUMBER, "y": NUMBER, "width": NUMBER,
                                                              "height": NUMBER})}),
    st.fixed_dictionaries({"type": st.just("polygon"), "geometry": st.fixed_dictionaries(
        {"points": st.lists(POINT, max_size=6)})}),
    st.fixed_dictionaries({"type": st.just("polygons"), "geometry": st.fixed_dictionaries(
        {"polygons": st.lists(st.lists(POINT, max_size=4), max_size=3)})}),
    st.builds(lambda p: {"type": "point", "geometry": p}, POINT),
).flatmap(lambda shape: st.fixed_dictionaries({}, optional={"label": NUMBER, "tag": st.integers(0, 9)}).map(
    lambda extra: {**shape, **extra}))


@FAST
@given(st.lists(SHAPE, max_size=6))
def test_any_well_typed_shapes_give_sound_targets(shapes):
    """Shapes of the documented types with any finite numbers (degenerate, outside the image, empty)."""
    harness.check_case("annotation", json.dumps({"shapes": shapes}).encode())


@FAST
@given(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["shapes", "type", "geometry", "label", "tag", "x", "y", "points"]), inner,
                        max_size=3), max_leaves=20))
def test_any_json_value_is_a_sample_error_or_sound(doc):
    harness.check_case("annotation", json.dumps({"shapes": doc} if not isinstance(doc, dict) else doc).encode())
