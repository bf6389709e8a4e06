"""`picpac bench`: throughput, stage times, the bound, --threads auto, and its errors."""
from __future__ import annotations

import re
import subprocess
import sys

import cv2
import numpy as np
import pytest

import picpac
from picpac.image.decoding import REGION_DECODE
from picpac.stream.job import usable_cores
from picpac.tools.bench import bound, contended, gil_bound, idle_seconds, measure, parse_settings, path, report


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "db.picpac"
    rng = np.random.default_rng(0)
    with picpac.Writer(path) as w:
        for i in range(64):
            w.append(image=cv2.imencode(".jpg", rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))[1].tobytes(),
                     label=i % 4)
    return path


def test_settings_are_parsed_as_json_or_text():
    assert parse_settings(["batch=8", "colorspace=BGR", "mean=[1, 2, 3]", "loop=true"]) == \
        {"batch": 8, "colorspace": "BGR", "mean": [1, 2, 3], "loop": True}
    with pytest.raises(picpac.PicPacValueError, match="'batch' is not key=value"):
        parse_settings(["batch"])


def test_measure_accounts_for_every_stage(db):
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 2}, 1.0)
    assert result["samples"] >= 8 and result["rate"] > 0 and result["processed"] > 0  # prefetched ones aside
    stages = result["stages"]
    assert set(stages) == {"read", "decode", "transform", "batch", "wait"} and all(v >= 0 for v in stages.values())
    assert stages["decode"] > 0 and stages["read"] > 0
    assert set(result["busy"]) == {"picpac-stream_0", "picpac-stream_1"}
    worker_time = stages["read"] + stages["decode"] + stages["transform"]
    assert abs(worker_time - sum(result["busy"].values())) < 1e-6  # the stages add up to the busy time


def test_cli_reports_and_auto_threads(db):
    out = subprocess.run(["picpac", "bench", str(db), "--seconds", "1", "batch=8", "resize_width=64",
                          "resize_height=48"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^throughput: [\d,]+ img/s \([\d,]+ samples in [\d.]+ s, \d+ workers\)$", out.stdout, re.M)
    assert re.search(r"^time per sample \(ms\): workers: read [\d.]+, decode [\d.]+, transform [\d.]+; "
                     r"consumer: batch [\d.]+, wait [\d.]+$", out.stdout, re.M)
    assert re.search(r"^bound by: ", out.stdout, re.M) and "img/s" in out.stderr  # the live line
    auto = subprocess.run(["picpac", "bench", str(db), "--seconds", "1", "--threads", "auto", "batch=8",
                           "resize_width=64", "resize_height=48"], capture_output=True, text=True, timeout=120)
    assert auto.returncode == 0, auto.stderr
    tried = re.findall(r"^threads (\d+): [\d,]+ img/s$", auto.stdout, re.M)
    assert tried == [str(n) for n in range(1, len(tried) + 1)] and len(tried) >= 2
    assert re.search(r"^fastest: threads=\d+$", auto.stdout, re.M)


@pytest.mark.parametrize("args, message", [
    (["--threads", "zero"], "is not a positive number or 'auto'"),
    (["resize_widht=3"], "did you mean 'resize_width'"),
    (["batch"], "is not key=value"),
])
def test_cli_errors(db, args, message):
    out = subprocess.run(["picpac", "bench", str(db), "--seconds", "1", *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_process_backend_says_its_stage_times_are_not_measured(db):
    out = subprocess.run(["picpac", "bench", str(db), "--seconds", "1", "--threads", "2", "batch=8",
                          "resize_width=64", "resize_height=48", "backend=process"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.fullmatch(r"throughput: [\d,]+ img/s \([\d,]+ samples in [\d.]+ s, 2 workers\)", lines[0])
    assert lines[1].startswith("path: ")
    assert re.fullmatch(r"time per sample \(ms\): workers: not measured \(backend=process: their stage clocks run in "
                        r"the worker processes\); consumer: waiting for and assembling batches [\d.]+", lines[2])
    assert lines[3] == "worker busy: not measured"
    # a bound only from what was measured: never a worker stage
    assert re.fullmatch(r"bound by: the workers \(the consumer spent \d+% of the time waiting for batches\); which of "
                        r"their stages is not measured with backend=process: run with backend=thread to see it"
                        r"|bound by: the consumer: it spent only \d+% of the time waiting for batches, so the code "
                        r"using the batches sets the pace; more workers will not help", lines[4])
    assert len(lines) == 5


def hold_the_gil(sample, rng):
    """A Python step: about a millisecond of bytecode, all of it holding the GIL."""
    sum(range(100_000))
    return sample


@pytest.mark.skipif(usable_cores() < 2, reason="two threads queue for the GIL only where two cores could run them")
def test_threads_queued_for_the_gil_are_told_apart_from_slow_decoding(db):
    """The Python path with a Python step on two threads: the threads run on a core for only part of their time
    on samples, cores stand idle, and bench names the GIL and the fixes (not 'decode')."""
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 2, "fused": False,
                               "transforms": [hold_the_gil]}, 2.0)
    assert sum(result["cpu"].values()) / sum(result["busy"].values()) < 0.75
    if result["idle_cores"] is not None and result["idle_cores"] < 0.5:  # (the machine is busy: that is contention)
        pytest.skip(f"other processes held the cores ({result['idle_cores']:.2f} idle): the threads waited for them")
    said = bound(result)
    assert said.startswith("the GIL: the worker threads ran on a core only ") and "backend=process" in said
    assert "the fused C path (fused=False)" in said
    assert path(result) == "Python per sample (no fused C path: fused=False)"
    lines = report(result).splitlines()
    assert lines[1] == "path: Python per sample (no fused C path: fused=False)"
    assert re.fullmatch(r"worker busy \(and the share of it on a core\): picpac-stream_0 \d+% \(ran \d+%\), "
                        r"picpac-stream_1 \d+% \(ran \d+%\)", lines[3])


def test_one_thread_never_blames_the_gil(db):
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 1, "fused": False,
                               "transforms": [hold_the_gil]}, 1.0)
    assert gil_bound(result) is None and not bound(result).startswith("the GIL")


@pytest.mark.skipif(not REGION_DECODE, reason="the fused C path needs picpac.image._jpeg (libjpeg-turbo's headers)")
def test_the_report_says_how_many_samples_took_the_fused_path(db):
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 2}, 1.0)
    assert result["fused_reason"] is None and result["python_samples"] == 0 and result["fused_samples"] > 0
    assert path(result).startswith(f"fused C, one call per sample without the GIL: {result['fused_samples']:,} of ")


