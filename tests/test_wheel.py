"""The fast path in every install: the manylinux wheel .ci/wheel makes (python -m build, auditwheel repair) carries
libjpeg-turbo, so installed into a fresh venv on a machine whose libjpeg is hidden (an empty file bound over it in a
private mount namespace) it still decodes regions and takes the fused path; this checkout's own build, in the same
namespace, says its fast path is off and why. Needs root (unshare -m), build and auditwheel (the test extra)."""
from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = textwrap.dedent("""
    import ctypes, os, sys, tempfile
    import cv2, numpy as np
    import picpac
    from picpac.image import decoding
    try:
        ctypes.CDLL("libjpeg.so.62")
        hidden = False
    except OSError:
        hidden = True
    path = os.path.join(tempfile.mkdtemp(), "jpegs.picpac")
    with picpac.Writer(path) as w:
        for i in range(8):
            w.append(image=cv2.imencode(".jpg", np.full((60, 80, 3), 20 * i, np.uint8))[1].tobytes(), label=i)
    with picpac.ImageStream(path, batch=4, loop=False, resize_width=32, resize_height=32) as stream:
        list(stream)
        stats = stream.stats()
    print(hidden, picpac.__file__.startswith(sys.argv[1]), decoding.REGION_DECODE, stats.get("fused_samples"),
          stats["fused_reason"])
""")


def libjpeg() -> str | None:
    found = ctypes.util.find_library("jpeg")
    if found is None:
        return None
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.exists(os.path.join(folder, found)):
            return os.path.realpath(os.path.join(folder, found))
    return None


@pytest.fixture(scope="module")
def hide(tmp_path_factory):
    """A command prefix that runs a command with the system's libjpeg an empty file."""
    target = libjpeg()
    if os.geteuid() != 0 or shutil.which("unshare") is None or target is None:
        pytest.skip("needs root, unshare and the system's libjpeg.so.62 to hide")
    empty = tmp_path_factory.mktemp("hide") / "empty"
    empty.write_bytes(b"")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    return lambda command: ["unshare", "-m", "sh", "-c", f'mount --bind "{empty}" "{target}" && exec "$@"', "hide",
                            *command]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    for module in ("build", "auditwheel"):
        pytest.importorskip(module, reason=f"{module} is not installed (the test extra has it)")
    out = tmp_path_factory.mktemp("wheelhouse")
    run = subprocess.run([str(ROOT / ".ci" / "wheel"), str(out)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (found,) = out.glob("picpac-*.whl")
    return found


def test_the_wheel_is_manylinux_and_carries_libjpeg_turbo(wheel):
    assert "manylinux" in wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("picpac.libs/libjpeg") for n in names)
    assert "picpac/_docs/augment.md" in names
    assert "picpac/py.typed" in names  # the package's annotations are for its users' type checkers
    assert any(n.startswith("picpac/image/_jpeg.") for n in names) and any(n.startswith("picpac/image/_kernels.")
                                                                           for n in names)


def test_the_wheel_keeps_the_fast_path_where_the_systems_libjpeg_is_gone(wheel, hide, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                             timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    run = subprocess.run(hide([str(venv / "bin" / "python"), "-c", CHECK, site]), capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.stdout.split() == ["True", "True", "True", "8", "None"], run.stdout + run.stderr


def test_a_build_that_lost_its_libjpeg_says_its_fast_path_is_off_and_why(hide, tmp_path):
    """This checkout's extension links the system's libjpeg: hidden, it does not load, and picpac says so."""
    run = subprocess.run(hide([sys.executable, "-c", CHECK, str(ROOT)]), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    words = run.stdout.split()
    assert words[:4] == ["True", "True", "False", "None"], run.stdout + run.stderr
    assert "the fast path is off: picpac.image._jpeg does not load (" in run.stdout and "libjpeg.so.62" in run.stdout
    assert "RuntimeWarning: picpac's fast path is off: picpac.image._jpeg does not load" in run.stderr
