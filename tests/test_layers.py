"""The package's layers import one way: no import cycle, no lower layer importing an upper one.

Every import counts, also those inside functions. Layers, lowest first (a module may import its own
layer and those below):
0. base: errors, frozen values, the allocator, interrupts, atomic outputs, the reference cache (``io``) and work
   reused within a scope (``reuse``);
1. contracts and descriptions: the trace (and its compressed form, ``repeats``), number formats, hardware configs, kernels;
2. models: the functional engine, core timing, the chip model, workloads and Q/K/V files (``io``);
3. trace renderers: Perfetto views of a trace or a chip launch (they read models' outputs only);
4. the run (``runner``): input rules and algorithm options, the run spec, preparation, the chip run, the API; and
   where independent tasks run (``exec``: in this process, local processes, Dask), which a run's numerics over many
   heads use as applications do;
5. applications: sweeps, validation and calibration, the paper's figure, sensitivity;
6. reports of applications (``report``, ``validate.report``); 7. the command line and the package's front.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vfasim"
LAYERS = [
    ("vfasim.errors", "vfasim.frozen", "vfasim.allocator", "vfasim.io", "vfasim.io.interrupt", "vfasim.io.outputs",
     "vfasim.io.refcache", "vfasim.reuse"),
    ("vfasim.trace", "vfasim.repeats", "vfasim.formats", "vfasim.hw", "vfasim.kernel"),
    ("vfasim.functional", "vfasim.sim", "vfasim.chip", "vfasim.workloads", "vfasim.io.qkv_files"),
    ("vfasim.report.perfetto", "vfasim.report.chip_perfetto"),
    ("vfasim.runner", "vfasim.exec"),
    ("vfasim.sweep", "vfasim.validate", "vfasim.figure", "vfasim.sensitivity"),
    ("vfasim.report", "vfasim.validate.report"),
    ("vfasim.cli", "vfasim"),
]


def modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> set[tuple[str, str]]:
    """(importer, imported) between vfasim modules; a package's own submodules are not counted against it."""
    mods, edges = modules(), set()
    for name, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t.startswith("vfasim") and not name.startswith(t + "."):
                    edges.add((name, t))
    return edges


def layer(name: str) -> int:
    """The layer of the longest prefix that names ``name`` (a report module not listed is layer 6)."""
    best = max((p for group in LAYERS for p in group if name == p or name.startswith(p + ".")), key=len)
    return next(i for i, group in enumerate(LAYERS) if best in group)


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while comp[-1:] != [v]:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert all(layer(m) >= 0 for m in modules())


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_no_lower_layer_imports_an_upper_one():
    upward = sorted((a, b) for a, b in import_graph() if layer(b) > layer(a))
    assert upward == []


def test_the_cycle_check_sees_a_planted_cycle():
    assert cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
