"""Other storage formats: a small reader and writer per format over picpac's record model.

Each format stores a picpac record (named bytes fields, a float label, an optional int group, a small
JSON meta) and the dataset metadata, so picpac -> format -> picpac keeps every byte. The layouts
(docs/stores.md), one module each:

* ``lmdb``: keys ``%010d`` -> the record serialised as PPR1 (:func:`encode_record`); key
  ``__picpac__`` holds the store's description and the dataset metadata. Needs ``lmdb``.
* ``tfrecord``: TFRecord framing (lengths and data with masked CRC32C) of ``tf.train.Example``
  protobufs, encoded and decoded here without TensorFlow.
* ``hdf5``: one variable-length uint8 dataset per field, label/group arrays, meta strings; read
  lazily, record by record. Needs ``h5py``.
* ``npz``: an uncompressed ``.npz`` of plain arrays (each field's bytes joined, plus offsets), read
  through a memory map.
* ``sqlite``: one table, one BLOB column per field, the record number as primary key.
* ``tar``: WebDataset-style members ``%06d.<field>``, ``.cls`` label, ``.json`` meta.
* ``binary``: a data file of PPR1 records and a ``.idx`` NumPy file of their offsets.

And tables of other libraries' datasets (``TABLE_KINDS``), read by column: ``parquet`` (read and written as
Hugging Face's ``datasets`` does), ``arrow`` (``Dataset.save_to_disk`` folders) and ``mds`` (MosaicML
Streaming's shards); ``hf`` reads Hugging Face's features. Parquet and Arrow need ``pyarrow``.

Shared: ``base`` (writer and reader base classes), ``checksums`` (CRC32C), ``records`` (PPR1),
``example`` (tf.train.Example), ``convert`` (open by format name, sizes, import and export, the
imports of LMDB and HDF5 in a child process on ``engine/child.py``). The package imports only the file
and engine layers and the standard library (and lmdb / h5py / pyarrow lazily, inside the functions that need them).
"""
from __future__ import annotations

from .arrow import ArrowReader
from .base import KINDS, TABLE_KINDS, MissingPackageError, StoreReader, StoreWriter
from .binary import BinaryReader, BinaryWriter, index_path
from .convert import (READERS, WRITERS, ConvertReport, IsolatedReader, export_store, import_store, open_reader,
                      open_writer, store_size)
from .checksums import crc32c, crc32c_numpy, crc32c_python, masked_crc32c
from .example import decode_example, encode_example, read_varint
from .hdf5 import HDF5Reader, HDF5Writer
from .lmdb import LMDB_META_KEY, LmdbReader, LmdbWriter
from .mds import MdsReader
from .npz import NPZ_META_KEY, NpzReader, NpzWriter
from .parquet import ParquetReader, ParquetWriter, TablePlan, plan_table
from .records import PPR_MAGIC, decode_record, encode_record
from .sqlite import SqliteReader, SqliteWriter
from .tar import TarReader, TarWriter
from .tfrecord import TFRecordReader, TFRecordWriter, tfrecord_frame

__all__ = [
    "KINDS", "TABLE_KINDS", "MissingPackageError", "StoreReader", "StoreWriter", "READERS", "WRITERS", "ConvertReport",
    "export_store", "import_store", "open_reader", "open_writer", "store_size", "IsolatedReader",
    "LmdbReader", "LmdbWriter", "LMDB_META_KEY", "TFRecordReader", "TFRecordWriter", "tfrecord_frame",
    "HDF5Reader", "HDF5Writer", "NpzReader", "NpzWriter", "NPZ_META_KEY", "SqliteReader", "SqliteWriter",
    "TarReader", "TarWriter", "BinaryReader", "BinaryWriter", "index_path", "ParquetReader", "ParquetWriter",
    "TablePlan", "plan_table", "ArrowReader", "MdsReader",
    "crc32c", "crc32c_numpy", "crc32c_python", "masked_crc32c",
    "PPR_MAGIC", "decode_record", "encode_record", "decode_example", "encode_example", "read_varint",
]
