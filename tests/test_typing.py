"""The package's types (picpac/py.typed): mypy, with the project's config (pyproject.toml [tool.mypy]), finds no
error in the public API's modules and in a typed user program (tests/typecheck/user_program.py), which also runs;
and it does report a user's mistakes against the public signatures. CI runs the checker through this test, with
the mypy of .ci/constraints.txt."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (the test extra has it)")

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "typecheck" / "user_program.py"
PUBLIC = ["picpac/__init__.py", "picpac/file/reader.py", "picpac/file/writer.py", "picpac/stream/config.py",
          "picpac/stream/image_stream.py", "picpac/adapters"]
MISTAKES = textwrap.dedent("""\
    from picpac import ImageStream, Reader, Writer

    def mistakes(path: str) -> None:
        stream = ImageStream(path, batch=4)
        stream.set_epoch("3")
        with Writer(path) as writer:
            writer.append(image=b"", group="first")
        reader = Reader(path)
        record = reader.read(0)
        count: str = len(reader)
        reader.label_of(0)
""")
EXPECTED = [(5, "arg-type", 'Argument 1 to "set_epoch" of "ImageStream" has incompatible type "str"; expected "int"'),
            (7, "arg-type", 'Argument "group" to "append" of "Writer" has incompatible type "str"; '
                            'expected "int | None"'),
            (9, "call-arg", 'Missing positional argument "check" in call to "read" of "Reader"'),
            (10, "assignment", 'Incompatible types in assignment (expression has type "int", variable has type "str")'),
            (11, "attr-defined", '"Reader" has no attribute "label_of"')]


@pytest.fixture(scope="module")
def mypy(tmp_path_factory):
    """Runs mypy with the project's config on the given files (one cache for the module's runs)."""
    cache = tmp_path_factory.mktemp("mypy_cache")

    def run(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               "--cache-dir", str(cache), "--no-color-output", "--show-error-codes", *files],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    return run


def test_the_package_is_marked_typed():
    assert (ROOT / "picpac" / "py.typed").is_file()


def test_the_config_checks_the_public_api():
    import tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["mypy"]["files"] == PUBLIC
    assert config["tool"]["setuptools"]["package-data"]["picpac"] == ["py.typed"]


def test_the_public_api_and_a_typed_user_program_check(mypy):
    run = mypy(*PUBLIC, str(PROGRAM.relative_to(ROOT)))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("Success: no issues found"), run.stdout + run.stderr


def test_the_typed_user_program_runs(tmp_path):
    run = subprocess.run([sys.executable, str(PROGRAM)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the typed user program ran" in run.stdout


def test_mistakes_against_the_public_signatures_are_reported(mypy, tmp_path):
    program = tmp_path / "mistakes.py"
    program.write_text(MISTAKES)
    run = mypy(str(program))
    assert run.returncode == 1, run.stdout + run.stderr
    found = [(int(m[1]), m[3], m[2]) for m in re.finditer(r"mistakes\.py:(\d+): error: (.*)  \[([a-z-]+)\]$",
                                                            run.stdout, re.M)]
    assert found == EXPECTED, run.stdout + run.stderr
