"""No function of src/fabench at radon's rank D or worse (cyclomatic complexity above 20): a function
that branches that much is split by what it decides. Radon's own API reads each module's syntax
tree (radon.complexity.cc_visit), so the ranks are the ones `radon cc -s src/fabench` prints.

PENDING names the functions still at D in files another change owns, each by file and name; the
test fails when one of them is no longer at D (so the list only shrinks) and on any other function
at D or worse."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

SRC = Path(__file__).resolve().parents[1] / "src" / "fabench"
# (file under src/fabench, function as radon names it: Class.method or function)
PENDING: set[tuple[str, str]] = set()


def ranked() -> dict[tuple[str, str], tuple[str, int]]:
    """(file, function) -> (rank, complexity) of every function and method of src/fabench."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        for block in cc_visit(path.read_text()):
            methods = getattr(block, "methods", None)
            for item in ([block] if methods is None else methods):
                name = f"{item.classname}.{item.name}" if getattr(item, "classname", None) else item.name
                found[str(path.relative_to(SRC)), name] = (cc_rank(item.complexity), item.complexity)
    return found


def test_no_function_is_at_rank_d_or_worse():
    found = ranked()
    complex_ = {key: value for key, value in found.items() if value[0] >= "D"}
    new = sorted(f"{path}:{name} {rank} ({score})" for (path, name), (rank, score) in complex_.items()
                 if (path, name) not in PENDING)
    assert not new, "functions at radon rank D or worse (split them by what they decide): " + "; ".join(new)


def test_the_pending_list_names_only_functions_still_at_d():
    found = ranked()
    stale = sorted(f"{path}:{name}" for path, name in PENDING if found.get((path, name), ("A", 0))[0] < "D")
    assert not stale, "no longer at rank D (take them off PENDING): " + ", ".join(stale)


def test_the_ranking_sees_a_complex_function():
    """The blind side of the two above: a walk that found no function would pass them."""
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(25))
    (block,) = cc_visit(f"def f(x):\n{branches}\n    return None\n")
    assert cc_rank(block.complexity) == "D" and len(ranked()) > 500
