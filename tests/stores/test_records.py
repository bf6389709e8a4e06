"""PPR1 records (picpac/stores/records.py): the CRC32 names the damaged record (lmdb, binary)."""
from __future__ import annotations

import os
import re

import pytest

from picpac import stores
from picpac.errors import CorruptError

from helpers import payload
from store_helpers import _needs, store_path


@pytest.mark.parametrize("kind", ["lmdb", "binary"])
def test_ppr1_crc_names_the_damaged_record(kind, db, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    target = os.path.join(path, "data.mdb") if kind == "lmdb" else path
    data = bytearray(open(target, "rb").read())
    at = data.find(payload(6, 50 + 97 * 6))
    data[at + 10] ^= 0xFF
    open(target, "wb").write(data)
    with stores.open_reader(path, kind) as r:
        r[5]
        with pytest.raises(CorruptError, match=re.escape(path) + r": record 6 fails its CRC32"):
            r[6]
