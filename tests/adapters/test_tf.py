"""picpac.adapters.tf: tf.data.Datasets of a stream's batches (signature, values, epochs) and of any
DataFlow (tensorpack's dataflow_to_dataset)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install 'picpac[tf]')")

import picpac  # noqa: E402
from picpac.adapters.tf import dataflow_to_dataset, stream_signature, tf_dataset  # noqa: E402
from picpac.dataflow import BatchData, DataFromList, MapData, PicPacData  # noqa: E402
from helpers import make_db  # noqa: E402

KEYS = dict(batch=4, seed=7, workers=2)
SIZE = dict(resize_width=8, resize_height=6)


@pytest.fixture
def db(tmp_path):
    """22 images of 8x6, image i filled with (i, 2i, 3i) and labelled i: the last batch of 4 is short."""
    return make_db(tmp_path / "db.picpac", n=22)


def numpy_batches(db, **keys):
    with picpac.ImageStream(db, **{"loop": False, "order": "NHWC", "label_dtype": "int64", **keys}) as stream:
        return [tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in b) for b in stream]


def as_numpy(element):
    return tuple(x.numpy() for x in element)


def records(batches) -> list[int]:
    return [int(x) for batch in batches for x in batch[1][:len(batch[1]) - int(batch[-1])]]


def test_signature_and_values_equal_the_numpy_stream(db):
    dataset = tf_dataset(db, **KEYS, **SIZE)
    assert dataset.element_spec == (tf.TensorSpec((None, 6, 8, 3), tf.float32), tf.TensorSpec((None,), tf.int64),
                                    tf.TensorSpec((), tf.int32))
    assert int(dataset.cardinality()) == 6  # batches per pass
    got = [as_numpy(element) for element in dataset]
    want = numpy_batches(db, **KEYS, **SIZE)
    assert len(got) == len(want) == 6 and got[-1][0].shape == (2, 6, 8, 3)
    for (images, labels, pad), (np_images, np_labels, np_pad) in zip(got, want):
        assert images.dtype == np.float32 and labels.dtype == np.int64 and pad.dtype == np.int32
        assert np.array_equal(images, np_images) and np.array_equal(labels, np_labels) and pad == np_pad
        assert images.tobytes() == np_images.tobytes()  # bit for bit
    assert sorted(records(got)) == list(range(22))


@pytest.mark.parametrize("keys, spec", [
    (dict(pad=True), ((4, 6, 8, 3), tf.float32, (4,), tf.int64)),              # every batch full
    (dict(loop=True), ((4, 6, 8, 3), tf.float32, (4,), tf.int64)),
    (dict(order="NCHW", dtype="uint8"), ((None, 3, 6, 8), tf.uint8, (None,), tf.int64)),
    (dict(onehot=22), ((None, 6, 8, 3), tf.float32, (None, 22), tf.float32)),   # one-hot rows stay float32
    (dict(label_dtype="float32"), ((None, 6, 8, 3), tf.float32, (None,), tf.float32)),
    (dict(crop_width=4, crop_height=4, resize_width=0, resize_height=0),
     ((None, 4, 4, 3), tf.float32, (None,), tf.int64)),
])
def test_signature_follows_the_config(db, keys, spec):
    images, image_dtype, labels, label_dtype = spec
    dataset = tf_dataset(db, **KEYS, **{**SIZE, **keys})
    assert dataset.element_spec == (tf.TensorSpec(images, image_dtype), tf.TensorSpec(labels, label_dtype),
                                    tf.TensorSpec((), tf.int32))
    for element in dataset.take(7):  # every element fits it (TensorFlow checks)
        assert element[0].dtype == image_dtype
    assert int(dataset.cardinality()) == (tf.data.INFINITE_CARDINALITY if keys.get("loop") else 6)


def test_sizes_that_can_vary_are_none(db):
    """Without a fixed output size the spatial sizes are None (the channels stay); a raw field is strings."""
    dataset = tf_dataset(db, batch=1, raw=["image"], shuffle=False)
    images_spec, labels_spec, raw_spec, pad_spec = dataset.element_spec
    assert images_spec == tf.TensorSpec((None, None, None, 3), tf.float32)
    assert raw_spec == tf.TensorSpec((None,), tf.string)
    images, labels, raw, pad = next(iter(dataset))
    with picpac.Reader(db) as reader:
        assert raw.numpy().tolist() == [bytes(reader[int(labels[0])]["image"])]
    with picpac.ImageStream(db, batch=1, channels=-1) as stream:
        assert stream_signature(stream)[0] == tf.TensorSpec((1, None, None, None), tf.float32)


def test_each_iteration_is_the_next_epoch(db):
    dataset = tf_dataset(db, **KEYS, **SIZE)
    with picpac.ImageStream(db, loop=False, **KEYS, **SIZE) as stream:
        for epoch in range(3):
            stream.set_epoch(epoch)
            assert records(as_numpy(e) for e in dataset) == records(stream)


def test_own_stream_and_set_epoch(db):
    with picpac.ImageStream(db, loop=False, order="NHWC", **KEYS, **SIZE) as stream, \
            picpac.ImageStream(db, loop=False, order="NHWC", **KEYS, **SIZE) as reference:
        dataset = tf_dataset(stream)  # its signature is peeked: nothing of the stream is consumed
        assert dataset.element_spec[1] == tf.TensorSpec((None,), tf.float32)
        orders = {}
        for epoch in (0, 1, 0, 5):
            stream.set_epoch(epoch)
            reference.set_epoch(epoch)
            got = [as_numpy(e) for e in dataset]
            want = list(reference)
            assert records(got) == records(want) and sorted(records(got)) == list(range(22))
            assert all(np.array_equal(a[0], b[0]) for a, b in zip(got, want))
            orders.setdefault(epoch, records(got))
        assert orders[0] != orders[1] != orders[5]
        with pytest.raises(picpac.PicPacError, match="config"):
            tf_dataset(stream, batch=2)


def test_output_signature_and_prefetch_options(db):
    signature = (tf.TensorSpec((None, 6, 8, 3), tf.float32), tf.TensorSpec((None,), tf.int64),
                 tf.TensorSpec((), tf.int32))
    dataset = tf_dataset(db, output_signature=signature, prefetch=False, **KEYS, **SIZE)
    assert dataset.element_spec == signature and len(list(dataset)) == 6
    assert len(list(tf_dataset(db, prefetch=2, **KEYS, **SIZE))) == 6
    with pytest.raises(picpac.PicPacError, match="prefetch"):
        tf_dataset(db, prefetch=-1, **KEYS)
    with pytest.raises(picpac.PicPacError, match="database"):
        tf_dataset(None)
    assert len(list(tf_dataset({"db": str(db), **KEYS, **SIZE}))) == 6


def test_one_iteration_at_a_time(db):
    # each iteration is a pass of the dataset's one stream: a second replaces the first, and the first's next
    # batch is an error, not a batch of the second's pass
    dataset = tf_dataset(db, prefetch=False, **KEYS, **SIZE)
    first = iter(dataset)
    next(first), next(first)
    second = iter(dataset)
    got = [as_numpy(next(second))]
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch 2 asked for where batch 1 comes next: one "
                                                              "iteration of a tf_dataset at a time"):
        next(first)
    got += [as_numpy(element) for element in second]
    assert len(got) == 6 and sorted(records(got)) == list(range(22))


def test_a_pass_ends_with_its_last_batch(db):
    # the dataset never asks for a batch past the last, so the stream ends its decoding threads with the last
    # batch itself, not at the next pass
    before = set(threading.enumerate())
    dataset = tf_dataset(db, prefetch=False, **KEYS, **SIZE)
    assert len(list(dataset)) == 6
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("picpac-stream")]


@pytest.mark.parametrize("spec, found", [
    (tf.TensorSpec((None, 6, 8, 3), tf.uint8), r"float32 \(4, 6, 8, 3\)"),   # the stream's images are float32
    (tf.TensorSpec((None, 5, 8, 3), tf.float32), r"float32 \(4, 6, 8, 3\)"),
])
def test_a_signature_that_does_not_fit_is_an_error(db, spec, found):
    signature = (spec, tf.TensorSpec((None,), tf.int64), tf.TensorSpec((), tf.int32))
    dataset = tf_dataset(db, output_signature=signature, **KEYS, **SIZE)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"component 0 of a batch is {found}, where the "
                                                              "output_signature has"):
        list(dataset)


def test_skip_errors_passes_end_with_the_stream(tmp_path):
    # with skip_errors a pass's batch count is known only at its end: the cardinality is unknown
    db = make_db(tmp_path / "broken.picpac", n=22, broken=(3, 17))
    dataset = tf_dataset(db, skip_errors=True, **KEYS, **SIZE)
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    for _ in range(2):
        got = [as_numpy(element) for element in dataset]
        assert len(got) == 5 and sorted(records(got)) == [i for i in range(22) if i not in (3, 17)]


MMAPPED_CHUNKS = """
import ctypes, sys
import numpy as np
from picpac.adapters.tf import dataflow_to_dataset, tf_dataset
from picpac.dataflow import DataFromList

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "stream":
    dataset = tf_dataset(sys.argv[2], batch=4, resize_width=8, resize_height=6)
