"""Tables as Hugging Face ``datasets`` writes them (Parquet files, ``save_to_disk`` Arrow folders): which column
holds the images, the labels, the detection boxes and the meta, read from the features the schema declares
(the ``huggingface`` key of its metadata, a JSON ``{"info": {"features": {...}}}``), and rows of record batches
as picpac records. Needs ``pyarrow`` (``pip install picpac[parquet]``), imported by the caller."""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, SourceError
from ..file.layout import load_json
from .base import require_package

HF_KEY = b"huggingface"
PICPAC_KEY = b"picpac"
"""Schema metadata keys: Hugging Face's features, and what picpac's export adds (its dataset metadata, the
columns of its fields, label, group and meta), so that picpac -> parquet -> picpac keeps every record."""
CATEGORY_KEYS = ("category", "categories", "label", "labels")
"""The key of a detection column's class ids (the Hub's detection datasets use ``category``)."""
BBOX_FORMATS = ("xywh", "xyxy")


def pyarrow() -> Any:
    """The ``pyarrow`` module, or a MissingPackageError naming the extra that installs it."""
    require_package("pyarrow", "parquet", extra="parquet")
    return __import__("pyarrow")


@dataclass
class Layout:
    """What each column of a table becomes in a picpac record."""

    image: str | None
    """The column of the images (an Image feature: ``struct<bytes, path>``; or a binary column)."""
    label: str | None = None
    classes: list[str] | None = None
    objects: str | None = None
    """A detection column: a struct of lists (``bbox``, ``category``) or a list of such structs."""
    fields: list[str] = field(default_factory=list)
    """Other binary (or Image) columns: fields of their name."""
    meta: list[str] = field(default_factory=list)
    """Scalar columns (numbers, strings, booleans): the record's meta."""
    json_meta: list[str] = field(default_factory=list)
    """String columns of JSON text (picpac's export of meta values that are not scalars)."""
    group: str | None = None
    meta_keys: dict[str, str] = field(default_factory=dict)
    """The meta key of a column whose name is not the key (picpac's export renames a key that is a field's name)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The dataset metadata (``classes``, and what picpac's export kept)."""
    image_field: str = "image"

    @property
    def columns(self) -> list[str]:
        """The columns read, in record order."""
        named = [self.image, self.label, self.objects, self.group, *self.fields, *self.meta, *self.json_meta]
        return list(dict.fromkeys(c for c in named if c))


def schema_features(schema: Any, where: str) -> dict[str, Any] | None:
    """The features of the ``huggingface`` key of an Arrow schema's metadata (None when it has none)."""
    raw = (schema.metadata or {}).get(HF_KEY)
    if raw is None:
        return None
    info = load_json(raw, lambda why: FormatError(f"{where}: its schema's huggingface metadata is not JSON ({why})"))
    features = info.get("info", {}).get("features") if isinstance(info, dict) and isinstance(info.get("info"), dict) \
        else None
    if features is not None and not isinstance(features, dict):
        raise FormatError(f"{where}: its schema's huggingface features are a {type(features).__name__}, not an object")
    return features


def picpac_schema(schema: Any, where: str) -> dict[str, Any]:
    """What picpac's export wrote under the schema's ``picpac`` key ({} for a table written elsewhere)."""
    raw = (schema.metadata or {}).get(PICPAC_KEY)
    if raw is None:
        return {}
    info = load_json(raw, lambda why: FormatError(f"{where}: its schema's picpac metadata is not JSON ({why})"))
    if not isinstance(info, dict) or not isinstance(info.get("metadata", {}), dict):
        raise FormatError(f"{where}: its schema's picpac metadata is not an object with a metadata object")
    return info


def _kind(feature: Any) -> str | None:
    return feature.get("_type") if isinstance(feature, dict) else None


def _names(feature: Any) -> list[str] | None:
    """A ClassLabel feature's names (None for another feature)."""
    if _kind(feature) != "ClassLabel":
        return None
    names = feature.get("names")
    return [str(n) for n in names] if isinstance(names, list) else None


