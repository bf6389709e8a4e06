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


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def children(pid: int | None = None) -> set[int]:
    """Live (non-zombie) child processes of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_stat(entry)
            if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found

