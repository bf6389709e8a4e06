"""picpac/stores/arrow.py: ``Dataset.save_to_disk`` folders (state.json, dataset_info.json, data-*.arrow in Arrow's
stream format) read by their features, in order, with direct access to any row."""
from __future__ import annotations

import json

import pytest

from picpac import stores
from picpac.errors import FormatError, SourceError

from helpers import hf_datasets, imagenet_jpegs

pytest.importorskip("pyarrow", reason="the arrow format needs pyarrow (pip install picpac[parquet])")


def test_reads_a_save_to_disk_folder_of_several_files(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    jpegs = imagenet_jpegs(9)
    features = datasets.Features({"img": datasets.Image(), "y": datasets.ClassLabel(names=[str(i) for i in range(9)]),
                                  "name": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({"img": [{"bytes": data, "path": name} for name, data, _ in jpegs],
                                     "y": list(range(9))[::-1], "name": [name for name, *_ in jpegs]},
                                    features=features)
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "data-00000-of-00003.arrow", "data-00001-of-00003.arrow", "data-00002-of-00003.arrow",
        "dataset_info.json", "state.json"]
    with stores.open_reader(tmp_path / "saved", "arrow") as r:
        assert len(r) == 9 and r.fields == ["image"] and r.classes == [str(i) for i in range(9)]
        assert [bytes(x["image"]) for x in r] == [data for _, data, _ in jpegs]
        assert [x.label for x in r] == [float(8 - i) for i in range(9)]
        assert r[4].meta == {"name": jpegs[4][0]} and bytes(r[7]["image"]) == jpegs[7][1]
        assert r.where(4).endswith("data-00001-of-00003.arrow: row 1")
    with stores.open_reader(tmp_path / "saved" / "data-00002-of-00003.arrow", "arrow") as r:  # one file
        assert len(r) == 3 and r.classes == [str(i) for i in range(9)]  # its schema metadata has the features


def test_a_folder_that_is_no_saved_dataset_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="empty: no .arrow files"):
        stores.open_reader(tmp_path / "empty", "arrow")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../elsewhere.arrow"}]}))
    with pytest.raises(FormatError, match="lies outside the folder"):
        stores.open_reader(bad, "arrow")
    (bad / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data.arrow"}]}))
    (bad / "data.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(FormatError, match="bad: damaged arrow store"):
        stores.open_reader(bad, "arrow")