def _object_feature(feature: Any, key: str) -> Any:
    """The feature of ``key`` in a detection column's feature: a dict of Lists, or a List / Sequence of a dict."""
    if _kind(feature) in ("List", "Sequence", "LargeList"):
        feature = feature.get("feature")
    inner = feature.get(key) if isinstance(feature, dict) and _kind(feature) is None else None
    if _kind(inner) in ("List", "Sequence", "LargeList"):
        inner = inner.get("feature")
    return inner


def _is_binary(pa: Any, kind: Any) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)


def _is_image(pa: Any, kind: Any) -> bool:
    """An Image feature's storage, ``struct<bytes: binary, path: string>``."""
    return pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0 and \
        _is_binary(pa, kind.field(kind.get_field_index("bytes")).type)


def _is_scalar(pa: Any, kind: Any) -> bool:
    return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _list_item(pa: Any, kind: Any) -> Any:
    return kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None


def _detection_keys(pa: Any, kind: Any) -> tuple[str, str] | None:
    """(bbox key, category key) of a detection column's type: a struct of lists, or a list of structs."""
    struct = _list_item(pa, kind) if _list_item(pa, kind) is not None else kind
    if not pa.types.is_struct(struct) or struct.get_field_index("bbox") < 0:
        return None
    category = next((k for k in CATEGORY_KEYS if struct.get_field_index(k) >= 0), None)
    return None if category is None else ("bbox", category)


def layout(schema: Any, features: dict[str, Any] | None, where: str, image_column: str | None = None,
           label_column: str | None = None) -> Layout:
    """Which column is what, from the schema's types and ``features`` (Hugging Face's); ``image_column`` and
    ``label_column`` name them where the features do not (or name others)."""
    pa = pyarrow()
    features = features or {}
    own = picpac_schema(schema, where)
    names = list(schema.names)
    for option, column in (("--image-column", image_column), ("--label-column", label_column)):
        if column is not None and column not in names:
            raise SourceError(f"{where}: no column {column!r} ({option}); its columns are {', '.join(names)}")
    types = {name: schema.field(name).type for name in names}
    if image_column is None and own:  # picpac's export: its image field, if it had one
        image_column = own.get("image") if own.get("image") in names else None
    elif image_column is None:  # the first Image feature, else an Image's storage, else binary "image" or any
        binary = [n for n in names if _is_binary(pa, types[n])]
        image_column = next((n for n in names if _kind(features.get(n)) == "Image"), next(
            (n for n in names if _is_image(pa, types[n])), "image" if "image" in binary else next(iter(binary), None)))
    if image_column is not None and not (_is_image(pa, types[image_column]) or _is_binary(pa, types[image_column])):
        raise SourceError(f"{where}: column {image_column!r} holds {types[image_column]}, not images (an Image "
                          "feature or binary); name the image column with --image-column")
    if label_column is None:
        label_column = own.get("label") if own.get("label") in names else next(
            (n for n in names if _names(features.get(n)) is not None), None)
    if label_column is not None and not (pa.types.is_integer(types[label_column])
                                         or pa.types.is_floating(types[label_column])
                                         or pa.types.is_boolean(types[label_column])):
        raise SourceError(f"{where}: column {label_column!r} holds {types[label_column]}, not numbers; a label "
                          "column holds class ids or numbers (--label-column)")
    table = Layout(image_column, label_column, _names(features.get(label_column)) if label_column else None,
                   metadata=dict(own.get("metadata", {})), image_field=own.get("image_field") or "image")
    group = own.get("group")
    table.group = group if group in names else None
    json_meta = set(own.get("json_meta") or ())
    table.meta_keys = {str(k): str(v) for k, v in (own.get("meta_keys") or {}).items()}
    used = {image_column, label_column, table.group}
    for name in names:
        if name in used:
            continue
        kind = types[name]
        if table.objects is None and _detection_keys(pa, kind) is not None:
            table.objects = name
            if table.classes is None:
                table.classes = _names(_object_feature(features.get(name), _detection_keys(pa, kind)[1]))
        elif _is_image(pa, kind) or _is_binary(pa, kind):
            table.fields.append(name)
        elif name in json_meta and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            table.json_meta.append(name)
        elif _is_scalar(pa, kind):
            table.meta.append(name)
    if table.classes is None and isinstance(table.metadata.get("classes"), list):
        table.classes = table.metadata["classes"]
    if table.classes is not None:
        table.metadata["classes"] = table.classes
    return table


