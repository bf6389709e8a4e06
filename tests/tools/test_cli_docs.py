"""docs/cli.md shows what the CLI really prints: every `$ command` of its examples runs, in order, in
one empty folder, and its output (stdout and stderr) must equal the lines the page shows, but for what
varies between runs: numbers (timings, sizes, rates), dates, the folders of absolute paths, whether
region decoding is built, and which stage `bench` finds to be the bound."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"^```\n(.*?)^```", re.S | re.M)


def examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of the page's plain code blocks."""
    found: list[tuple[str, list[str]]] = []
    for block in BLOCK.findall(PAGE.read_text()):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found:
                found[-1][1].append(line)
    return found


def normal(line: str) -> str:
    """``line`` with what varies between runs made the same."""
    line = re.sub(r"^created:  .*", "created:  *", line)
    line = re.sub(r"region decoding(:)? (not )?built.*", r"region decoding\1 *", line)
    line = re.sub(r"^bound by: .*", "bound by: *", line)  # which stage bounds it is a measurement
    line = re.sub(r"(?<![\w.])/\S*/", ".../", line)  # the folders of absolute paths
    line = re.sub(r"\d[\d,]*(\.\d+)?", "#", line)
    return line


def test_the_page_has_examples_of_every_command():
    commands = [command.split()[:2] for command, _ in examples()]
    for name in ("--version", "demo", "info", "verify", "repair", "bench"):
        assert ["picpac", name] in commands, name


def test_cli_md_examples_print_what_the_page_shows(tmp_path):
    if shutil.which("picpac") is None:
        pytest.skip("console script picpac not on PATH; run `pip install -e .`")
    script = []
    for i, (command, _) in enumerate(examples()):
        script += [f"echo @@{i}", f"{command} 2>&1"]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, capture_output=True, timeout=240)
    assert done.stderr == b""
    outputs = re.split(r"^@@\d+\n", done.stdout.decode(), flags=re.M)[1:]  # (bytes: keep each \r as it is)
    for (command, expected), output in zip(examples(), outputs, strict=True):
        # a progress line (bench's, ending in \r-separated updates) is overwritten on a terminal: left out
        lines = [line for line in output.rstrip("\n").split("\n") if "\r" not in line] if output else []
        assert [normal(line) for line in lines] == [normal(line) for line in expected], command
