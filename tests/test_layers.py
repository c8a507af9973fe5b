"""The import structure of the sources: no import cycle and no upward import between layers.

Every ``.py`` under ``lite/``, ``delegates/``, ``tools/`` and ``schema/`` is parsed (imports inside
functions and under ``TYPE_CHECKING`` included) and mapped to its installed name as setup.cfg's
``package_dir`` does. ``from pkg import x`` where ``x`` is a submodule is an edge to ``pkg.x``, not to
the package, and importing ``a.b.c`` is not counted as importing ``a`` and ``a.b``: a package
``__init__`` re-exporting its submodules, and a submodule importing a sibling, are not cycles.

The allowlists below hold what is still crossed today, each with its reason; they only shrink. A
new cycle or a new upward import fails, and so does an allowlisted one that is gone (delete its row).
The layer table is docs/architecture.md's "Layers".
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"lite": "lite", "delegates": "lite.delegates", "tools": "lite.tools", "schema": "lite.schema"}

# Layer of a module: the longest prefix in this table that names it or a package above it.
LAYERS = {
    # 1 core values
    "lite.errors": 1, "lite.aligned": 1, "lite.arguments": 1, "lite.extras": 1, "lite.tensor": 1, "lite.files": 1,
    "lite.primitive": 1, "lite.kernel": 1, "lite.context": 1, "lite.threads": 1, "lite.ops": 1,
    "lite.schema": 1, "lite.version": 1,
    # 2 graph algorithms
    "lite.memory": 2, "lite.weight_pages": 2,
    # 3 native backend (the scheduler makes one native kernel per node; shape propagation asks them)
    "lite.scheduler": 3, "lite.shapes": 3, "lite.kernels": 3,
    "lite.fusion": 3, "lite.fusion_kernels": 3, "lite.blocking": 3,
    # 4 delegation
    "lite.delegate": 4, "lite.blob": 4,  # the package (API, partition, saved, placement); blob's layout
    # 5 runtime
    "lite.engine": 5, "lite.loader": 5, "lite.conversion": 5, "lite.tools.converter": 5,
    # 6 Model
    "lite.model": 6, "lite.generate": 6,
    # 7 runner, pipeline, integrations, bundled delegates, tools
    "lite.runner": 7, "lite.pipeline": 7, "lite.integrations": 7, "lite.delegates": 7, "lite.tools": 7,
    "lite.tools.converter.cli": 7, "lite.tools.converter.quantize": 7,  # tools that run models
    # the public facade: it re-exports layers 1-7, and the bundled delegates and tools are written
    # against it (``import lite``), so it shares their layer; code in layers 1-6 never imports it
    "lite": 7,
}

# Cycles (strongly connected components) still present: sorted module names -> reason.
ALLOWED_CYCLES: dict[tuple[str, ...], str] = {
}

# Upward imports still present: (importer, imported) -> reason.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
}


def module_name(path: Path) -> tuple[str, bool]:
    """The installed name of a source file, and whether it is a package's ``__init__``."""
    rel = path.relative_to(ROOT)
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    is_package = parts[-1] == "__init__.py"
    parts = parts[:-1] if is_package else [*parts[:-1], parts[-1][:-3]]
    return ".".join(parts), is_package


def sources() -> dict[str, tuple[Path, bool]]:
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name, is_package = module_name(path)
            found[name] = (path, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in its file."""
    modules = sources()

    def target(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        edges: set[str] = set()
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "lite" or alias.name.startswith("lite."):
                        edges.add(target(alias.name))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                if source != "lite" and not source.startswith("lite."):
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    edges.add(sub if sub in modules else target(source))
        edges.discard(None)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(tuple(sorted(component)))
    return sorted(found)


def layer(module: str) -> int:
    name = module
    while name not in LAYERS:
        name = name.rpartition(".")[0]
    return LAYERS[name]


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(module, imported) for module, edges in graph.items() for imported in edges
            if layer(imported) > layer(module)}


def test_every_module_has_a_layer():
    for module in sources():
        assert layer(module), module


def test_no_import_cycle_beyond_the_allowlist():
    found = cycles(import_graph())
    new = [c for c in found if c not in ALLOWED_CYCLES]
    gone = [c for c in ALLOWED_CYCLES if c not in found]
    assert not new, f"new import cycle(s): {new}"
    assert not gone, f"cycle(s) broken, delete from ALLOWED_CYCLES: {gone}"


def test_no_upward_import_beyond_the_allowlist():
    found = upward(import_graph())
    new = sorted(found - set(ALLOWED_UPWARD))
    gone = sorted(set(ALLOWED_UPWARD) - found)
    assert not new, "upward import(s): " + ", ".join(
        f"{a} (layer {layer(a)}) -> {b} (layer {layer(b)})" for a, b in new)
    assert not gone, f"upward import(s) gone, delete from ALLOWED_UPWARD: {gone}"


def test_the_graph_sees_function_local_and_submodule_imports():
    graph = import_graph()
    # `from lite.kernels import x` with x a submodule is an edge to that submodule
    assert "lite.kernels.conv" in graph["lite.kernels"] and "lite.kernels" not in graph["lite.kernels.conv"]
    # imports inside a function count: tools/sources.py imports the zoo only in zoo_model()
    assert "lite.tools.zoo" in graph["lite.tools.sources"]
    assert all(None not in edges for edges in graph.values())
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
