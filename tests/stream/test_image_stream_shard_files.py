"""A dataset as files the streaming process holds: more shards than ``ulimit -n`` allows descriptors, and a shard
or a single file overwritten in place mid-epoch (each in a child process: a lowered limit, a SIGBUS would kill it)."""
from __future__ import annotations

import subprocess
import sys

import pytest

MANY = r"""
import resource, sys
import cv2, numpy as np
import picpac
from picpac.file.shards import open_database, write_index

folder, count = sys.argv[1], int(sys.argv[2])
image = cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes()
paths = [f"{folder}/s-{k:05d}.picpac" for k in range(count)]
for k, path in enumerate(paths):
    with picpac.Writer(path, sync=False) as w:
        w.append(image=image, label=k)
write_index(f"{folder}/all.shards", paths)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
with open_database(f"{folder}/all.shards") as reader:
    assert reader.labels.tolist() == list(range(count)) and reader[count - 1].label == count - 1
labels = []
with picpac.ImageStream(f"{folder}/all.shards", batch=100, loop=False, workers=2, seed=1) as stream:
    for images, batch_labels, pad in stream:
        labels += batch_labels.astype(int).tolist()
assert sorted(labels) == list(range(count)) and labels != sorted(labels), labels[:10]
print("streamed", len(labels))
"""


def test_more_shards_than_the_descriptor_limit_open_and_stream(tmp_path):
    done = subprocess.run([sys.executable, "-c", MANY, str(tmp_path), "1100"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout == "streamed 1100\n", done.stderr[-3000:]


CUT = r"""
import sys
import cv2, numpy as np
import picpac
from picpac.file.shards import write_index

folder = sys.argv[1]
rng = np.random.default_rng(0)
paths = [f"{folder}/s-{k}.picpac" for k in range(4)]
for k, path in enumerate(paths):
    with picpac.Writer(path) as w:
        for i in range(8):  # noise: about 19 KB a record, so a shard spans many pages
            w.append(image=cv2.imencode(".png", rng.integers(0, 256, (80, 80, 3), np.uint8))[1].tobytes(),
                     label=8 * k + i)
write_index(f"{folder}/all.shards", paths)
labels = []
with picpac.ImageStream(f"{folder}/all.shards", batch=4, loop=False, shuffle=False, workers=1, preload=8) as stream:
    try:
        for n, (images, batch_labels, pad) in enumerate(stream):
            labels += batch_labels.astype(int).tolist()
            if n == 0:  # shard 3 is overwritten in place by a short file (as cp does) while shard 0 is read
                with open(paths[3], "wb") as f:
                    f.write(b"not the shard it was" * 10)
    except picpac.PicPacError as exc:
        print(labels)
        print(type(exc).__name__, exc)
"""


def test_a_shard_overwritten_in_place_mid_epoch_stops_the_stream_naming_it(tmp_path):
    done = subprocess.run([sys.executable, "-c", CUT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # -7: killed by SIGBUS
    delivered, error = done.stdout.splitlines()
    assert delivered == str(list(range(24)))  # shards 0-2, then the error before any sample of shard 3
    assert f"{tmp_path}/s-3.picpac: the file was cut to 200 bytes while it was being read" in error, error


ONE = r"""
import sys, time
import cv2, numpy as np
import picpac

path, route = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
if route == "batch":  # arrays on the batch path (take, spans, gather)
    picpac.write_arrays(path, rng.integers(0, 256, (64, 64, 64, 3), np.uint8), np.arange(64))
else:  # noise: about 19 KB a record, so the file spans many pages
    with picpac.Writer(path) as w:
        for i in range(64):
            w.append(image=cv2.imencode(".png", rng.integers(0, 256, (80, 80, 3), np.uint8))[1].tobytes(), label=i)
labels = []
with picpac.ImageStream(path, batch=4, loop=False, shuffle=False, workers=1, preload=8, dtype="uint8",
                        vectorize=route == "batch") as stream:
    assert stream.stats()["path"] == route, stream.stats()
    try:
        for n, (images, batch_labels, pad) in enumerate(stream):
            labels += batch_labels.astype(int).tolist()
            if n == 0:  # the file is overwritten in place by a short file while it is read (between two reads:
                time.sleep(0.5)  # the worker has read what preload allows; a cut racing a read can still SIGBUS)
                with open(path, "r+b") as f:
                    f.write(b"not the file it was" * 10)
                    f.truncate()
    except picpac.PicPacError as exc:
        print(labels)
        print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize("route", ["sample", "batch"])
def test_a_single_file_overwritten_in_place_mid_epoch_stops_the_stream_naming_it(tmp_path, route):
    path = str(tmp_path / "a.picpac")
    done = subprocess.run([sys.executable, "-c", ONE, path, route], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # -7: killed by SIGBUS
    delivered, error = done.stdout.splitlines()
    delivered = eval(delivered)
    assert 4 <= len(delivered) < 64 and delivered == list(range(len(delivered)))  # what was read before the cut
    assert error.startswith(f"PicPacError {path}: the file was cut to 190 bytes while it was being read"), error
