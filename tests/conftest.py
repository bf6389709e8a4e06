from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from multiprocessing import active_children, resource_tracker
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.engine.shared_memory import PREFIX

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# A run under nohup inherits SIGHUP ignored, and every child with it: the signal tests (SIGHUP stops a command
# and cleans up) need the default disposition that a shell gives.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
# A run in the background of a shell script (`pytest &`) inherits SIGINT ignored, and so would every command it
# starts: the Ctrl-C tests need it handled, as Python handles it by default.
signal.signal(signal.SIGINT, signal.default_int_handler)


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


def jpeg_bomb(width: int = 65500, height: int = 65500) -> bytes:
    """A real 8x8 JPEG whose frame header declares ``width`` x ``height``: a few hundred bytes."""
    data = bytearray(cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8))[1].tobytes())
    i = 2
    while not 0xC0 <= data[i + 1] <= 0xC2:  # to the start-of-frame segment
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    data[i + 5:i + 9] = struct.pack(">HH", height, width)
    return bytes(data)


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


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    return SHARED_DATA


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


@pytest.fixture
def clean():
    """Asserts that a test leaves no worker process and no shared-memory block behind."""
    resource_tracker.ensure_running()  # a process of its own, started once: not a leak
    before = children()
    assert blocks() == set()
    yield
    deadline = time.monotonic() + 1
    while (children() - before or active_children()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert children() - before == set() and active_children() == []
    assert blocks() == set()



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


@pytest.fixture(scope="module")
def s3_server():
    """An :class:`S3Server`, started; skips when moto or s3fs is not installed (pip install -e '.[test]')."""
    pytest.importorskip("moto.server", reason="needs moto[server]: pip install -e '.[test]'")
    pytest.importorskip("s3fs", reason="needs s3fs: pip install -e '.[test]'")
    server = S3Server()
    server.start()
    yield server
    server.kill()


_FRAMEWORK_ORDER = ("test_torch.py", "test_tf.py", "test_jax.py", "test_adapters_cross_framework.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The adapters' tests run last, torch's (which fork DataLoader workers) before TensorFlow's and JAX's:
    once those are imported, their threads make a fork in the test process unsafe (JAX warns so)."""
    def rank(item) -> tuple[int, int]:
        name = item.path.name
        if item.path.parent.name != "adapters":
            return (0, 0)
        return (1, _FRAMEWORK_ORDER.index(name) if name in _FRAMEWORK_ORDER else len(_FRAMEWORK_ORDER))
    items.sort(key=rank)  # stable: the order within each group stays
