"""Fixtures of the source layout tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import SHARED_DATA

COCO128 = SHARED_DATA / "coco128-train"


@pytest.fixture(scope="module")
def coco128() -> Path:
    """The coco128-train folder, read in place (never written: databases go to tmp_path)."""
    if not (COCO128 / "images").is_dir():
        pytest.skip(f"real test data missing: {COCO128} (shared/data/coco128-train beside the repository)")
    return COCO128
