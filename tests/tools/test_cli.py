"""The `picpac` command line: help, version, demo, and one-line errors for files it cannot read."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.tools.demo import CLASSES, run_demo
from picpac.tools.info import describe


DOCS = Path(__file__).resolve().parents[2] / "docs"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *args], capture_output=True, text=True)


def test_console_scripts_are_installed():
    assert shutil.which("picpac") and shutil.which("picpac-import")


def test_help_lists_the_commands():
    result = run_cli("--help")
    assert result.returncode == 0 and result.stderr == ""
    for command in ("import", "info", "verify", "demo"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.MULTILINE), command


@pytest.mark.parametrize("command", ["picpac", "picpac-import"])
def test_version_says_whether_the_fast_path_is_on(command):
    result = subprocess.run([command, "--version"], capture_output=True, text=True)
    fast = ("on (picpac.image._jpeg, libjpeg-turbo): JPEGs decoded in part and at reduced scales, each sample in one "
            "C call" if picpac.image.REGION_DECODE else picpac.image.decoding.FAST_PATH_OFF[len("the fast path is "):])
    kernels = picpac.image.kernels.variant()
    assert (result.returncode, result.stdout) == (0, f"{command}, version {picpac.__version__}\nfast path: {fast}\n"
                                                     f"kernels: {kernels} (picpac's own arithmetic: the same bytes on "
                                                     f"every CPU and OpenCV)\n")


def test_version_says_the_fast_path_is_off_what_it_costs_and_how_to_get_it():
    result = subprocess.run(["picpac", "--version"], capture_output=True, text=True,
                            env={**os.environ, "PICPAC_FAST_PATH": "off"})
    line = result.stdout.splitlines()[1]
    assert line.startswith("fast path: off: the environment variable PICPAC_FAST_PATH=off turns it off, so JPEGs are "
                           "decoded by OpenCV, without region decoding or the fused sample path (which streams JPEGs ")
    assert line.endswith("x faster); to get it, unset PICPAC_FAST_PATH")


def test_demo_runs():
    result = run_cli("demo")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert "records:  300" in lines
    assert "classes:  3: circle, rectangle, triangle" in lines
    assert "fields:   image, annotation" in lines
    throughput = r"read 300 records in \d+\.\d{3} s: [\d,]+ records/s \(decoded: [\d,]+ img/s\)"
    assert re.fullmatch(throughput, lines[-1])


def test_demo_keeps_its_files_and_is_deterministic(tmp_path):
    echoed: list[str] = []
    run_demo(count=12, workdir=str(tmp_path / "a"), echo=echoed.append)
    run_demo(count=12, workdir=str(tmp_path / "b"), echo=lambda line: None)
    csv_a = (tmp_path / "a" / "shapes.csv").read_bytes()
    assert csv_a == (tmp_path / "b" / "shapes.csv").read_bytes()
    assert len(csv_a.splitlines()) == 13
    db = tmp_path / "a" / "shapes.picpac"
    assert echoed[0] == f"drew 12 images of circle, rectangle, triangle into {tmp_path / 'a'}"
    assert echoed[1].startswith(f"imported 12 records from csv {tmp_path / 'a' / 'shapes.csv'} into {db}")
    d = describe(db)
    assert (d["records"], d["fields"], d["classes"]) == (12, ["image", "annotation"], list(CLASSES))
    assert d["sizes"]["width"] == d["sizes"]["height"] == {"min": 96, "median": 96, "max": 96}
    assert sum(c["count"] for c in d["labels"]["counts"]) == 12
    with picpac.Reader(db) as r:
        for record in r:
            (shape,) = json.loads(bytes(record["annotation"]))["shapes"]
            assert shape["type"] == ("ellipse", "rect", "polygon")[int(record.label)]
            assert shape["label"] == int(record.label) + 1
            geometry = shape["geometry"]
            if shape["type"] == "polygon":
                assert len(geometry["points"]) == 3
                coords = [v for point in geometry["points"] for v in (point["x"], point["y"])]
            else:
                assert set(geometry) == {"x", "y", "width", "height"}
                coords = list(geometry.values())
            assert 0 <= min(coords) and max(coords) <= 1
    assert run_cli("verify", "--decode", str(db)).returncode == 0


def newer_version_db(path) -> None:
    picpac.Writer(path).close()
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack("<I", 99)
    path.write_bytes(data)


def make_error_target(kind: str, tmp_path):
    path = tmp_path / kind
    if kind == "directory":
        path.mkdir()
    elif kind == "not-picpac":
        path.write_bytes(np.arange(256, dtype=np.uint8).tobytes())
    elif kind == "newer-version":
        newer_version_db(path)
    return path


@pytest.mark.parametrize("command", ["info", "verify"])
@pytest.mark.parametrize("kind, message", [
    ("missing", "no such file"),
    ("directory", "is a directory, not a picpac database"),
    ("not-picpac", "not a picpac database (bad magic bytes)"),
    ("newer-version", "written by picpac format version 99"),
])
def test_unreadable_files_exit_2_with_one_error_line(tmp_path, command, kind, message):
    path = make_error_target(kind, tmp_path)
    result = run_cli(command, str(path))
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"picpac: error: {path}: {message}")


def test_an_error_naming_a_path_with_a_newline_is_one_line(tmp_path):
    source = tmp_path / "list\nfile.txt"
    source.write_bytes(b"a.jpg\t1\n\0\n")
    result = run_cli("import", str(source), str(tmp_path / "db"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"picpac: error: {tmp_path}/list\\nfile.txt:2: holds a NUL byte; list files "
                                          "are text without NUL bytes (is it a binary file?)"]


def test_docs_command_prints_the_packaged_pages(tmp_path):
    """A wheel carries docs/*.md as picpac/_docs: `picpac docs TOPIC` prints them without the source tree (and the
    explorer's script beside its code)."""
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"
    shutil.copytree(root / "picpac", src / "picpac", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(root / "docs", src / "docs")
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(root / name, src)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "wheel"), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("picpac-*.whl")
    installed = tmp_path / "installed"
    with zipfile.ZipFile(wheel) as archive:
        assert {f"picpac/_docs/{page.name}" for page in (root / "docs").glob("*.md")} <= set(archive.namelist())
        assert "picpac/tools/explore/static/explore.js" in archive.namelist()  # the explorer's one script
        archive.extractall(installed)
    cli = "import sys; from picpac.tools.cli import main; sys.argv[0] = 'picpac'; main()"
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", cli, "docs", "import"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (root / "docs" / "import.md").read_text()
    listing = subprocess.run([sys.executable, "-c", cli, "docs"], cwd=tmp_path, env=env, capture_output=True,
                             text=True).stdout.splitlines()
    assert listing[0] == "picpac docs TOPIC prints a page; the topics:"
    assert "  import        Importing images" in listing


def test_docs_command_errors_and_help_points_to_it():
    done = run_cli("docs", "nowhere")
    assert done.returncode == 2
    assert done.stderr == ("picpac: error: no documentation topic 'nowhere'; the topics are "
                           + ", ".join(sorted(p.stem for p in DOCS.glob("*.md"))) + " (`picpac docs` lists them)\n")
    assert run_cli("docs", "cli.md").stdout == (DOCS / "cli.md").read_text()
    assert "Documentation: `picpac docs` lists the pages, `picpac docs TOPIC` prints one." in " ".join(
        run_cli("--help").stdout.split())


def test_no_user_facing_string_points_to_the_source_tree():
    """Messages and help texts say `picpac docs TOPIC`, never docs/x.md (a pip-installed user has no docs/
    folder); docstrings and comments may name the files."""
    root = Path(__file__).resolve().parents[2]
    offenders = set()
    for module in sorted((root / "picpac").rglob("*.py")):
        tree = ast.parse(module.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and re.search(r"docs/\w+\.md", node.value)):
                offenders.add(str(module.relative_to(root)))
    assert not offenders, offenders


@pytest.mark.parametrize("args, message", [
    (("import", "--bogus", "a", "b"), "No such option '--bogus'; `picpac import --help` lists the options"),
    (("verify",), "Missing argument 'DB...'; `picpac verify --help` lists the options"),
    (("nosuch",), "No such command 'nosuch'; `picpac --help` lists the options"),
    (("--bogus",), "No such option '--bogus'; `picpac --help` lists the options"),
    (("info", "--json", "--shards", "x"), "No such option '--shards'; `picpac info --help` lists the options"),
    (("bench", "x", "--seconds", "many"), "Invalid value for '--seconds': 'many' is not a valid float range; "
                                          "`picpac bench --help` lists the options"),
])
def test_a_usage_error_is_one_line_as_every_error(args, message):
    """docs/cli.md: every error, a bad option too, is one line `picpac: error: ...` and exit status 2."""
    done = run_cli(*args)
    assert (done.returncode, done.stderr, done.stdout) == (2, f"picpac: error: {message}\n", "")
