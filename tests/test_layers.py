"""The package's layering (docs/architecture.md): one subpackage per layer, none imports a higher one,
the core never imports a heavy framework, and the tests mirror the tree."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "picpac"
TESTS = ROOT / "tests"
# Bottom-up. A module imports its own subpackage and the layers below it; layers of one rank (stores
# and sources) do not import each other. picpac/__init__.py, the public API, stands above them all.
# engine (parallel work) needs only errors, so the store importers can run their children on it; compat
# (batchup's and tensorpack's APIs) stands at the edge beside tools: nothing of the core imports it.
# device (the device stage, torch's) stands between image and stream: the stream imports it only for a stream
# given ``device``, inside the function that builds one, so importing the stream imports no torch.
LAYERS = [("errors", "_version"), ("file",), ("engine",), ("stores", "sources"), ("sampling",), ("image",),
          ("device",), ("stream",), ("adapters",), ("tools", "compat")]
FRAMEWORK_LAYERS = {"adapters", "device"}
"""The layers whose modules may import a heavy framework (each module of theirs only when it is imported)."""
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names} | {"__init__": len(LAYERS)}
HEAVY = {"torch", "tensorflow", "jax", "ray"}
# Public module names registered by picpac/__init__.py, and the old homes of the modules that moved to compat/
# (PUBLIC_MODULES, MOVED_MODULES): code inside the package imports the module where it lives instead (the
# alias exists only once picpac/__init__.py has run), under these names or below them ("dataflow.base").
ALIASES = {"transforms", "color", "dense", "batched", "data_source", "work_pool", "ingest", "dataflow",
           "sampling.data_source", "sampling.batch_samplers", "engine.work_pool"}


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name under picpac ("stream.image_stream", "__init__")."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path
    return found


def layer(name: str) -> str:
    """The layer of a module: its top-level subpackage ("stream.config" -> "stream")."""
    return name.split(".")[0]


def is_module(parts: list[str]) -> bool:
    """Whether picpac/<parts> is a module: a .py file, a package, or a compiled extension (image/_jpeg)."""
    where = PACKAGE.joinpath(*parts)
    return bool(parts) and (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()
                            or any(where.parent.glob(f"{where.name}.*.so")))


def type_only(tree: ast.Module) -> set[int]:
    """The ids of the import statements under ``if TYPE_CHECKING:``, which name types for annotations only."""
    blocks = [node for node in ast.walk(tree) if isinstance(node, ast.If)
              and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")]
    return {id(node) for block in blocks for statement in block.body for node in ast.walk(statement)}


def imports_of(path: Path, runtime: bool = False) -> set[str]:
    """What a module imports, anywhere in it (a function's imports too; with ``runtime``, not the imports of
    types under ``if TYPE_CHECKING:``, which never run): the package's own modules by their names under picpac,
    relative imports resolved ("file.reader"); a name imported from a package is its submodule where it is one,
    else the package, whose root is "__init__" (``from .. import __version__``); other modules by their own
    names ("numpy")."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    package = parts[:-1]  # a module's package; for an __init__.py, the package it defines
    names = set()
    tree = ast.parse(path.read_text())
    skip = type_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                module = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module.split(".")[0] == "picpac":
                module = node.module.split(".")[1:]
            else:
                names.add(node.module)
                continue
            names |= {".".join(module + [a.name]) if is_module(module + [a.name]) else ".".join(module) or "__init__"
                      for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {".".join(a.name.split(".")[1:]) or "__init__" if a.name.split(".")[0] == "picpac" else a.name
                      for a in node.names}
    return names


def internal(name: str) -> bool:
    """Whether an imported name is a module of the package (not numpy); the package root is one."""
    return layer(name) in RANK


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports when it runs."""
    found = modules()
    return {module: {name for name in imports_of(path, runtime=True) if name in found and name != module}
            for module, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a graph: each group of modules that reach one another, sorted."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
        reach[start] = seen
    groups = {frozenset({m} | {n for n in reach[m] if m in reach.get(n, ())}) for m in graph if m in reach[m]}
    return sorted(sorted(group) for group in groups)


def test_every_module_is_in_a_layer():
    assert {name for name in modules() if layer(name) not in RANK} == set()
    assert {p.name for p in PACKAGE.iterdir() if p.suffix == ".py"} == {"__init__.py", "errors.py", "_version.py"}


def test_no_module_imports_the_package_root():
    """picpac/__init__.py imports every layer: a module importing it (``from .. import __version__``) would
    import the whole package and close a cycle through it (the version is in picpac/_version.py)."""
    assert [module for module, path in modules().items() if "__init__" in imports_of(path)] == []


def test_no_import_cycle():
    """No module imports itself through others, a function's import included: a cycle makes the import order
    matter and hides what depends on what (stores/base.py's ``__reduce__`` imported convert, which imports
    every format, which import base). An import of types for annotations under ``if TYPE_CHECKING:`` never
    runs, so it closes no cycle (stream/legacy.py names config's Augment so); the layers still count it."""
    assert cycles(import_graph()) == []


def test_imports_of_types_for_annotations_only_are_told_apart():
    tree = ast.parse("from typing import TYPE_CHECKING\nimport os\nif typing.TYPE_CHECKING:\n    from .config import A\n"
                     "    import json\nelse:\n    import csv\nif not TYPE_CHECKING:\n    import glob\ndef f():\n    import sys\n")
    only = type_only(tree)
    assert sorted(ast.unparse(node) for node in ast.walk(tree)
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) in only) == ["from .config import A",
                                                                                              "import json"]


def test_cycles_finds_every_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": {"g"}, "h": set()}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"], ["g"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_a_higher_layer_or_a_sibling():
    bad = []
    for module, path in modules().items():
        if module == "__init__":
            continue
        for name in imports_of(path):
            if not internal(name) or layer(name) == layer(module):
                continue
            if RANK[layer(name)] >= RANK[layer(module)]:
                bad.append(f"{module} ({layer(module)}) imports {name} ({layer(name)})")
    assert bad == []


def test_the_engine_knows_nothing_of_images_or_sampling():
    """engine/ imports only the errors and file layers, the standard library and NumPy: an image library's
    fork probe is registered by the image layer (engine.processes.register_fork_probe), not named here."""
    allowed = set(sys.stdlib_module_names) | {"numpy", "errors", "file", "engine"}
    engine = {module: path for module, path in modules().items() if layer(module) == "engine"}
    bad = [f"{module} imports {name}" for module, path in engine.items()
           for name in imports_of(path) if name.split(".")[0] not in allowed]
    bad += [f"{module} uses cv2" for module, path in engine.items() if "cv2" in path.read_text()]  # (sys.modules)
    assert bad == []


def test_the_image_layer_reads_files_through_the_file_layer():
    """An image's file is read by file/inputs.py's read_file, as the import layouts read theirs: the image layer
    imports nothing of sources/, which only lists what to import."""
    assert {f"{module} imports {name}" for module, path in modules().items() if layer(module) == "image"
            for name in imports_of(path) if layer(name) == "sources"} == set()
    assert "file.inputs" in imports_of(PACKAGE / "image" / "decoding.py")


def test_package_code_imports_modules_where_they_live():
    bad = [f"{module} imports the public alias {name}" for module, path in modules().items() if module != "__init__"
           for name in imports_of(path) if any(name == a or name.startswith(f"{a}.") for a in ALIASES)]
    assert bad == []


def test_the_aliases_are_what_the_package_registers():
    import picpac
    assert ALIASES == set(picpac.PUBLIC_MODULES) | {n for n in picpac.MOVED_MODULES if not n.startswith("dataflow.")}


def test_core_never_imports_heavy_frameworks():
    for module, path in modules().items():
        if layer(module) not in FRAMEWORK_LAYERS:
            assert not {n.split(".")[0] for n in imports_of(path)} & HEAVY, module
    assert not {n.split(".")[0] for n in imports_of(PACKAGE / "device" / "geometry.py")} & HEAVY  # planning threads


def test_importing_everything_loads_no_heavy_framework():
    code = ("import importlib, pkgutil, sys, picpac\n"
            "for m in pkgutil.walk_packages(picpac.__path__, 'picpac.'):\n"
            "    heavy = m.name.startswith(('picpac.adapters', 'picpac.device.'))\n"
            "    if not heavy or m.name == 'picpac.device.geometry':\n"
            "        importlib.import_module(m.name)\n"
            f"print(sorted(n for n in {sorted(HEAVY)!r} if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_relative_imports_are_resolved():
    """``from ...stream import x`` in picpac/compat/dataflow/ is the stream layer, and would be caught."""
    assert imports_of(PACKAGE / "compat" / "dataflow" / "base.py") >= {"errors", "numpy"}
    assert "compat.dataflow.codec" in imports_of(PACKAGE / "compat" / "dataflow" / "remote.py")
    assert "file.layout" in imports_of(PACKAGE / "file" / "reader.py")
    assert "image" in imports_of(PACKAGE / "tools" / "verify.py")


WHOLE_PACKAGE = {"test_layers", "test_docs", "test_public_api", "test_picpac_compat", "test_examples",
                 "test_benchmarks", "test_unpickling", "test_wheel", "test_typing"}
"""Tests of the package as a whole (and the benchmarks the suite runs as smoke tests), in tests/ itself."""


def mirrored_names(folder: Path) -> set[str]:
    """What a test file in tests/<folder> may be named after: a module of picpac/<folder> (its name without a
    leading underscore), the subpackage itself, or a subpackage of it (tools/explore/)."""
    modules = {p.stem.lstrip("_") for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}
    if folder == Path("."):  # a layer's tests live in its folder
        return modules
    return modules | {folder.name} | {p.name for p in (PACKAGE / folder).iterdir() if (p / "__init__.py").is_file()}


def names_a(test: str, name: str) -> bool:
    return test == f"test_{name}" or test.startswith(f"test_{name}_")


@pytest.mark.parametrize("test", sorted(TESTS.rglob("test_*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_tests_mirror_the_tree(test):
    """tests/<layer>/test_<module>[_<aspect>].py tests picpac/<layer>/<module>.py (or the layer's package);
    tests of the whole package (layers, docs, public API, PicPac's configs, the examples) and of its own modules
    (errors.py) stand in tests/ itself."""
    folder = test.relative_to(TESTS).parent
    if folder == Path(".") and test.stem in WHOLE_PACKAGE:
        return
    assert (PACKAGE / folder).is_dir(), f"{folder} is no subpackage of picpac"
    names = mirrored_names(folder)
    assert any(names_a(test.stem, n) for n in names), f"{test.name} names no module of picpac/{folder}: {sorted(names)}"


def test_every_module_has_a_test_file_of_its_own():
    """The other way round: picpac/<path>/<module>.py has tests/<path>/test_<module>[_<aspect>].py, or for a nested
    subpackage's module tests/<parent>/test_<subpackage>_<module>[_<aspect>].py (a package's __init__.py is tested
    through its modules and the package's tests)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem == "__init__":
            continue
        folder, name = path.parent.relative_to(PACKAGE), path.stem.lstrip("_")
        tests = [t.stem for t in (TESTS / folder).glob("test_*.py")]
        if folder.parent != Path("."):  # a nested subpackage's tests may stand beside it: tools/test_explore_app.py
            tests += [t.stem for t in (TESTS / folder.parent).glob(f"test_{folder.name}_*.py")]
            name = name if any(names_a(t, name) for t in tests) else f"{folder.name}_{name}"
        if not any(names_a(t, name) for t in tests):
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == []


def architecture_tree() -> dict[str, set[str]]:
    """The modules docs/architecture.md's tree lists, by folder under picpac ("." for the package's own files)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text[text.index("```\npicpac/\n") + 4:]
    listed: dict[str, set[str]] = {".": set()}
    folders: list[tuple[int, str]] = []  # (indent, folder) of the entries above
    current = None
    for line in block[:block.index("```")].splitlines()[1:]:
        columns = re.split(r"\s{2,}", line.strip())
        indent = len(line) - len(line.lstrip())
        if columns[0].endswith(".py"):
            listed["."].add(columns[0][:-3])
            continue
        if columns[0].endswith("/"):
            folders = [f for f in folders if f[0] < indent] + [(indent, columns[0])]
            current = "".join(f for _, f in folders).rstrip("/")
            listed[current] = set()
            modules = columns[2] if len(columns) > 2 else ""
        else:
            modules = line.strip()
        listed[current] |= {m.split()[0] for m in modules.split(",") if m.strip()}
    return listed


def test_the_architecture_page_lists_every_module_where_it_lives():
    actual = {".": {p.stem for p in PACKAGE.glob("*.py")}}  # the root's __init__ is the public API, listed
    for init in PACKAGE.rglob("__init__.py"):
        folder = init.parent.relative_to(PACKAGE)
        if folder != Path("."):
            actual[str(folder)] = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
    assert architecture_tree() == actual


def test_test_modules_have_unique_names():
    """pytest imports test modules by basename (rootdir-relative, no packages): two of one name break a run."""
    names = [t.name for t in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