else:
    dataset = dataflow_to_dataset(DataFromList([[np.zeros(3)]] * 4))
assert len(list(dataset)) in (4, 6)
before = libc.mallinfo2().hblks
kept = [np.ones(300_000, np.uint8) for _ in range(50)]  # image-sized arrays, as the decoders make
mmapped = libc.mallinfo2().hblks - before
del kept  # 15 MB freed, most at the heap's top: kept for the next arrays, not handed back to the kernel
print(mmapped, libc.mallinfo2().keepcost)
"""


@pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"), reason="glibc >= 2.33 only")
@pytest.mark.parametrize("kind", ["stream", "dataflow"])
def test_a_pass_leaves_mallocs_heap_in_use(db, kind):
    # TensorFlow's generator datasets set glibc's mmap threshold to 128 KiB for the whole process: every
    # image-sized array a fresh mmap, faulted in page by page (half W1's throughput); the adapter sets it back.
    # Nor is freed memory trimmed past 128 KiB (setting any threshold froze glibc's trim threshold there): each
    # batch's pages were handed back and faulted in again. A fresh process, so the heap starts as a training
    # script's does: 41 of these 50 were mmapped before, and most of the 15 MB was handed back.
    out = subprocess.run([sys.executable, "-c", MMAPPED_CHUNKS, kind, str(db)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    mmapped, kept_at_top = map(int, out.stdout.split()[-2:])
    assert mmapped == 0
    assert kept_at_top >= 8_000_000  # without the fix, 1.6 MB


def test_no_autotuning_thread(db):
    # the stream reads ahead itself; deleting an iterator waited for TF's autotune thread (up to 2 s)
    assert tf_dataset(db, **KEYS, **SIZE).options().autotune.enabled is False
    assert dataflow_to_dataset(DataFromList([[1]])).options().autotune.enabled is False


@tf.autograph.experimental.do_not_convert
def drop_pad(images, labels, pad):
    return images, labels


def test_keras_takes_the_dataset(db):
    keras = pytest.importorskip("keras")
    dataset = tf_dataset(db, pad=True, **KEYS, **SIZE)
    model = keras.Sequential([keras.Input((6, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(22)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "your input ran out of data": the cardinality is known
        warnings.filterwarnings("ignore", "`shuffle=True`")
        history = model.fit(dataset.map(drop_pad), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


# -- DataFlows ------------------------------------------------------------------------------------------------------
def test_dataflow_of_a_picpac_file(db):
    """A real DataFlow: the database's records decoded, batched with the short last batch kept."""
    df = BatchData(PicPacData(db, shuffle=False), 4, remainder=True)
    dataset = dataflow_to_dataset(df)
    assert dataset.element_spec == (tf.TensorSpec((None, None, None, None), tf.uint8),
                                    tf.TensorSpec((None,), tf.float32))
    reference = BatchData(PicPacData(db, shuffle=False), 4, remainder=True)
    reference.reset_state()
    want = list(reference)
    for _ in range(2):  # each iteration is a pass; the first one's first datapoint (peeked) is not lost
        got = [as_numpy(e) for e in dataset]
        assert len(got) == len(want) == 6
        for (images, labels), (np_images, np_labels) in zip(got, want):
            assert images.dtype == np.uint8 and np.array_equal(images, np_images)
            assert np.array_equal(labels, np_labels)
        assert got[0][0].shape == (4, 6, 8, 3) and got[-1][0].shape == (2, 6, 8, 3)


