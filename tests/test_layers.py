"""The package's layering (docs/architecture.md): no module imports a higher layer."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "picpac"
RANK = {
    "__init__": 9, "errors": 0,
    "format": 1, "writer": 1, "reader": 1,
    "sources": 2,
    "stores": 2,
    "sampling": 3, "data_source": 3,
    "image": 4, "transforms": 4, "shapes": 4, "color": 4, "specs": 4, "dense": 4, "batched": 4,
    "flow": 5, "processes": 5, "work_pool": 5,
    "dataflow": 5,  # the package picpac/dataflow/: every module in it
    "config": 6, "stream": 6, "processor": 6, "loader": 6,
    "ingest": 8, "info": 8, "verify": 8, "demo": 8, "cli": 8, "bench": 8,
}
HEAVY = {"torch", "tensorflow", "jax", "ray"}


def modules() -> dict[str, Path]:
    """Every module of the package, subpackages included, by dotted name ("stream", "dataflow.base")."""
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p for p in sorted(PACKAGE.rglob("*.py"))}


def rank(name: str) -> int | None:
    """A module's layer: its own entry, else its top package's (a subpackage's modules share its layer)."""
    return RANK.get(name, RANK.get(name.split(".")[0]))


def imports_of(path: Path) -> set[str]:
    package = list(path.relative_to(PACKAGE).parent.parts)  # [] for a top-level module
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y / from . import x / from ..x import y
                base = package[:len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
                if node.module:
                    parts = base + node.module.split(".")
                    names.add(".".join(parts[:len(base) + 1]))
                else:
                    names |= {".".join(base + [a.name]) for a in node.names}
            elif node.module:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_every_module_has_a_layer():
    assert {name for name in modules() if rank(name) is None} == set()


def test_no_module_imports_a_higher_layer():
    bad = []
    for module, path in modules().items():
        for name in imports_of(path):
            name = name.removeprefix("picpac.")
            if rank(name) is not None and rank(name) > rank(module) and module != "__init__":
                bad.append(f"{module} (layer {rank(module)}) imports {name} (layer {rank(name)})")
    assert bad == []


def test_core_never_imports_heavy_frameworks():
    for module, path in modules().items():
        assert not {n.split(".")[0] for n in imports_of(path)} & HEAVY, module


def test_subpackage_imports_are_resolved():
    """``from ..stream import x`` in picpac/dataflow/ is the stream module (layer 6), and is caught."""
    path = PACKAGE / "dataflow" / "base.py"
    assert imports_of(path) >= {"errors", "numpy"}
    assert "dataflow.codec" in imports_of(PACKAGE / "dataflow" / "remote.py")
