"""What every target shares: the contract's checks, the Target record, known bugs, a scratch directory."""
from __future__ import annotations

import atexit
import os
import random
import shutil
import struct
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import picpac
from picpac.errors import PicPacError


class Violation(AssertionError):
    """The contract is broken without an exception of the library's own: wrong bytes returned where a
    checksum should have caught them, a shape or limit not kept, two read paths that disagree. ``kind``
    names the check, so that each check is its own failure signature."""

    def __init__(self, message: str, kind: str = "contract"):
        super().__init__(message)
        self.kind = kind


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, PicPacError | None]:
    """``(fn(...), None)``, or ``(None, error)`` when it raised a PicPacError; anything else propagates (a
    raw ValueError, IndexError, KeyError, MemoryError, ... is what the harness reports)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs), None
        except PicPacError as exc:
            return None, exc


def check(condition: Any, message: str, kind: str = "contract") -> None:
    if not condition:
        raise Violation(message, kind)


def float_bits(value: float) -> bytes:
    return struct.pack("<d", value)


@dataclass(frozen=True)
class Known:
    """A failure already reported and not yet fixed: tolerated by the CI tests, counted apart by the runner.

    It matches an exception of type ``error`` (by name) raised with ``where`` among the names of the
    frames of its traceback (``module.function`` of picpac's code, e.g. ``image.shapes._color``; empty:
    anywhere); a worker killed by a signal is ``error`` = the signal's name (``SIGBUS``), ``where`` = crash."""

    bug: str
    error: str
    where: str

    def matches(self, signature: str) -> bool:
        kind, _, frames = signature.partition(" at ")
        return kind == self.error and (not self.where or self.where in frames.split(" < "))


_CODE_ROOTS = tuple(os.path.dirname(os.path.realpath(path)) + os.sep
                    for path in (picpac.__file__, __file__))
"""The folders whose frames a signature names: picpac's package and this fuzz package, wherever the
checkout lies and however ``fuzz`` was imported (as a package or from its own folder)."""


def signature(exc: BaseException) -> str:
    """``Type at innermost.frame < caller < ...``: the picpac (or fuzz) frames of the traceback, innermost
    first, without line numbers, so one bug has one signature while the code around it is edited."""
    frames = []
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.realpath(frame.filename)
        root = next((root for root in _CODE_ROOTS if path.startswith(root)), None)
        if root is not None:
            module = path[len(root):].removesuffix(".py").replace(os.sep, ".")
            frames.append(f"{module}.{frame.name}")
    name = f"Violation[{exc.kind}]" if isinstance(exc, Violation) else type(exc).__name__
    return f"{name} at {' < '.join(frames[:4]) or '?'}"


@dataclass
class Target:
    """One fuzz target. ``seeds()`` gives the valid inputs (built once per process), ``mutate(seed, rng)``
    one case's bytes, ``run(data)`` checks the contract on them (raising on a violation) and returns a
    short word for the statistics (``ok`` or the PicPacError met)."""

    name: str
    doc: str
    seeds: Callable[[], list]
    mutate: Callable[[Any, random.Random], bytes]
    run: Callable[[bytes], str]
    known: tuple[Known, ...] = ()
    needs: tuple[str, ...] = ()  # optional modules; the target is skipped without them
    prepare: Callable[[list], None] | None = None  # what run() compares with, from the seeds' bytes
    _cache: list | None = field(default=None, repr=False)

    def seed_list(self) -> list:
        if self._cache is None:
            self.use_seeds(self.seeds())
        return self._cache

    def use_seeds(self, seeds: list) -> None:
        """Take these seeds (a worker gets its parent's: the cases it runs are then the ones the parent
        saves when a case crashes, byte for byte, whatever timestamps a store format writes)."""
        self._cache = list(seeds)
        if self.prepare is not None:
            self.prepare(self._cache)

    def case(self, seed: int, k: int) -> bytes:
        """Case ``k`` of run ``seed``: the same bytes on every machine and in every process."""
        rng = random.Random(f"{self.name}:{seed}:{k}")
        seeds = self.seed_list()
        return self.mutate(seeds[rng.randrange(len(seeds))], rng)

    def known_bug(self, sig: str) -> str | None:
        return next((k.bug for k in self.known if k.matches(sig)), None)

    def available(self) -> str | None:
        """None, or why the target cannot run here (an optional package is missing)."""
        for module in self.needs:
            try:
                __import__(module)
            except ImportError:
                return f"needs {module}"
        return None


_SCRATCH: str | None = None
_SCRATCH_PID = 0


def scratch() -> str:
    """A directory of this process (in /dev/shm when there is one) for the files cases are written to."""
    global _SCRATCH, _SCRATCH_PID
    if _SCRATCH is None or _SCRATCH_PID != os.getpid():
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        _SCRATCH, _SCRATCH_PID = tempfile.mkdtemp(prefix=f"picpac-fuzz-{os.getpid()}-", dir=base), os.getpid()
        atexit.register(clean_scratch)  # a worker, which ends with os._exit, cleans up itself
    return _SCRATCH


def clean_scratch() -> None:
    global _SCRATCH
    if _SCRATCH is not None and _SCRATCH_PID == os.getpid():
        shutil.rmtree(_SCRATCH, ignore_errors=True)
        _SCRATCH = None


def write(name: str, data: bytes) -> str:
    path = os.path.join(scratch(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def outcome(errors: list[PicPacError | None]) -> str:
    """The statistics word of a case: ``ok``, or the first PicPacError's type."""
    first = next((e for e in errors if e is not None), None)
    return "ok" if first is None else type(first).__name__
