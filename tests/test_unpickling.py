"""Nothing is unpickled without the opt-in, anywhere: every call in picpac/ that unpickles (pickle's loads, load and
Unpickler, np.load with pickles allowed, marshal, yaml's unsafe loaders, torch.load, a multiprocessing Connection's
recv) either sits behind an explicit ``unpickle`` opt-in in its own function, or reads a channel between picpac's
own processes, listed below with the reason. A new call of either kind fails here until it is guarded or listed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "picpac"

INTERNAL = {
    ("engine/processes.py", "_unpack"): "an exception a worker of this process pool pickled",
    ("engine/processes.py", "_worker"): "the recipe the pool's own parent pickled for its spawned worker",
    ("engine/processes.py", "_serve"): "a request from the pool's own consumer over the worker's pipe",
    ("engine/processes.py", "_drain"): "a result from the pool's own worker over its pipe",
    ("compat/batchup/work_pool.py", "_resolve"): "a constant the pool's own consumer put in shared memory",
    ("compat/batchup/work_pool.py", "_run_item"): "a task the pool's own consumer pickled",
    ("tools/explore/augment.py", "_in_child"): "the reply of the run's own child process, on its stdout",
    ("tools/explore/augment.py", "child"): "the server's own request, on the run's stdin",
}
"""(module, function): why the bytes it unpickles come from picpac's own process, not a file or a peer."""

_PICKLE = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal"}


def safe_loaders(tree: ast.Module) -> set[str]:
    """The classes of a module that derive from yaml's SafeLoader (what yaml.load may take without running code)."""
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and any(
        (isinstance(base, ast.Attribute) and base.attr in ("SafeLoader", "CSafeLoader")) or
        (isinstance(base, ast.Name) and base.id in ("SafeLoader", "CSafeLoader")) for base in node.bases)}


def unpickles(call: ast.Call, safe: set[str] = frozenset()) -> str | None:
    """What the call is, when it can unpickle (``safe``: the module's SafeLoader classes); None otherwise."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
    keywords = {k.arg: k.value for k in call.keywords}
    if owner in _PICKLE and name in ("load", "loads", "Unpickler"):
        return f"{owner}.{name}"
    if name == "Unpickler":
        return name
    if owner in ("np", "numpy") and name == "load":
        allow = keywords.get("allow_pickle")
        return None if allow is None or (isinstance(allow, ast.Constant) and allow.value is False) else "np.load"
    if owner == "yaml" and name in ("load", "load_all", "unsafe_load", "full_load", "unsafe_load_all"):
        loader = keywords.get("Loader", call.args[1] if len(call.args) > 1 else None)
        loader_name = loader.attr if isinstance(loader, ast.Attribute) else getattr(loader, "id", None)
        if name in ("load", "load_all") and loader_name in safe | {"SafeLoader", "CSafeLoader"}:
            return None
        return f"yaml.{name}"
    if owner == "torch" and name == "load":
        weights = keywords.get("weights_only")
        return None if isinstance(weights, ast.Constant) and weights.value is True else "torch.load"
    if owner in ("shelve",) and name == "open":
        return "shelve.open"
    if name == "recv" and not call.args and isinstance(f, ast.Attribute):
        return "Connection.recv"
    return None


def mentions_opt_in(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id == "unpickle") or (isinstance(n, ast.Attribute) and n.attr == "unpickle")
               for n in ast.walk(node))


def guarded(function: ast.AST, call: ast.Call) -> bool:
    """Whether an ``if`` on the opt-in comes before the call in its function: one that raises without it, or one
    whose body holds the call."""
    for node in ast.walk(function):
        if isinstance(node, ast.If) and node.lineno < call.lineno and mentions_opt_in(node.test):
            inside = any(n is call for n in ast.walk(ast.Module(node.body, [])))
            raises = any(isinstance(n, ast.Raise) for n in node.body)
            if inside or raises:
                return True
    return False


def calls() -> list[tuple[str, str, ast.Call, ast.AST, str]]:
    """(module, function, call, function node, what) of every call that can unpickle."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        module, safe = str(path.relative_to(PACKAGE)), safe_loaders(tree)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and (what := unpickles(node, safe)):
                    found.append((module, function.name, node, function, what))
    return found


CALLS = calls()


def test_every_call_that_unpickles_is_behind_the_opt_in_or_reads_picpacs_own_processes():
    unguarded = [f"{module}:{call.lineno} {function}(): {what}" for module, function, call, node, what in CALLS
                 if (module, function) not in INTERNAL and not guarded(node, call)]
    assert not unguarded, ("these calls unpickle bytes with no `if unpickle` before them in their function (or list "
                           "them in INTERNAL, with why the bytes are picpac's own): " + "; ".join(unguarded))


def test_the_walk_finds_the_calls_it_is_meant_to_find():
    """The known places, guarded and internal: the check is not vacuous."""
    sites = {(module, function) for module, function, *_ in CALLS}
    assert {("compat/dataflow/codec.py", "decode"), ("compat/dataflow/codec.py", "loads"),
            ("stores/lmdb.py", "_read_tensorpack"), ("compat/dataflow/serialize.py", "load")} <= sites
    assert set(INTERNAL) <= sites, sorted(set(INTERNAL) - sites)  # no stale entries


@pytest.mark.parametrize("source, found", [
    ("def f(b):\n    return pickle.loads(b)\n", False),
    ("def f(b, unpickle=False):\n    if not unpickle:\n        raise ValueError\n    return pickle.loads(b)\n", True),
    ("def f(b, unpickle=False):\n    if unpickle:\n        return pickle.loads(b)\n", True),
    ("def f(b, unpickle=False):\n    x = unpickle\n    return pickle.loads(b)\n", False),
    ("def f(p):\n    return np.load(p, allow_pickle=True)\n", False),
    ("def f(t):\n    return yaml.load(t, yaml.Loader)\n", False),
])
def test_an_unguarded_call_is_caught(source, found):
    function = ast.parse(source).body[0]
    call = next(n for n in ast.walk(function) if isinstance(n, ast.Call) and unpickles(n))
    assert guarded(function, call) is found


def test_yaml_with_a_safe_loader_is_no_unpickling():
    tree = ast.parse("class L(yaml.SafeLoader):\n    pass\ndef f(t):\n    return yaml.load(t, L), yaml.load(t, "
                     "Loader=yaml.SafeLoader), yaml.load(t, yaml.FullLoader)\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "load"]
    assert [unpickles(c, safe_loaders(tree)) for c in calls] == [None, None, "yaml.load"]
