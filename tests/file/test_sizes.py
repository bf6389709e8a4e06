import pytest

from picpac.errors import PicPacValueError
from picpac.file.sizes import parse_size


def test_parse_size():
    assert [parse_size(v) for v in ("500MB", "1GB", "1GiB", "2k", 7, "1.5M")] == \
        [500 * 10**6, 10**9, 2**30, 2000, 7, 1_500_000]


@pytest.mark.parametrize("bad", ["1XB", "", "-1MB", "0", 0, True])
def test_parse_size_refuses_what_is_no_positive_size(bad):
    with pytest.raises(PicPacValueError, match="cache_limit"):
        parse_size(bad, "cache_limit")
