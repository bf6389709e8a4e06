"""Fixtures of the dataflow tests; their helpers are in dataflow_helpers.py, every folder's in tests/helpers.py."""
from __future__ import annotations

import time
from multiprocessing import active_children

import pytest

from dataflow_helpers import engine_threads
from helpers import children


@pytest.fixture
def clean():
    """Asserts that a test leaves no worker process and no engine thread behind."""
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()  # a process of its own, started once: not a leak
    before = children()
    yield
    deadline = time.monotonic() + 2
    while (children() - before or active_children() or engine_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert children() - before == set() and active_children() == []
    assert engine_threads() == []
