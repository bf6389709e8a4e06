"""Limits of layout's parsers: field tables, array declarations and JSON from a file stay bounded."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from picpac.errors import FormatError
from picpac.file.layout import MAX_ARRAY_BYTES, MAX_ARRAY_DIMS, field_table, load_json, parse_arrays


def test_field_tables_for_many_counts_are_not_all_kept():
    """Each table of ~60,000 fields takes ~4 MB; 40 distinct counts once kept 160 MB."""
    assert field_table(3) is field_table(3) and field_table(3).size == 36
    assert field_table(100) is field_table(100) and field_table(100).size == 1200
    tracemalloc.start()
    try:
        for n in range(60_000, 60_040):
            field_table(n)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 40 << 20


def declare(spec: dict) -> dict:
    return parse_arrays({"fields": ["image"], "arrays": {"image": spec}}, "db.picpac")


@pytest.mark.parametrize("spec, why", [
    ({"shape": [2**40, 2**40], "dtype": "float64"}, "declares 1099511627776x1099511627776 float64 arrays of"),
    ({"shape": [2**32] * 4, "dtype": "uint8"}, "declares .* bytes, more than 281474976710656"),
    ({"shape": [2**62], "dtype": "uint8"}, "needs a 'shape' of 1 to 32 positive ints"),
    ({"shape": [-4, 4], "dtype": "uint8"}, "needs a 'shape'"),
    ({"shape": [1] * (MAX_ARRAY_DIMS + 1), "dtype": "uint8"}, "needs a 'shape' of 1 to 32"),
    ({"shape": [4], "dtype": "u1," * 10_000}, "has a bad 'dtype'.*not the name of a plain numeric type"),
    ({"shape": [4], "dtype": {"names": ["a"], "formats": ["u1"]}}, "has a bad 'dtype'.*not the name"),
    ({"shape": [4], "dtype": "(1000000,)u1"}, "has a bad 'dtype'.*not a plain numeric type"),
    ({"shape": [4], "dtype": "O"}, "has a bad 'dtype'"),
    ({"shape": [4], "dtype": "V16"}, "has a bad 'dtype'"),
])
def test_bad_array_declarations_name_the_field(spec, why):
    with pytest.raises(FormatError, match=f"db.picpac: metadata 'arrays' field 'image' {why}"):
        declare(spec)


def test_array_declarations_within_the_limits():
    spec = declare({"shape": [2**16, 2**16, 2**15], "dtype": ">f2"})["image"]
    assert spec.nbytes == MAX_ARRAY_BYTES and spec.dtype == np.dtype(">f2")
    assert declare({"shape": [1] * MAX_ARRAY_DIMS, "dtype": "bool"})["image"].nbytes == 1
    with pytest.raises(FormatError, match="more than 99"):
        parse_arrays({"arrays": {"image": {"shape": [10, 10], "dtype": "uint8"}}}, "db.picpac", limit=99)


@pytest.mark.parametrize("data, why", [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"a": ' * 100_000, "nested too deeply"),
    (b"{bad", "Expecting property name"),
    (b"\xff\xfe\xfa", "codec can't decode"),
    (b"1" * 5000, "Exceeds the limit"),
], ids=["list", "object", "syntax", "utf8", "digits"])
def test_load_json_turns_every_failure_into_the_given_error(data, why):
    with pytest.raises(FormatError, match=f"^where: .*{why}"):
        load_json(data, lambda reason: FormatError(f"where: {reason}"))
    assert load_json(memoryview(b'{"a": [1]}'), FormatError) == {"a": [1]}
