"""Fixtures and pytest hooks shared by every test folder; the helper functions are in helpers.py."""
from __future__ import annotations

import signal
import time
from multiprocessing import active_children, resource_tracker
from pathlib import Path

import pytest

from helpers import SHARED_DATA, S3Server, blocks, children

# A run under nohup inherits SIGHUP ignored, and every child with it: the signal tests (SIGHUP stops a command
# and cleans up) need the default disposition that a shell gives.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
# A run in the background of a shell script (`pytest &`) inherits SIGINT ignored, and so would every command it
# starts: the Ctrl-C tests need it handled, as Python handles it by default.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    return SHARED_DATA


@pytest.fixture
def clean():
    """Asserts that a test leaves no worker process and no shared-memory block behind."""
    resource_tracker.ensure_running()  # a process of its own, started once: not a leak
    before = children()
    assert blocks() == set()
    yield
    deadline = time.monotonic() + 1
    while (children() - before or active_children()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert children() - before == set() and active_children() == []
    assert blocks() == set()


@pytest.fixture(scope="module")
def s3_server():
    """An :class:`S3Server`, started; skips when moto or s3fs is not installed (pip install -e '.[test]')."""
    pytest.importorskip("moto.server", reason="needs moto[server]: pip install -e '.[test]'")
    pytest.importorskip("s3fs", reason="needs s3fs: pip install -e '.[test]'")
    server = S3Server()
    server.start()
    yield server
    server.kill()


_FRAMEWORK_ORDER = ("test_torch.py", "test_tf.py", "test_jax.py", "test_adapters_cross_framework.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The adapters' tests run last, torch's (which fork DataLoader workers) before TensorFlow's and JAX's:
    once those are imported, their threads make a fork in the test process unsafe (JAX warns so)."""
    def rank(item) -> tuple[int, int]:
        name = item.path.name
        if item.path.parent.name != "adapters":
            return (0, 0)
        return (1, _FRAMEWORK_ORDER.index(name) if name in _FRAMEWORK_ORDER else len(_FRAMEWORK_ORDER))
    items.sort(key=rank)  # stable: the order within each group stays
