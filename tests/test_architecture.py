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
    lazy = "geofidelity_bench.encoders.dino_vit_keys"  # imported inside a function of metrics/mfp.py
    assert lazy in _imports(PACKAGE / "metrics" / "mfp.py")
    assert lazy not in _imports(PACKAGE / "metrics" / "mfp.py", module_level=True)
