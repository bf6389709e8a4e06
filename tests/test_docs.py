"""Every ```python block in docs/*.md and README.md runs: each page as one script, in a temp dir.

A block that needs an optional package says so in a comment, ``<!-- needs: torch -->`` (several:
``<!-- needs: tensorflow, keras -->``). The comment needs them for the ```python block right after it
(only blank lines between), or else for its section: the rest of the part of the page under the heading
above it, up to the next heading of the same or a higher level (above every heading, or under the
page's ``#`` title: the whole page). Blocks whose packages are missing are left out; the others still
run, and the page is then reported skipped, naming what is missing."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]
NEEDS = re.compile(r"<!-- needs: ([\w., ]+) -->")
HEADING = re.compile(r"^(#{1,6}) ")
FENCE = "```"


def blocks_of(page: Path) -> list[tuple[str, frozenset[str]]]:
    """The page's ```python blocks in order, each with the packages it needs."""
    lines = page.read_text().splitlines()
    sections: list[tuple[int, set[str]]] = []  # (heading level it was given under, packages); 0: the page
    level = 0
    block_needs: set[str] = set()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            sections = [(at, needs) for at, needs in sections if at < level]
            block_needs = set()
        elif line.startswith(f"{FENCE}python"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(FENCE)), len(lines))
            needs = set(block_needs).union(*(needs for _, needs in sections))
            out.append(("\n".join(lines[i + 1:end]) + "\n", frozenset(needs)))
            block_needs = set()
            i = end
        elif line.startswith(FENCE):  # another language's block: skip it whole
            i = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(FENCE)), len(lines))
        else:
            for match in NEEDS.finditer(line):
                names = set(match.group(1).replace(",", " ").split())
                after = next((other for other in lines[i + 1:] if other.strip()), "")
                if after.startswith(f"{FENCE}python"):
                    block_needs |= names
                else:
                    sections.append((level if level > 1 else 0, names))
        i += 1
    return out


def test_markers_apply_to_their_block_or_section(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n<!-- needs: a -->\n\n```python\n1\n```\n\n## One\n\n<!-- needs: b, c -->\n\nText.\n\n"
                    "```python\n2\n```\n\n### Sub\n\n```python\n3\n```\n\n<!-- needs: d -->\n```python\n4\n```\n\n"
                    "```sh\n<!-- needs: e -->\n```\n\n## Two\n\n```python\n5\n```\n")
    assert [(code.strip(), sorted(needs)) for code, needs in blocks_of(page)] == [
        ("1", ["a"]), ("2", ["b", "c"]), ("3", ["b", "c"]), ("4", ["b", "c", "d"]), ("5", [])]
    page.write_text("# Title\n\n<!-- needs: a -->\n\nText.\n\n## One\n\n```python\n1\n```\n")
    assert [sorted(needs) for _, needs in blocks_of(page)] == [["a"]]  # under the title: the whole page


@pytest.mark.parametrize("page", [p for p in PAGES if blocks_of(p)], ids=lambda p: p.name)
def test_doc_examples_run(page, tmp_path):
    blocks = blocks_of(page)
    missing = {name for _, needs in blocks for name in needs if importlib.util.find_spec(name) is None}
    runnable = [code for code, needs in blocks if not needs & missing]
    if not runnable:
        pytest.skip(f"{page.name} needs {', '.join(sorted(missing))}, {_not_installed(missing)}")
    script = tmp_path / f"{page.stem}.py"
    script.write_text("\n".join(runnable))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{page.name} examples failed:\n{proc.stderr}"
    if missing:
        pytest.skip(f"{page.name}: ran {len(runnable)} of {len(blocks)} examples; the others need "
                    f"{', '.join(sorted(missing))}, {_not_installed(missing)}")


def _not_installed(missing: set[str]) -> str:
    return "which is not installed" if len(missing) == 1 else "which are not installed"
