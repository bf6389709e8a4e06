"""One database, one seed: NumPy, PyTorch, TensorFlow and JAX see bit-identical batches (each framework
that is not installed is skipped, with the reason)."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

# as tests/adapters/test_jax.py: two CPU devices when this module is the first to import JAX
if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import picpac  # noqa: E402
from helpers import make_db  # noqa: E402

# every key the adapters set, given, so that all four make the same batches; pert_* make them random
KEYS = dict(batch=4, seed=11, workers=2, loop=False, order="NHWC", pad=True, label_dtype="int32",
            resize_width=10, resize_height=8, perturb=True, pert_hflip=True, pert_angle=20, pert_color1=10,
            mean=[10, 20, 30], std=2)
FRAMEWORKS = {"torch": "PyTorch ('picpac[torch]')", "tensorflow": "TensorFlow ('picpac[tf]')",
              "jax": "JAX ('picpac[jax]')"}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return make_db(tmp_path_factory.mktemp("cross") / "db.picpac", n=22, size=(12, 9))


@pytest.fixture(scope="module")
def reference(db):
    """The NumPy stream's batches of two epochs (0 and 3)."""
    out = []
    with picpac.ImageStream(db, **KEYS) as stream:
        for epoch in (0, 3):
            stream.set_epoch(epoch)
            out.append([tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in b) for b in stream])
    return out


def torch_batches(db):
    import torch
    from picpac.adapters.torch import TorchLoader

    with TorchLoader(db, memory_format=torch.channels_last, **KEYS) as loader:
        out = []
        for epoch in (0, 3):
            loader.set_epoch(epoch)
            # the NHWC batch seen as a channels_last NCHW tensor: permuted back, the same memory
            out.append([(images.permute(0, 2, 3, 1).numpy(), labels.numpy(), pad) for images, labels, pad in loader])
        return out


def tf_batches(db):
    from picpac.adapters.tf import tf_dataset

    with picpac.ImageStream(db, **KEYS) as stream:
        dataset = tf_dataset(stream)
        out = []
        for epoch in (0, 3):
            stream.set_epoch(epoch)
            out.append([tuple(x.numpy() for x in element) for element in dataset])
        return out


def jax_batches(db):
    from picpac.adapters.jax import JaxLoader

    with JaxLoader(db, **KEYS) as loader:
        out = []
        for epoch in (0, 3):
            loader.set_epoch(epoch)
            out.append([(np.asarray(images), np.asarray(labels), pad) for images, labels, pad in loader])
        return out


BATCHES = {"torch": torch_batches, "tensorflow": tf_batches, "jax": jax_batches}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_bit_identical_batches(db, reference, framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{FRAMEWORKS[framework]} is not installed")
    got = BATCHES[framework](db)
    assert [len(epoch) for epoch in got] == [len(epoch) for epoch in reference] == [6, 6]
    assert [int(b[1][0]) for b in reference[0]] != [int(b[1][0]) for b in reference[1]]  # two orders
    for epoch, want_epoch in zip(got, reference):
        for (images, labels, pad), (want_images, want_labels, want_pad) in zip(epoch, want_epoch):
            assert images.dtype == want_images.dtype == np.float32
            assert images.shape == want_images.shape == (4, 8, 10, 3)
            assert images.tobytes() == want_images.tobytes()  # bit for bit
            assert labels.dtype == want_labels.dtype == np.int32 and labels.tobytes() == want_labels.tobytes()
            assert int(pad) == want_pad