def test_the_report_says_where_the_device_stage_decoded(db):
    pytest.importorskip("torch")
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 2, "device": "cpu"},
                     1.0)
    n = result["cpu_decoded"]
    assert n > 0 and result["device_decoded"] == 0
    assert path(result) == (f"the device stage on cpu (the planning threads (libjpeg-turbo, as the CPU path)): 0 of "
                            f"{n:,} samples decoded there, {n:,} on the CPU; the workers read and plan")


@pytest.mark.skipif(idle_seconds() is None, reason="idle time is read from Linux's /proc/stat")
@pytest.mark.skipif(not REGION_DECODE, reason="the fused C path needs picpac.image._jpeg (libjpeg-turbo's headers)")
def test_cores_held_by_other_processes_are_contention_not_the_gil(db):
    """An all-fused run while other processes keep every core busy: the threads wait for a core, no core stands
    idle, and bench says so instead of blaming the GIL and advising backend=process (which made it slower)."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * usable_cores())]
    try:
        result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 2}, 2.0)
    finally:
        for process in spin:
            process.kill()
            process.wait()
    assert result["python_samples"] == 0 and result["idle_cores"] < 0.5
    said = bound(result)
    assert not said.startswith("the GIL") and gil_bound(result) is None
    if sum(result["cpu"].values()) / sum(result["busy"].values()) < 0.75:  # (the threads did wait: they shared)
        assert said == contended(result) and said.startswith("contention: the worker threads ran on a core only ")
        assert "no core stood idle" in said and "backend=process will not help" in said


def test_idle_cores_are_measured(db):
    """The measurement holds the idle cores it saw (a number on Linux)."""
    result = measure(str(db), {"batch": 8, "resize_width": 64, "resize_height": 48, "threads": 1}, 0.5)
    idle = result["idle_cores"]
    assert idle is None if idle_seconds() is None else 0 <= idle <= usable_cores() + 0.1
