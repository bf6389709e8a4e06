"""Fixtures of the store tests."""
from __future__ import annotations

import pytest

from store_helpers import make_db


@pytest.fixture
def db(tmp_path):
    """A picpac database of 23 records (store_helpers.make_db) to convert."""
    return make_db(tmp_path / "src.picpac")
