"""The device executor: plans made on threads, the stage run on each group one batch ahead, in order, its errors
raised to the consumer and its threads stopped when a loop ends early."""
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from picpac.device.executor import DeviceExecutor  # noqa: E402


def raise_it(unit, exc):
    raise exc


def test_groups_reach_the_stage_in_order_and_come_back_as_its_result():
    seen = []

    def stage(plans):
        seen.append(list(plans))
        return torch.tensor(plans), None, [False] * len(plans)

    out = list(DeviceExecutor(2, stage).run(lambda u: (u * 10, None), range(7), 3, 6, raise_it))
    assert seen == [[0, 10, 20], [30, 40, 50], [60]]
    assert [d.arrays[0].tolist() for d in out] == seen and [d.items for d in out] == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_stage_error_reaches_the_consumer():
    def stage(plans):
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        list(DeviceExecutor(2, stage).run(lambda u: (u, None), range(4), 2, 4, raise_it))


def test_a_loop_left_early_stops_the_stage_thread():
    def stage(plans):
        time.sleep(0.01)
        return torch.zeros(len(plans)), None, [False] * len(plans)

    run = DeviceExecutor(2, stage, name="early").run(lambda u: (np.zeros(1), None), range(1000), 4, 8, raise_it)
    next(run)
    run.close()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("early") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("early")]
