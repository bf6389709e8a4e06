"""The augmentation page's controls: sliders, toggles and choices for the augmentation keys, the fold links and
the re-roll. Each one edits the page's config text (:func:`edit_config`): the text stays the one place a run's
config lives, so what a control sets is what the text shows, and a run of the text is a run of the controls.

An edit is a mapping of keys to values (None: drop the key) that a page sends as JSON (:func:`parse_updates`):
only the keys of a control or of a fold link, and scalars only. The edit changes the key's own line of a YAML
text (comments and the other lines are kept) or rewrites a JSON text; an edit whose text would not parse back to
the intended mapping is written out whole instead."""
from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ...errors import PicPacError
from ...stream.config import StreamConfig
from .augment import ConfigRefused, parse_text


@dataclass(frozen=True)
class Control:
    """One control of the page: ``kind`` is "range" (a slider from ``low`` to ``high`` by ``step``), "toggle" (a
    checkbox), "choice" (a select of ``choices``; "" leaves the key out: the stream's default) or "number"."""

    key: str
    kind: str
    low: float = 0
    high: float = 0
    step: float = 1
    choices: tuple[str, ...] = ()


CONTROLS = (
    Control("seed", "number", 0, 2**31 - 1),
    Control("batch", "range", 1, 32),
    Control("resize_width", "range", 0, 640, 8),
    Control("resize_height", "range", 0, 640, 8),
    Control("perturb", "toggle"),
    Control("pert_angle", "range", 0, 180),
    Control("pert_min_scale", "range", 0.25, 1, 0.05),
    Control("pert_max_scale", "range", 1, 3, 0.05),
    Control("pert_hflip", "toggle"),
    Control("pert_vflip", "toggle"),
    Control("pert_color1", "range", 0, 100),
    Control("pert_color2", "range", 0, 100),
    Control("pert_color3", "range", 0, 100),
    Control("pert_colorspace", "choice", choices=("BGR", "RGB", "HSV", "Lab", "SAME")),
    Control("pert_border", "choice", choices=("constant", "replicate", "reflect", "wrap")),
    Control("annotate", "choice", choices=("", "json", "image", "any")),
    Control("task", "choice", choices=("", "classify", "segment", "detect", "keypoints")),
)
FOLD_KEYS = ("split", "split_fold", "split_negate")
EDITABLE = frozenset({c.key for c in CONTROLS} | set(FOLD_KEYS))
"""The keys an edit may set: a control's or a fold link's."""
MAX_EDIT = 2000
MAX_STRING = 40
DEFAULT_FOLDS = 5
"""The folds the page links to while the config has no split."""
MAX_FOLD_LINKS = 32
REROLL_SEEDS = 2**31
_DEFAULTS = StreamConfig.from_dict({})


def parse_updates(text: str) -> dict[str, Any]:
    """An edit sent by a page (a JSON object of keys to scalars), checked; ConfigRefused naming what is wrong."""
    if len(text) > MAX_EDIT:
        raise ConfigRefused(f"an edit is at most {MAX_EDIT:,} characters long, got {len(text):,}")
    try:
        updates = json.loads(text)
    except ValueError:
        raise ConfigRefused(f"an edit must be a JSON object of keys to values, got {text[:80]!r}") from None
    if not isinstance(updates, dict):
        raise ConfigRefused(f"an edit must be a JSON object of keys to values, got {type(updates).__name__}")
    for key, value in updates.items():
        if key not in EDITABLE:
            raise ConfigRefused(f"an edit may set only the page's controls ({', '.join(sorted(EDITABLE))}), "
                                f"not {key[:80]!r}")
        if not (value is None or isinstance(value, (bool, int, float))
                or isinstance(value, str) and len(value) <= MAX_STRING):
            raise ConfigRefused(f"an edit sets {key!r} to a number, a boolean, a short string or null, got "
                                f"{json.dumps(value)[:80]}")
    return updates


def reroll() -> dict[str, int]:
    """The edit of the re-roll button: a new random seed."""
    return {"seed": secrets.randbelow(REROLL_SEEDS)}


def edit_config(text: str, updates: Mapping[str, Any]) -> str:
    """The config text ``text`` with ``updates`` made (None: the key dropped). A YAML text keeps its other lines
    and comments: each key's own top-level line is replaced, dropped or added at the end; a JSON text is written
    out again as JSON."""
    mapping = parse_text(text)
    wanted = {**mapping, **updates}
    wanted = {key: value for key, value in wanted.items() if value is not None}
    if text.lstrip().startswith("{"):
        return json.dumps(wanted, indent=1)
    lines = text.splitlines()
    for key, value in updates.items():
        at = next((n for n, line in enumerate(lines) if re.match(rf"{re.escape(key)}\s*:", line)), None)
        line = f"{key}: {json.dumps(value)}"
        if at is None:
            if value is not None:
                lines.append(line)
        elif value is None:
            del lines[at]
        else:
            lines[at] = line
    edited = "\n".join(lines) + "\n"
    try:
        kept = parse_text(edited) == wanted
    except ConfigRefused:
        kept = False
    return edited if kept else yaml.safe_dump(wanted, sort_keys=False)


def _parsed(text: str) -> tuple[dict[str, Any], StreamConfig]:
    """The text's mapping and its parsed config; a text that does not parse gives {} and the defaults."""
    try:
        mapping = parse_text(text)
    except ConfigRefused:
        return {}, _DEFAULTS
    try:
        return mapping, StreamConfig.from_dict({k: v for k, v in mapping.items() if k in EDITABLE})
    except PicPacError:
        return mapping, _DEFAULTS


def control_values(text: str) -> dict[str, Any]:
    """What each control shows for the config text: the parsed value of its key (a choice with "": the text's
    own value, "" when it has none)."""
    mapping, c = _parsed(text)
    values = {}
    for control in CONTROLS:
        if control.kind == "choice" and control.choices[0] == "":
            values[control.key] = str(mapping.get(control.key) or "")
        elif control.kind == "toggle":
            values[control.key] = bool(c[control.key])
        else:
            values[control.key] = c[control.key]
    return values


def fold_links(text: str) -> list[dict[str, Any]]:
    """The page's fold links: "all" (no split), then each fold of the text's split (DEFAULT_FOLDS without one),
    each with its edit and whether the config shows it now."""
    _, c = _parsed(text)
    folds = c["split"] if c["split"] > 1 else DEFAULT_FOLDS
    links = [{"text": "all records", "edit": {key: None for key in FOLD_KEYS}, "on": c["split"] == 1}]
    for fold in range(min(folds, MAX_FOLD_LINKS)):
        links.append({"text": f"fold {fold} of {folds}", "on": c["split"] == folds and c["split_fold"] == fold
                      and c["split_negate"], "edit": {"split": folds, "split_fold": fold, "split_negate": True}})
    return links
