"""picpac's kernels give the same bytes on every CPU: kernel_vectors.c (the kernels' test program) run natively with
each variant of the loops forced, cross-compiled for aarch64 and run under qemu-aarch64, gives exactly the lines of
kernel_vectors.txt; and the Python extension, replaying every line, gives the same digests (the build's flags keep the
arithmetic). The file changes only when picpac's arithmetic is changed on purpose: regenerate it with
``gcc -O2 -ffp-contract=off -Ipicpac/image tests/image/kernel_vectors.c picpac/image/_kernels.c -lm -o kv && ./kv``."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from picpac.image import _kernels

HERE = Path(__file__).resolve().parent
SOURCES = HERE.parents[1] / "picpac" / "image"
VECTORS = HERE / "kernel_vectors.txt"
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def build(tmp_path: Path, compiler: str, *flags: str) -> Path:
    out = tmp_path / f"kernel_vectors-{Path(compiler).name}"
    subprocess.run([compiler, "-O2", "-ffp-contract=off", *flags, f"-I{SOURCES}", str(HERE / "kernel_vectors.c"),
                    str(SOURCES / "_kernels.c"), "-lm", "-o", str(out)], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> Path:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    return build(tmp_path_factory.mktemp("vectors"), compiler)


@pytest.mark.parametrize("variant", _kernels.VARIANTS)
def test_every_variant_gives_the_vectors_bytes(native, variant):
    run = subprocess.run([str(native), variant], capture_output=True, text=True, timeout=300)
    if run.returncode == 2:
        pytest.skip(f"this CPU cannot run the {variant} loops")
    assert run.returncode == 0, run.stderr
    assert run.stdout == VECTORS.read_text()


def test_aarch64_gives_the_vectors_bytes_under_qemu(tmp_path):
    """The portable loops compiled for aarch64 (NVIDIA Grace, AWS Graviton), NEON by the compiler, run by qemu-user."""
    compiler, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if compiler is None or qemu is None:
        pytest.skip("needs Debian's gcc-aarch64-linux-gnu and qemu-user (.ci/run installs them)")
    program = build(tmp_path, compiler, "-static")
    run = subprocess.run([qemu, str(program)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout == VECTORS.read_text()


# -- the Python extension, replaying the lines -------------------------------------------------------------------------
def draws(seed: int, n: int) -> np.ndarray:
    """n bytes of the splitmix64 stream from ``seed`` (kernel_vectors.c's input())."""
    count = -(-n // 8)
    z = np.uint64(seed) + GOLDEN * np.arange(1, count + 1, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return z.astype("<u8").view(np.uint8)[:n]


def digest(data: np.ndarray) -> int:
    """kernel_vectors.c's digest: h = h * P + byte + 1 over the bytes, mod 2**64."""
    b = np.ascontiguousarray(data).view(np.uint8).ravel().astype(np.uint64) + np.uint64(1)
    factors = np.full(len(b), 0x100000001B3, np.uint64)
    factors[0] = 1
    powers = np.cumprod(factors)[::-1]  # P**(n-1) .. P**0, wrapping as the C does
    return int(np.sum(b * powers, dtype=np.uint64))


def replay(line: str) -> tuple[int, int]:
    """(the digest the extension gives for the line's case, the line's)."""
    kind, *fields = line.split()
    k, want = int(fields[0]), int(fields[-1], 16)
    seed = k * int(GOLDEN) % 2**64 + 1
    if kind == "resize":
        cn, sw, sh, dw, dh, interpolation = map(int, fields[1:7])
        out = np.empty((dh, dw, cn), np.uint8)
        _kernels.resize(draws(seed, sw * sh * cn).reshape(sh, sw, cn), out, interpolation)
    elif kind == "warp":
        cn, sw, sh, dw, dh, border, fill = map(int, fields[1:8])
        out = np.empty((dh, dw, cn), np.uint8)
        _kernels.warp(draws(seed, sw * sh * cn).reshape(sh, sw, cn), tuple(map(float, fields[8:14])), border, fill, out)
    elif kind == "flip":
        pixel, w, h, code = map(int, fields[1:5])
        out = np.empty((h, w, pixel), np.uint8)
        _kernels.flip(draws(seed, w * h * pixel).reshape(h, w, pixel), code, out)
    elif kind == "nearest":
        pixel, sw, sh, dw, dh = map(int, fields[1:6])
        out = np.empty((dh, dw, pixel), np.uint8)
        _kernels.nearest(draws(seed, sw * sh * pixel).reshape(sh, sw, pixel), tuple(map(float, fields[6:12])), out)
    else:
        cn, sw, sh, kind_, x0, y0, x1, y1, interpolation, flip, w, h, fill, dtype, first, means, stds = \
            map(int, fields[1:18])
        m = tuple(map(float, fields[18:24]))
        values = list(map(float, fields[24:32]))
        geometry = (1, x0, y0, x1, y1, interpolation, flip, w, h, 0, 0, 0) if kind_ == 1 else (2, 0, 0, *m, fill, w, h)
        out = np.empty((h, w, cn), np.float32 if dtype else np.uint8)
        _kernels.finish(draws(seed, sw * sh * cn).tobytes(), sw, sh, cn, geometry, out, dtype, bool(first),
                        tuple(values[0::2][:means]), tuple(values[1::2][:stds]))
    return digest(out), want


def test_the_python_extension_replays_every_vector():
    lines = VECTORS.read_text().splitlines()
    assert len(lines) == 1200 and {line.split()[0] for line in lines} == {"resize", "warp", "flip", "nearest", "finish"}
    wrong = [line for line in lines if (lambda got, want: got != want)(*replay(line))]
    assert not wrong, f"{len(wrong)} cases differ, the first: {wrong[0]}"
