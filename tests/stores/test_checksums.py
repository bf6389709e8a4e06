"""CRC32C (picpac/stores/crc32c.py): known values, and the three implementations agree."""
from __future__ import annotations

import numpy as np

from picpac import stores

from store_helpers import crc32c_bitwise


def test_crc32c_known_values():
    # the check value of CRC-32C and the iSCSI vectors of RFC 3720 (TensorFlow's crc32c_test.cc has them)
    vectors = {b"123456789": 0xE3069283, bytes(32): 0x8A9136AA, b"\xff" * 32: 0x62A8AB43,
               bytes(range(32)): 0x46DD794E, bytes(range(31, -1, -1)): 0x113FDB5C}
    for data, crc in vectors.items():
        assert crc32c_bitwise(data) == crc
        assert stores.crc32c(data) == stores.crc32c_python(data) == stores.crc32c_numpy(data) == crc
    rng = np.random.default_rng(1)
    for n in (0, 1, 255, 256, 257, 1000, 4099, 70_001):
        data = rng.integers(0, 256, n, np.uint8).tobytes()
        assert stores.crc32c_numpy(data) == stores.crc32c_python(data) == stores.crc32c(data)
        assert stores.crc32c_numpy(data[10:], stores.crc32c(data[:10])) == stores.crc32c(data)
    assert crc32c_bitwise(b"x" * 300) == stores.crc32c_numpy(b"x" * 300)
