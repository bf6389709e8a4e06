"""Every fuzz target by name (docs/reliability.md says what each one checks)."""
from __future__ import annotations

import os
import signal
import time

from .common import Target
from .known import KNOWN
from .t_annotation import TARGETS as _ANNOTATION
from .t_config import TARGETS as _CONFIG
from .t_file import TARGETS as _FILE
from .t_image import TARGETS as _IMAGE
from .t_stores import TARGETS as _STORES

TARGETS: dict[str, Target] = {t.name: t for t in [*_FILE, *_IMAGE, *_ANNOTATION, *_CONFIG, *_STORES]}
for _name, _known in KNOWN.items():
    TARGETS[_name].known = _known


def _selftest(data: bytes) -> str:
    """The harness's own test: a case may crash its worker, hang, or fail."""
    if data == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if data == b"hang":
        time.sleep(3600)
    if data == b"fail":
        raise ValueError("a failure the harness must report")
    return "ok"


TARGETS["selftest"] = Target("selftest", "the harness itself: cases that crash, hang or fail (not a real target)",
                             lambda: [b"ok"], lambda seed, rng: rng.choice([b"ok"] * 17 + [b"crash", b"hang", b"fail"]),
                             _selftest)
