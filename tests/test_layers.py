"""The package's layering (docs/architecture.md): no module imports a higher layer."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "picpac"
RANK = {
    "__init__": 9, "errors": 0,
    "format": 1, "writer": 1, "reader": 1,
    "sources": 2,
    "sampling": 3,
    "image": 4, "transforms": 4, "shapes": 4, "color": 4, "specs": 4, "dense": 4, "batched": 4,
    "flow": 5, "processes": 5,
    "config": 6, "stream": 6, "processor": 6, "loader": 6,
    "ingest": 8, "info": 8, "verify": 8, "demo": 8, "cli": 8, "bench": 8,
}
HEAVY = {"torch", "tensorflow", "jax", "ray"}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y / from . import x
                names |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif node.module:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_every_module_has_a_layer():
    assert {p.stem for p in PACKAGE.glob("*.py")} - set(RANK) == set()


def test_no_module_imports_a_higher_layer():
    bad = []
    for path in PACKAGE.glob("*.py"):
        for name in imports_of(path):
            name = name.removeprefix("picpac.")
            if name in RANK and RANK[name] > RANK[path.stem] and path.stem != "__init__":
                bad.append(f"{path.stem} (layer {RANK[path.stem]}) imports {name} (layer {RANK[name]})")
    assert bad == []


def test_core_never_imports_heavy_frameworks():
    for path in PACKAGE.glob("*.py"):
        assert not {n.split(".")[0] for n in imports_of(path)} & HEAVY, path.name
