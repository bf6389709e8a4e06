"""picpac/stores/hf.py: the columns of Hugging Face tables, from the features ``datasets`` writes (classification,
detection as a struct of lists, a list of structs, the older Sequence form) and the options; boxes in pixels."""
from __future__ import annotations

import json

import pytest

from picpac.errors import FormatError, SourceError
from picpac.stores import hf

from helpers import hf_datasets

pa = pytest.importorskip("pyarrow", reason="the parquet format needs pyarrow (pip install picpac[parquet])")


def features_of(datasets, features) -> tuple:
    """The Arrow schema ``datasets`` makes of ``features``, and the features as its schema metadata has them."""
    schema = datasets.Features(features).arrow_schema
    return schema, hf.schema_features(schema, "t.parquet")


def test_classification_columns_from_the_features(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    schema, features = features_of(datasets, {
        "id": datasets.Value("int64"), "photo": datasets.Image(), "thumb": datasets.Image(),
        "fine": datasets.ClassLabel(names=["a", "b"]), "coarse": datasets.ClassLabel(names=["x"]),
        "caption": datasets.Value("string"), "score": datasets.Value("float32"), "ok": datasets.Value("bool"),
        "blob": datasets.Value("binary"), "tags": datasets.List(datasets.Value("string"))})
    table = hf.layout(schema, features, "t.parquet")
    assert (table.image, table.label, table.classes) == ("photo", "fine", ["a", "b"])
    assert table.fields == ["thumb", "blob"] and table.meta == ["id", "coarse", "caption", "score", "ok"]
    assert table.objects is None and table.metadata == {"classes": ["a", "b"]}  # list columns are left out
    table = hf.layout(schema, features, "t.parquet", image_column="thumb", label_column="coarse")
    assert (table.image, table.label, table.classes, table.fields) == ("thumb", "coarse", ["x"], ["photo", "blob"])
    with pytest.raises(SourceError, match=r"t.parquet: column 'caption' holds string, not numbers"):
        hf.layout(schema, features, "t.parquet", label_column="caption")
    with pytest.raises(SourceError, match=r"t.parquet: column 'id' holds int64, not images"):
        hf.layout(schema, features, "t.parquet", image_column="id")
    with pytest.raises(SourceError, match=r"no column 'label' \(--label-column\); its columns are id, photo"):
        hf.layout(schema, features, "t.parquet", label_column="label")


@pytest.mark.parametrize("form", ["struct of lists", "list of structs", "sequence of a dict"])
def test_detection_columns_and_their_class_names(form, monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    box = datasets.List(datasets.Value("float32"), length=4)
    category = datasets.ClassLabel(names=["cat", "dog"])
    objects = {"struct of lists": {"bbox": datasets.List(box), "category": datasets.List(category)},
               "list of structs": datasets.List({"bbox": box, "category": category}),
               "sequence of a dict": datasets.Sequence({"bbox": box, "category": category})}[form]
    schema, features = features_of(datasets, {"image": datasets.Image(), "objects": objects,
                                              "width": datasets.Value("int32")})
    if form == "sequence of a dict":  # as datasets before 4.0 wrote it
        features["objects"] = {"feature": {"bbox": {"feature": {"dtype": "float32", "_type": "Value"}, "length": 4,
                                                    "_type": "Sequence"},
                                           "category": {"names": ["cat", "dog"], "_type": "ClassLabel"}},
                               "_type": "Sequence"}
    table = hf.layout(schema, features, "d.parquet")
    assert (table.image, table.label, table.objects, table.classes, table.meta) == \
        ("image", None, "objects", ["cat", "dog"], ["width"])


def test_boxes_in_either_format_and_their_errors():
    objects = {"bbox": [[10, 20, 30, 40], [0, 0, 5, 5]], "category": [1, 0], "area": [1, 2]}
    assert hf.boxes(objects, "r", "xywh") == [(10.0, 20.0, 30.0, 40.0, 1), (0.0, 0.0, 5.0, 5.0, 0)]
    assert hf.boxes(objects, "r", "xyxy") == [(10.0, 20.0, 20.0, 20.0, 1), (0.0, 0.0, 5.0, 5.0, 0)]
    rows = [{"bbox": [1, 2, 3, 4], "label": 3}]
    assert hf.boxes(rows, "r", "xywh") == [(1.0, 2.0, 3.0, 4.0, 3)]
    for bad, message in (({"bbox": [[1, 2, 3]], "category": [0]}, "is not 4 finite numbers"),
                         ({"bbox": [[1, 2, 3, float("nan")]], "category": [0]}, "is not 4 finite numbers"),
                         ({"bbox": [[1, 2, 3, 4]], "category": []}, "1 boxes but 0 category ids"),
                         ({"bbox": [[1, 2, 3, 4]], "category": [-1]}, "category id -1 is not a class id"),
                         ({"bbox": [[5, 5, 1, 1]], "category": [0]}, r"negative size as xyxy; is it xywh\?")):
        with pytest.raises(SourceError, match=message):
            hf.boxes(bad, "r", "xyxy")


def test_metadata_that_is_not_json_is_named():
    schema = pa.schema([("image", pa.binary())], metadata={b"huggingface": b"{not json"})
    with pytest.raises(FormatError, match="t.parquet: its schema's huggingface metadata is not JSON"):
        hf.schema_features(schema, "t.parquet")
    schema = pa.schema([("image", pa.binary())], metadata={b"picpac": json.dumps([1]).encode()})
    with pytest.raises(FormatError, match="t.parquet: its schema's picpac metadata is not an object"):
        hf.layout(schema, None, "t.parquet")
    table = hf.layout(pa.schema([("image", pa.binary()), ("n", pa.int8())]), None, "t.parquet")
    assert (table.image, table.meta) == ("image", ["n"])  # no features: the binary column holds the images
