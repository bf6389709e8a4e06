"""Coverage-guided runs with atheris (libFuzzer for Python), by hand:

    python fuzz/atheris_run.py TARGET [libFuzzer options] [CORPUS_DIR ...]
    python fuzz/atheris_run.py picpac-crafted -atheris_runs=100000 /tmp/corpus-picpac

picpac's Python code is instrumented (``atheris.instrument_imports``), so libFuzzer keeps the inputs
that reach new lines of the format parser, the stores' decoders, the header readers and the JSON
paths. The C extension ``picpac.image._jpeg`` and libjpeg/OpenCV are not instrumented (that needs a
clang build with ``-fsanitize=fuzzer-no-link``): the ``image`` target drives them through the
Python code around them, with libFuzzer's mutations. The target's seeds are written to the first
corpus directory (a new temp directory when none is given). An input that breaks the contract (not
a known bug) is an uncaught exception: libFuzzer saves it as ``crash-<sha1>`` and stops; replay it
with ``python fuzz/run.py TARGET --replay crash-<sha1>``. A crash of the process itself (a signal)
is saved the same way.
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["picpac"]):
    import picpac  # noqa: F401
    import picpac.stores  # noqa: F401
    import picpac.tools.verify  # noqa: F401

from fuzz.common import clean_scratch, signature  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        print(__doc__)
        print("targets:", ", ".join(TARGETS))
        sys.exit(2)
    target = TARGETS[sys.argv[1]]
    args = [sys.argv[0]] + sys.argv[2:]
    corpora = [a for a in args[1:] if not a.startswith("-")]
    if not corpora:
        corpora = [tempfile.mkdtemp(prefix=f"picpac-atheris-{target.name}-")]
        args.append(corpora[0])
    os.makedirs(corpora[0], exist_ok=True)
    if not any(a.startswith("-artifact_prefix=") for a in args):  # crash-* files beside the corpus, not in cwd
        args.insert(1, f"-artifact_prefix={os.path.abspath(corpora[0])}{os.sep}")
    for k, seed in enumerate(target.seed_list()):
        data = seed if isinstance(seed, bytes) else target.case(0, k)
        with open(os.path.join(corpora[0], f"seed-{k}"), "wb") as f:
            f.write(data)

    def one_input(data: bytes) -> None:
        try:
            target.run(data)
        except Exception as exc:
            if target.known_bug(signature(exc)) is None:
                raise

    atheris.Setup(args, one_input)
    try:
        atheris.Fuzz()
    finally:
        clean_scratch()


if __name__ == "__main__":
    main()
