"""The package's structure: no import cycle, between modules or between packages, and the helpers
every stage shares defined once.

Every import statement of src/fabench is read from the source (ast), those inside functions too: a
lazy import is a dependency all the same, it only arrives later. A package is a sub-package of
fabench (fabench.measure, fabench.report, ...) or a top-level module (fabench.config). Importing a
submodule runs its package's __init__ first; that is Python's mechanics, not a dependency of the
importing code, so it adds no edge (an __init__'s own imports do).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every module under src/fabench."""
    found = {}
    for path in sorted((src / "fabench").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def imported(name: str, path: Path, is_package: bool, known: dict) -> set[str]:
    """The fabench modules one module imports, at any depth of its code."""
    package = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            # `from a import b` imports the module a.b when there is one, else a name of a.
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names)
    return {target for target in targets if target in known and target != name}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    known = modules(src)
    return {name: imported(name, path, is_package, known) for name, (path, is_package) in known.items()}


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), set())
        edges.update(package_of(t) for t in targets if package_of(t) != package_of(module))
    return packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_another_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_no_package_imports_another_that_imports_it_back():
    assert cycles(package_graph(import_graph())) == []


def test_the_walk_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a cycle closed only by an import inside a function, or by a relative
    import, is found."""
    package = tmp_path / "fabench"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "config.py").write_text("def check():\n    from fabench.sub import later\n")
    (package / "sub" / "later.py").write_text("from ..config import check\n")
    graph = import_graph(tmp_path)
    assert graph["fabench.sub.later"] == {"fabench.config"}
    assert cycles(graph) == [["fabench.config", "fabench.sub.later"]]
    assert cycles(package_graph(graph)) == [["fabench.config", "fabench.sub"]]


def test_the_walk_reads_every_module():
    """Every .py file under src/fabench is a node, the lazily imported stages among its edges."""
    graph = import_graph()
    assert len(graph) == len(list((SRC / "fabench").rglob("*.py")))
    assert "fabench.tune.measure" in graph["fabench.tune.job"]  # imported inside run()


# Helpers that were once written in several modules (fmt_ms, shape_text and value_text in the
# comparison's Markdown and the report; shape_key in the collector; the Jinja environment).
SHARED_HELPERS = ("fmt_ms", "shape_text", "shape_key", "value_text", "template_env", "main_head_dim")


def top_level_definitions(name: str) -> list[str]:
    return [module for module, (path, _) in modules().items()
            for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name]


@pytest.mark.parametrize("name", SHARED_HELPERS)
def test_a_shared_helper_is_defined_once(name):
    assert len(top_level_definitions(name)) == 1, top_level_definitions(name)


def test_the_main_head_dim_is_counted_in_one_place():
    """The head_dim most shapes share (the report's subject, the sweep's shapes, the comparison's
    row order) is fabench.shapes.main_head_dim's answer, counted nowhere else."""
    counting = [module for module, (path, _) in modules().items()
                if re.search(r'Counter\([^)]*head_dim', path.read_text())]
    assert counting == ["fabench.shapes"], counting
