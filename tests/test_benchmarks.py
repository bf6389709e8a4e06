"""The benchmarks that the suite runs as smoke tests (not timed): benchmarks/train_feed.py on the CPU with a tiny
model, every feed, a few steps, checking that it trains on each and prints the table; benchmarks/device_stage.py on
the CPU over a few images, checking its tables."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]


def test_train_feed_runs_every_feed_on_the_cpu():
    pytest.importorskip("torch")
    pytest.importorskip("PIL")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_feed.py"), "--model", "tiny", "--batch", "8",
                          "--steps", "3", "--warm", "1", "--samples", "64", "--workers", "1", "--decode-batches", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "models tiny on CPU (a smoke test: rates mean nothing), batch 8, 3 steps after 1" in out.stdout
    decode = re.findall(r"decode only: (.+?)\s{2,}([\d,]+) img/s", out.stdout)
    assert [name for name, _ in decode] == ["picpac device stage (device=...)", "picpac threads 1 + DevicePrefetcher",
                                            "picpac backend=process 1 + DevicePrefetcher"]
    assert all(int(rate.replace(",", "")) > 0 for _, rate in decode)
    table = out.stdout[out.stdout.index("\ntiny: feed "):].splitlines()[2:-1]
    names = [re.split(r"\s{2,}", line)[0] for line in table]
    assert names == ["synthetic (one batch on the device)", "picpac device stage (device=...)",
                     "picpac threads 1 + DevicePrefetcher", "picpac backend=process 1 + DevicePrefetcher",
                     "DataLoader + cv2, 1 workers", "DataLoader + PIL, 1 workers"]
    for line in table:
        rate, wait, cores, ratio = re.search(r"([\d,]+)\s+(\d+)%\s+([\d.]+)\s+([\d.]+)x$", line).groups()
        assert int(rate.replace(",", "")) > 0 and 0 <= int(wait) <= 100 and float(cores) > 0 and float(ratio) > 0
    assert table[0].endswith("1.00x")


def test_device_stage_prints_the_agreement_and_the_warp_rates_on_the_cpu():
    pytest.importorskip("torch")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_stage.py"), "--device", "cpu",
                          "--samples", "12", "--batch", "8", "--repeats", "1"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^  (.+?)\s+mean\s+([\d.]+)\s+worst image\s+([\d.]+)\s+\(12 images\)$", out.stdout, re.M)
    assert [name for name, *_ in rows][:2] == ["W1 (RandomResizedCrop 224 + flip)",
                                               "W2 (shorter side 256 + centre crop 224)"]
    assert [name.split(" (")[0].split(",")[0] for name, *_ in rows][2:] == [
        "resize 100x120", "rotate 20 + RandomResizedCrop 96", "PicPac pert_*", "resize 224x32", "resize 1x224",
        "resize 640x48"]
    assert all(float(worst) <= 2 for *_, worst in rows)
    assert re.search(r"masks \(nearest\), pert_\* keys\s+[\d.]+% of the mask pixels differ", out.stdout)
    rates = re.findall(r"^  (batched \(the stage's warp\)|one sample per call)\s+([\d,]+) img/s\s+([\d.]+)x$",
                       out.stdout, re.M)
    assert [name for name, *_ in rates] == ["batched (the stage's warp)", "one sample per call"]
    assert rates[1][2] == "1.00"


def test_formats_compares_every_store_and_parquet():
    pytest.importorskip("pyarrow")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "formats.py"), "--copies", "1", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^(\S.*?)\s+([\d.]+)x\s.*?\s([\d,]+)\s+([\d,]+)\s+yes$", out.stdout, re.M)
    names = [name for name, *_ in rows]
    assert names[:7] == ["picpac", "lmdb", "hdf5", "npz", "sqlite", "tar", "binary"] and "parquet" in names
    assert names[-2:] == ["picpac, no check", "tfrecord, no check"] and "folder of files" in names
    parquet = rows[names.index("parquet")]
    assert 1.0 < float(parquet[1]) < 1.01  # size vs raw: the JPEG bytes and a little
    assert int(parquet[2].replace(",", "")) > 0 and int(parquet[3].replace(",", "")) > 0  # seq and random rec/s
