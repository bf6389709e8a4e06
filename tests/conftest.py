from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def payload(i: int, size: int | None = None) -> bytes:
    """Deterministic, distinct bytes for record ``i`` (sizes vary with i unless given)."""
    size = 17 + (i * 37) % 300 if size is None else size
    block = hashlib.sha256(str(i).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    return SHARED_DATA


def children(pid: int | None = None) -> set[int]:
    """Live (non-zombie) child processes of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found

