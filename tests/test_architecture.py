"""The layout rules of docs/ARCHITECTURE.md, checked on the source: imports flow down.

Each rule reads the import statements of the library's modules (with ``ast``), so a module that
breaks a rule is named with the offending import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "geofidelity_bench"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, *, module_level: bool = False) -> list[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved): all of them, or
    with ``module_level`` only those run at import time (not inside a function or class)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = []
    nodes = ast.walk(tree)
    if module_level:
        nodes = [n for top in tree.body if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and not _is_type_checking_block(top) for n in ast.walk(top)]
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]
    return names


def _is_type_checking_block(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports for annotations only, never run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


LIBRARY = sorted(p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts[:1])


def test_the_top_level_holds_library_modules_only():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    command_like = [n for n in top if n.endswith("_commands.py") or n in ("cli.py", "cli_common.py")]
    assert command_like == [], f"command-line code belongs in geofidelity_bench/cli/: {command_like}"
    assert (PACKAGE / "cli" / "__init__.py").is_file() and (PACKAGE / "cli" / "__main__.py").is_file()


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_library_never_imports_the_command_line(path):
    bad = [n for n in _imports(path) if n == "geofidelity_bench.cli" or n.startswith("geofidelity_bench.cli.")]
    assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}; library code must not depend on cli/"


@pytest.mark.parametrize("path", sorted((PACKAGE / "metrics").glob("*.py")), ids=lambda p: p.name)
def test_metrics_import_no_models_and_no_torch_at_import_time(path):
    banned = ("geofidelity_bench.encoders", "geofidelity_bench.segmentation", "geofidelity_bench.geodiv")
    bad = [n for n in _imports(path, module_level=True) if n.startswith(banned) or n.split(".")[0] == "torch"]
    assert bad == [], f"metrics/{path.name} imports {bad} at import time; models live in encoders/, segmentation/"


def test_the_import_reader_resolves_relative_and_lazy_imports():
    # the rules above are only as good as this reader: a hand-made case of each import form
    assert "geofidelity_bench.results" in _imports(PACKAGE / "cli" / "evaluate.py")
    assert "geofidelity_bench.metrics.catalog" in _imports(PACKAGE / "results.py")
    assert "geofidelity_bench.errors" in _imports(PACKAGE / "segmentation" / "labels.py")
    lazy = "geofidelity_bench.encoders.dino_vit_keys"  # imported inside a function of mfp.py
    assert lazy in _imports(PACKAGE / "mfp.py")
    assert lazy not in _imports(PACKAGE / "mfp.py", module_level=True)


# -- the import graph: no circle, no import against the layers --------------------------------------

#: The layers of docs/ARCHITECTURE.md ("Inside the library"), lowest first, by the first name under
#: ``geofidelity_bench``: a module imports from its own layer and the layers below it, never above.
LAYERS = {
    "foundations": (
        "", "errors", "atomic", "provenance", "geo", "values", "comparability", "caveats", "citation",
        "images", "image_store", "plugins", "prefetch", "cache_files", "cached_batches", "extras", "float32",
    ),
    "domain and math": (
        "benchmark", "benchmark_model", "benchmark_format", "record_checks", "prompts", "metrics", "bootstrap",
        "manifest_format",
    ),
    "models": ("encoders", "segmentation"),
    "workflows": (
        "evaluation", "generated_panels", "scoring", "anchors", "generated_folder", "panel_images", "near_copies",
        "perceptual_hashes",
        "copy_geometry", "keypoint_index", "results", "compare", "stats", "clip_alignment", "report", "generation", "curation",
        "geodiv", "mfp", "hub", "release_import",
    ),
    "applications": ("demo_app", "metric_module", "cli", "evaluate_module"),
}
_RANK = {name: rank for rank, names in enumerate(LAYERS.values()) for name in names}
_LAYER_NAMES = list(LAYERS)

#: Imports the layers allow that docs/ARCHITECTURE.md still rules out, as (importer, imported) name
#: prefixes: metrics are pure functions on arrays (no image loading, no models), and a file format
#: two workflows read lives below both (the hub reads the generation manifest through
#: ``manifest_format``, never through ``generation/``).
NARROWER = (
    ("geofidelity_bench.metrics", "geofidelity_bench.images"),
    ("geofidelity_bench.metrics", "geofidelity_bench.image_store"),
    ("geofidelity_bench.hub", "geofidelity_bench.generation"),
)


def _all_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _import_edges(path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The package modules ``path`` imports, module-level and inside functions alike (not under
    ``if TYPE_CHECKING:``), each with the line of its first import. ``from a import b`` is an import
    of ``a.b`` when that is a module, else of ``a``; a name is resolved to the longest module it
    starts with. A package's ``__init__`` that Python runs before a submodule is not an edge."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found: dict[str, int] = {}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt) and _is_type_checking_block(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [known(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else known(module) for a in node.names]
        for target in targets:
            if target and target != _module_name(path):
                found[target] = min(found.get(target, node.lineno), node.lineno)
    return found


def _import_graph() -> dict[str, dict[str, int]]:
    modules = _all_modules()
    return {name: _import_edges(path, modules) for name, path in sorted(modules.items())}


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iteratively), those with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
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
                        components.append(sorted(component))
    return components


def _a_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    """One circle through the component's first module, each step with its file and line."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in previous:
        nxt = []
        for node in frontier:
            for succ in graph[node]:
                if succ in members and succ not in previous:
                    previous[succ] = node
                    nxt.append(succ)
        frontier = nxt
    path = [start]
    while True:
        path.append(previous[path[-1]])
        if path[-1] == start:
            break
    path.reverse()
    short = lambda m: m.removeprefix("geofidelity_bench.") or "geofidelity_bench"  # noqa: E731
    steps = [f"{short(a)} (line {graph[a][b]})" for a, b in zip(path, path[1:])]
    return " -> ".join(steps + [short(start)]) + f"   [{len(component)} modules: {', '.join(map(short, component))}]"


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return _RANK.get(parts[1] if len(parts) > 1 else "")


