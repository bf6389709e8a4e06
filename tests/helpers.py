"""Helpers shared by the tests of every folder: data makers (payloads, PNGs, decompression bombs, small
databases), process and shared-memory probes, and a real S3 server on loopback.

Test modules import them with ``from helpers import ...`` (tests/ is on sys.path: pytest puts the folder of
the rootdir's conftest.py there); tests/conftest.py holds only fixtures and pytest hooks. Helpers of one
layer's tests live beside them (sources/source_helpers.py, stores/store_helpers.py), a folder's fixtures
in its conftest.py."""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.engine.shared_memory import PREFIX

SHARED_DATA = Path(os.environ.get("PICPAC_TEST_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
"""The read-only real data beside the repository (imagenet-250, coco128-train); PICPAC_TEST_DATA names a copy where
../shared is not beside the checkout (the GPU machine of benchmarks/device_run.sh)."""


def run_console(*args: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an installed console script (``picpac``, ``picpac-import``) in ``cwd``; skip if it is not installed."""
    if shutil.which(args[0]) is None:
        pytest.skip(f"console script {args[0]} not on PATH; run `pip install -e .`")
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def payload(i: int, size: int | None = None) -> bytes:
    """Deterministic, distinct bytes for record ``i`` (sizes vary with i unless given)."""
    size = 17 + (i * 37) % 300 if size is None else size
    block = hashlib.sha256(str(i).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def smooth_jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """A JPEG of blurred noise (a photograph's spectrum more than noise's): the fused path's test images."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return cv2.imencode(".jpg", cv2.GaussianBlur(pixels, (9, 9), 3), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def jpeg_bomb(width: int = 65500, height: int = 65500) -> bytes:
    """A real 8x8 JPEG whose frame header declares ``width`` x ``height``: a few hundred bytes."""
    data = bytearray(cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8))[1].tobytes())
    i = 2
    while not 0xC0 <= data[i + 1] <= 0xC2:  # to the start-of-frame segment
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    data[i + 5:i + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def progressive_jpeg(width: int, height: int, scans: int) -> bytes:
    """A real flat grey progressive JPEG of ``scans`` scans (4 to 66), arithmetic-coded, as libjpeg-turbo's cjpeg writes
    it from a scan script (skips the test without cjpeg: Debian's libjpeg-turbo-progs, which .ci/run installs)."""
    cjpeg = shutil.which("cjpeg")
    if cjpeg is None:
        pytest.skip("cjpeg is not installed (apt-get install libjpeg-turbo-progs)")
    bands = scans - 3  # DC in two scans, the AC coefficients in ``bands`` first scans, then one refinement of them all
    assert 1 <= bands <= 63, scans
    script = ["0 0 0 1;", "0 0 1 0;"] + [f"{k} {k} 0 1;" for k in range(1, bands)] + [f"{bands} 63 0 1;", "1 63 1 0;"]
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "scans").write_text("\n".join("0: " + line for line in script))
        Path(folder, "flat.pgm").write_bytes(b"P5 %d %d 255\n" % (width, height) + bytes(width * height))
        subprocess.run([cjpeg, "-arithmetic", "-scans", "scans", "-outfile", "out.jpg", "flat.pgm"], cwd=folder,
                       check=True, capture_output=True)
        return Path(folder, "out.jpg").read_bytes()


def png_bomb(width: int = 65500, height: int = 65500) -> bytes:
    """A PNG whose IHDR declares ``width`` x ``height`` (8-bit RGB) with one deflated row of data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(1 + 3 * width))) + chunk(b"IEND", b""))


def make_db(path, n: int = 20, size=(8, 6), labels=None, groups=None, broken=()) -> Path:
    """n lossless BGR images; image i is filled with (i, 2i, 3i) mod 256 (B, G, R); label i unless given."""
    w, h = size
    with picpac.Writer(path) as writer:
        for i in range(n):
            pixels = np.empty((h, w, 3), np.uint8)
            pixels[:] = (i % 256, 2 * i % 256, 3 * i % 256)
            data = b"not an image" if i in broken else png(pixels)
            writer.append(image=data, label=float(i if labels is None else labels[i]),
                          group=None if groups is None else int(groups[i]))
    return path


def damage_record(path, i: int, at: int = 10) -> bytes:
    """Flip the bits of byte ``at`` of record ``i`` of the picpac file ``path``; the file's bytes after."""
    with picpac.Reader(path) as reader:
        offset = int(reader.index["offset"][i]) + at
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    return bytes(data)


def run(stream, batches: int | None = None) -> list[tuple[np.ndarray, np.ndarray, int]]:
    out = []
    for i, batch in enumerate(stream):
        out.append(batch)
        if batches is not None and i + 1 == batches:
            break
    return out


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def children(pid: int | None = None) -> set[int]:
    """Live (non-zombie) child processes of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_stat(entry)
            if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def blocks(pid: int | None = None) -> set[str]:
    """This process's shared-memory blocks in /dev/shm."""
    mine = f"{PREFIX}{os.getpid() if pid is None else pid}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(mine)}


class S3Server:
    """A real S3 API server on loopback (moto's server mode) in a child process that tests may kill and
    start again on the same port; it starts empty each time, so :meth:`put` keeps what was put for :meth:`refill`."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.options = {"key": "testing", "secret": "testing", "endpoint_url": self.url,
                        "client_kwargs": {"region_name": "us-east-1"},
                        "config_kwargs": {"connect_timeout": 2, "read_timeout": 10, "retries": {"max_attempts": 1}}}
        self.objects: dict[tuple[str, str], bytes] = {}
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on port {self.port}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def outage(self, seconds: float) -> threading.Thread:
        """Kill the server now and start it again, refilled, ``seconds`` later (on a thread: join it)."""
        self.kill()

        def restart() -> None:
            time.sleep(seconds)
            self.start()
            self.refill()
        thread = threading.Thread(target=restart)
        thread.start()
        return thread

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id="testing",
                            aws_secret_access_key="testing")

    def put(self, bucket: str, key: str, data: bytes | Path) -> str:
        """Store ``data`` (bytes or a file's) as ``s3://bucket/key`` (the bucket made when new); returns the URL."""
        data = Path(data).read_bytes() if isinstance(data, Path) else data
        client = self.client()
        if bucket not in {b for b, _ in self.objects}:
            client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key=key, Body=data)
        self.objects[bucket, key] = data
        return f"s3://{bucket}/{key}"

    def refill(self) -> None:
        """Put everything put so far again (into a server started anew)."""
        objects, self.objects = self.objects, {}
        for (bucket, key), data in objects.items():
            self.put(bucket, key, data)


def on_small_disk(folder, script: str, size: str = "1m") -> subprocess.CompletedProcess:
    """Run the sh ``script`` where the directory ``folder`` is a fresh tmpfs of ``size`` bytes (``$DISK`` in
    the script): a full disk for real. The tmpfs lives in a mount namespace of the script's own, gone with
    it; the test is skipped where neither ``unshare -rm`` (user namespaces) nor ``unshare -m`` (root) works."""
    os.makedirs(folder, exist_ok=True)
    mount = f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(folder))}"
    for flags in ("-rm", "-m"):
        if shutil.which("unshare") and subprocess.run(["unshare", flags, "sh", "-c", mount],
                                                      capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("cannot mount a small tmpfs here (no user namespaces, not root)")
    return subprocess.run(["unshare", flags, "sh", "-c", f"{mount} && {script}"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "DISK": str(folder)})


def imagenet_db(path, extra: tuple[tuple[bytes, int], ...] = ()) -> Path:
    """The 250 JPEGs of imagenet-250 (labelled i % 10), PNGs of the first 6 (labelled 0..5), then ``extra``
    (image bytes, label) records; skips the test where the real data is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))
    with picpac.Writer(path) as w:
        for i, file in enumerate(files):
            w.append(image=file.read_bytes(), label=i % 10)
        for i in range(6):
            w.append(image=cv2.imencode(".png", cv2.imread(str(files[i])))[1].tobytes(), label=i)
        for data, label in extra:
            w.append(image=data, label=label)
    return Path(path)


def hf_datasets(monkeypatch, tmp_path):
    """Hugging Face's ``datasets`` (skipped where it is missing), offline, its caches under ``tmp_path``."""
    for name, value in (("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1"), ("HF_HOME", tmp_path / "hf"),
                        ("HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")):
        monkeypatch.setenv(name, str(value))
    return pytest.importorskip("datasets", reason="needs Hugging Face's datasets (pip install picpac[hf])")


def imagenet_jpegs(n: int) -> list[tuple[str, bytes, int]]:
    """(name, JPEG bytes, class index) of the first ``n`` images of imagenet-250 (skips where it is missing)."""
    folder = SHARED_DATA / "imagenet-250"
    if not folder.is_dir():
        pytest.skip(f"real data not found at {folder} (the ../shared folder beside the repo)")
    labels = dict(line.split("\t")[:2] for line in (folder / "labels.tsv").read_text().splitlines()[1:])
    return [(name, (folder / name).read_bytes(), int(labels[name])) for name in sorted(labels)[:n]]


def coco_boxes(n: int) -> tuple[list[tuple[str, bytes, int, int, list[list[float]], list[int]]], list[str]]:
    """(name, JPEG bytes, width, height, boxes [x, y, w, h] in pixels, class ids) of the first ``n`` images of
    coco128-train, from its YOLO labels, and the class names (skips where the data is missing)."""
    import yaml

    folder = SHARED_DATA / "coco128-train"
    if not folder.is_dir():
        pytest.skip(f"real data not found at {folder} (the ../shared folder beside the repo)")
    names = yaml.safe_load((folder / "detection-classes.yaml").read_text())["names"]
    classes = [names[i] for i in range(len(names))] if isinstance(names, dict) else list(names)
    out = []
    for path in sorted((folder / "images").glob("*.jpg"))[:n]:
        height, width = cv2.imread(str(path)).shape[:2]
        rows = [line.split() for line in (folder / "detection" / f"{path.stem}.txt").read_text().splitlines()]
        boxes = [[(float(cx) - float(w) / 2) * width, (float(cy) - float(h) / 2) * height, float(w) * width,
                  float(h) * height] for _, cx, cy, w, h in rows]
        out.append((path.name, path.read_bytes(), width, height, boxes, [int(row[0]) for row in rows]))
    return out, classes