def test_dataflow_types_and_shapes():
    items = [[np.full((2, 3), i, np.float32), i] for i in range(5)]
    df = MapData(DataFromList(items, shuffle=False), lambda dp: [dp[0] * 2, dp[1]])
    # tensorpack's form: the types, sizes unknown
    dataset = dataflow_to_dataset(df, [tf.float32, tf.int64])
    assert dataset.element_spec == (tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.int64))
    got = [as_numpy(e) for e in dataset]
    assert [int(label) for _, label in got] == list(range(5)) and got[0][1].dtype == np.int64
    assert all(np.array_equal(a, np.full((2, 3), 2 * i, np.float32)) for i, (a, _) in enumerate(got))
    # with shapes
    dataset = dataflow_to_dataset(DataFromList(items, shuffle=False), ["float32", "int32"], [(2, 3), ()])
    assert dataset.element_spec == (tf.TensorSpec((2, 3), tf.float32), tf.TensorSpec((), tf.int32))
    assert len(list(dataset)) == 5
    # inferred with shapes: Python ints as int32 (as BatchData batches them)
    dataset = dataflow_to_dataset(DataFromList(items, shuffle=False), shapes=[(2, 3), ()])
    assert dataset.element_spec == (tf.TensorSpec((2, 3), tf.float32), tf.TensorSpec((), tf.int32))
    with pytest.raises(picpac.PicPacError, match="shapes"):
        dataflow_to_dataset(DataFromList(items, shuffle=False), ["float32"], [(2, 3), ()])


def test_dataflow_dicts_and_strings():
    items = [{"x": np.arange(3, dtype=np.int16) + i, "name": f"item{i}".encode()} for i in range(4)]
    dataset = dataflow_to_dataset(DataFromList(items, shuffle=False))
    assert dataset.element_spec == {"x": tf.TensorSpec((None,), tf.int16), "name": tf.TensorSpec((), tf.string)}
    got = list(dataset)
    assert [e["name"].numpy() for e in got] == [b"item0", b"item1", b"item2", b"item3"]
    assert got[3]["x"].numpy().tolist() == [3, 4, 5]


def test_dataflow_errors():
    with pytest.raises(picpac.PicPacError, match="DataFlow"):
        dataflow_to_dataset([1, 2, 3])
    with pytest.raises(picpac.PicPacError, match="no datapoint"):
        dataflow_to_dataset(DataFromList([], shuffle=False))


def test_missing_tensorflow_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "picpac.adapters.tf")
    with pytest.raises(picpac.adapters.MissingFrameworkError, match=r"pip install 'picpac\[tf\]'"):
        importlib.import_module("picpac.adapters.tf")
