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


# The measure wing's rooms (fabench/measure/__init__.py), top down. A module at the wing's own level
# is a room of its own; a sub-package is one room. A room imports only rooms below it, and each
# sub-package only the modules of the wing its __init__ names.
MEASURE = "fabench.measure"
MEASURE_ROOMS = ("launch", "backends", "device")
MAY_IMPORT = {
    "launch": {"spec", "invocation", "timeline", "visibility", "host_cards", "record", "job", "backends", "device"},
    "backends": {"device"},
    "device": {"spec"},
}


def measure_room(module: str) -> str | None:
    """The room of a module of the measure wing (None: outside the wing, or the wing's __init__)."""
    parts = module.split(".")
    if parts[:2] != MEASURE.split(".") or len(parts) < 3:
        return None
    return parts[2]


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        room = measure_room(module)
        if room is None:
            continue
        edges = rooms.setdefault(room, set())
        edges.update(measure_room(t) for t in targets if measure_room(t) not in (None, room))
    return rooms


def test_the_measure_rooms_import_each_other_in_no_circle():
    assert cycles(room_graph(import_graph())) == []


@pytest.mark.parametrize("room", MEASURE_ROOMS)
def test_a_measure_room_imports_only_what_its_init_names(room):
    assert room_graph(import_graph())[room] <= MAY_IMPORT[room], room_graph(import_graph())[room]


def test_no_measure_module_imports_launch():
    """launch/ starts the measuring processes: only the plan, the container launcher and the
    runner's own command (measure/__main__) stand above it."""
    importers = {module for module, targets in import_graph().items()
                 if measure_room(module) not in (None, "launch") and module != f"{MEASURE}.__main__"
                 and any(measure_room(t) == "launch" for t in targets)}
    assert importers == set()


def test_the_room_walk_sees_a_room_importing_upward(tmp_path):
    """The checker itself: a device module that imports a backend is an arrow the test refuses, and
    a lazy import back into launch/ closes a circle."""
    wing = tmp_path / "fabench" / "measure"
    for room in MEASURE_ROOMS:
        (wing / room).mkdir(parents=True)
        (wing / room / "__init__.py").write_text("")
    (tmp_path / "fabench" / "__init__.py").write_text("")
    (wing / "__init__.py").write_text("")
    (wing / "device" / "timer.py").write_text("from fabench.measure.backends import registry\n")
    (wing / "backends" / "registry.py").write_text("")
    (wing / "job.py").write_text("def run():\n    from fabench.measure.launch import worker\n")
    (wing / "launch" / "worker.py").write_text("from fabench.measure import job\n")
    rooms = room_graph(import_graph(tmp_path))
    assert rooms["device"] == {"backends"} and not rooms["device"] <= MAY_IMPORT["device"]
    assert cycles(rooms) == [["job", "launch"]]


def test_the_measure_stage_imports_none_of_its_readers():
    """The measure stage defines what it records (fabench.measure.record); the stages that read it,
    results and analysis, are never imported by it, lazily or not."""
    readers = ("fabench.results", "fabench.analysis")
    taken = {module: sorted(t for t in targets if t.startswith(readers))
             for module, targets in import_graph().items() if module.startswith(MEASURE)}
    assert {module: targets for module, targets in taken.items() if targets} == {}
