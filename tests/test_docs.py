"""Every ```python block in docs/*.md and README.md runs: each page as one script, in a temp dir."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def script_of(page: Path) -> str:
    return "\n".join(BLOCK.findall(page.read_text()))


@pytest.mark.parametrize("page", [p for p in PAGES if script_of(p)], ids=lambda p: p.name)
def test_doc_examples_run(page, tmp_path):
    script = tmp_path / f"{page.stem}.py"
    script.write_text(script_of(page))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{page.name} examples failed:\n{proc.stderr}"