def test_the_import_graph_has_no_circle():
    graph = _import_graph()
    cycles = [_a_cycle(graph, c) for c in _strongly_connected(graph)]
    assert cycles == [], "import circles (module-level and function-level imports):\n" + "\n".join(cycles)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in _all_modules() if _layer(m) is None)
    assert unplaced == [], f"modules in no layer of tests/test_architecture.py LAYERS (and docs/ARCHITECTURE.md): {unplaced}"


def test_imports_run_down_the_layers():
    graph = _import_graph()
    bad = []
    for module, targets in graph.items():
        path = _all_modules()[module].relative_to(PACKAGE.parent)
        for target, line in sorted(targets.items()):
            if _layer(module) is not None and _layer(target) is not None and _layer(target) > _layer(module):
                bad.append(f"{path}:{line} imports {target} ({_LAYER_NAMES[_layer(target)]}) "
                           f"from {_LAYER_NAMES[_layer(module)]}")
            for importer, imported in NARROWER:
                if (module == importer or module.startswith(importer + ".")) and (
                        target == imported or target.startswith(imported + ".")):
                    bad.append(f"{path}:{line} imports {target}, which docs/ARCHITECTURE.md rules out for {importer}")
    assert bad == [], "imports against the layers of docs/ARCHITECTURE.md:\n" + "\n".join(bad)


def test_the_import_graph_reader_sees_a_circle():
    # the checks above are only as good as the graph: a hand-made circle and a hand-made layer
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]
    assert _a_cycle(graph, ["a", "b", "c"]).startswith("a (line 3) -> b (line 5) -> c (line 7) -> a")
    edges = _import_edges(PACKAGE / "cli" / "evaluate.py", _all_modules())
    assert "geofidelity_bench.results" in edges  # imported inside a function
    assert _layer("geofidelity_bench.metrics.panel") < _layer("geofidelity_bench.encoders.base") < _layer("geofidelity_bench.hub.push")