def _image_values(pa: Any, column: Any) -> list[bytes | None]:
    if pa.types.is_struct(column.type):
        return column.field("bytes").to_pylist()
    return column.to_pylist()


def batch_rows(batch: Any, table: Layout) -> Iterator[tuple[dict[str, bytes], float, int | None, dict[str, Any]]]:
    """(fields, label, group, meta) of every row of a record batch read as ``table`` says; a null image is a row
    without the image field, a null label NaN, a null meta value left out. The detection column goes to the meta
    as it is (``{"bbox": [...], "category": [...]}``) under its name."""
    pa = pyarrow()
    n = batch.num_rows
    columns = {name: batch.column(name) for name in table.columns}
    images = _image_values(pa, columns[table.image]) if table.image else [None] * n
    fields = {name: _image_values(pa, columns[name]) for name in table.fields}
    labels = columns[table.label].to_pylist() if table.label else [0.0] * n
    groups = columns[table.group].to_pylist() if table.group else [None] * n
    meta = {name: columns[name].to_pylist() for name in table.meta}
    json_meta = {name: columns[name].to_pylist() for name in table.json_meta}
    objects = columns[table.objects].to_pylist() if table.objects else None
    keys = table.meta_keys
    for i in range(n):
        row = {} if images[i] is None else {table.image_field: images[i]}
        row.update((name, values[i]) for name, values in fields.items() if values[i] is not None)
        info = {keys.get(name, name): values[i] for name, values in meta.items() if values[i] is not None}
        for name, values in json_meta.items():
            if values[i] is not None:
                info[keys.get(name, name)] = json.loads(values[i])
        if objects is not None and objects[i] is not None:
            info[table.objects] = objects[i]
        label = labels[i]
        yield row, math.nan if label is None else float(label), groups[i], info


def boxes(objects: Any, where: str, bbox_format: str) -> list[tuple[float, float, float, float, int]]:
    """The ``(x, y, width, height, class id)`` in pixels of a detection column's value: a dict of lists
    (``{"bbox": [[...], ...], "category": [...]}``) or a list of dicts, its boxes in ``bbox_format``."""
    if isinstance(objects, dict):
        category = next((k for k in CATEGORY_KEYS if k in objects), None)
        bboxes, ids = objects.get("bbox") or [], (objects.get(category) if category else None) or []
    elif isinstance(objects, list):
        category = next((k for k in CATEGORY_KEYS if objects and isinstance(objects[0], dict) and k in objects[0]),
                        None)
        bboxes = [o.get("bbox") for o in objects if isinstance(o, dict)]
        ids = [o.get(category) for o in objects if isinstance(o, dict)] if category else []
    else:
        raise SourceError(f"{where}: its objects are a {type(objects).__name__}, not boxes")
    if len(bboxes) != len(ids):
        raise SourceError(f"{where}: {len(bboxes)} boxes but {len(ids)} category ids; every box needs its class")
    out = []
    for box, cid in zip(bboxes, ids):
        if not (isinstance(box, (list, tuple)) and len(box) == 4
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in box)):
            raise SourceError(f"{where}: bbox {box!r:.80} is not 4 finite numbers ({bbox_format}, pixels)")
        if isinstance(cid, bool) or not isinstance(cid, int) or cid < 0:
            raise SourceError(f"{where}: category id {cid!r:.40} is not a class id (an integer 0, 1, ...)")
        x, y, a, b = box
        width, height = (a - x, b - y) if bbox_format == "xyxy" else (a, b)
        if width < 0 or height < 0:
            raise SourceError(f"{where}: bbox {list(box)} has a negative size as {bbox_format}; is it "
                              f"{'xywh' if bbox_format == 'xyxy' else 'xyxy'}? (--bbox-format)")
        out.append((float(x), float(y), float(width), float(height), cid))
    return out


def features_json(features: dict[str, Any]) -> bytes:
    """The ``huggingface`` schema metadata of ``features``."""
    return json.dumps({"info": {"features": features}}).encode()
