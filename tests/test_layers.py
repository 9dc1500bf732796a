"""The architecture is checked, not hoped: the layer picture in README.md
("The layers") is read and held against the code.

A module may import (type-only imports and imports inside functions
included) only its own package and the layers below it -- never a layer
above, never a package beside it on the same row.  Each package, imported
alone in a fresh interpreter, loads nothing from above or beside it.  No
import cycle between modules; no class over 30 methods; no module over 800
lines; the environment is read in one module (aiopdbp/env.py).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT

PKG = REPO_ROOT / "aiopdbp"
MAX_METHODS = 30
MAX_LINES = 800


def _layers() -> list[list[str]]:
    """The rows of the README's picture, top first: each a list of unit names."""
    text = (REPO_ROOT / "README.md").read_text()
    m = re.search(r"<!-- layers:[^>]*-->\s*```text\n(.*?)```", text, re.S)
    assert m, "README.md has no layer picture (<!-- layers: ... --> then a ```text block)"
    rows = []
    for line in m.group(1).splitlines():
        names = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0].split()
        if names:
            rows.append(names)
    return rows


LAYERS = _layers()
RANK = {name: i for i, row in enumerate(LAYERS) for name in row}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__)."""
    mods = {}
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(REPO_ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        mods[".".join(parts)] = f
    return mods


MODULES = _modules()


def _unit(module: str) -> str | None:
    """The layer unit (top-level package or module) a module belongs to; None for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported aiopdbp module, line) for every import in ``path``, wherever it is."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            for t in subs if subs and len(subs) == len(node.names) else [target, *subs]:
                if t.split(".")[0] == "aiopdbp":
                    yield t, node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "aiopdbp":
                    yield a.name, node.lineno


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, path in MODULES.items():
        for t, _ in _imports(m, path):
            # a package's door importing its own modules is how a door works
            if t in MODULES and t != m and not (path.name == "__init__.py" and t.startswith(m + ".")):
                graph[m].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_layer_picture_names_every_package_once() -> None:
    units = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.name.startswith("__"))}
    named = [n for row in LAYERS for n in row]
    assert len(named) == len(set(named)), f"named twice in the picture: {named}"
    assert set(named) == units, (f"in the code, not in the picture: {sorted(units - set(named))}; "
                                 f"in the picture, not in the code: {sorted(set(named) - units)}")


def test_no_module_imports_a_layer_above_or_beside_it() -> None:
    wrong = []
    for m, path in MODULES.items():
        unit = _unit(m)
        if unit is None or unit == "__main__":
            continue  # the root (the public API, re-exported lazily) and `python -m aiopdbp`
        for t, line in _imports(m, path):
            target = _unit(t)
            if target == unit:
                continue
            if target is None:
                ok = RANK[unit] == 0  # `from aiopdbp import ...`: the tools' right only
            else:
                ok = RANK[target] > RANK[unit]
            if not ok:
                wrong.append(f"{path.relative_to(REPO_ROOT)}:{line} ({unit}) imports {t} ({target or 'aiopdbp'})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("aiopdbp."))))
"""


@pytest.mark.parametrize("unit", [n for row in LAYERS for n in row])
def test_importing_a_layer_alone_loads_nothing_above_or_beside_it(unit: str) -> None:
    mods = sorted(m for m in MODULES if _unit(m) == unit and not m.endswith("__main__"))
    proc = subprocess.run([sys.executable, "-c", _PROBE, *mods], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.splitlines()[-1])
    above = [m for m in loaded if _unit(m) not in (unit, "__main__") and RANK[_unit(m) or unit] <= RANK[unit]]
    assert not above, f"importing {unit} alone loaded {above}"


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (type-only imports count):\n" + "\n".join(" ".join(c) for c in cycles)


def test_no_class_has_more_than_30_methods() -> None:
    big = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if n > MAX_METHODS:
                    big.append(f"{m}.{node.name}: {n} methods")
    assert not big, "\n".join(big)


def test_no_module_is_over_800_lines() -> None:
    big = [f"{m}: {n}" for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not big, "\n".join(big)


def test_no_module_imports_a_private_name_of_another() -> None:
    wrong = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiopdbp"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        wrong.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} imports {node.module}.{a.name}")
    assert not wrong, "\n".join(wrong)
