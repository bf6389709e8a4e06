"""picpac/_version.py: the one version, as the package, the installed metadata, a written file and the CLI
report it."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

import picpac
from picpac._version import __version__


def test_the_package_and_its_installed_metadata_report_the_one_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", __version__)
    assert picpac.__version__ is __version__
    assert importlib.metadata.version("picpac") == __version__


def test_a_written_file_and_the_cli_carry_it(tmp_path):
    path = tmp_path / "v.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"x", label=0)
    with picpac.Reader(path) as r:
        assert r.metadata["created"]["by"] == f"picpac {__version__}"
    out = subprocess.run([sys.executable, "-c", "from picpac.tools.cli import main; main()", "--version"],
                         capture_output=True, text=True)
    assert out.stdout.startswith(f"picpac, version {__version__}\n"), out
