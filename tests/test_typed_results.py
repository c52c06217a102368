"""A result's core keys are read by name in one module, fabench.analysis.result_types (the decoder);
everywhere else a result is read through its types. The test walks the syntax tree of every
module of src/fabench and fails on a string subscript of a core key (`x["backends"]`, stores and
deletes included) or a `.get`/`.pop`/`.setdefault` of one, outside the decoder and the modules
NOT_YET_TYPED names (each still reads the JSON by key; the list only shrinks: a module on it that
no longer does fails the test too).

Blind side: a key spelled through a variable or a computed string is not seen; nor is a module
that reads a core key of another record that happens to share the name (a config's `method`)."""

from __future__ import annotations

import ast
from pathlib import Path

from fabench.analysis.result_types import CORE_KEYS, BackendEntry, Result

SRC = Path(__file__).resolve().parents[1] / "src" / "fabench"
DECODER = "analysis/result_types.py"
# Modules still reading a result's core keys by name. Those marked (lead) or (measure) are owned by
# other changes (issue 45's analysis, the measure wing's launch) and are typed there.
NOT_YET_TYPED = {
    "analysis/components.py",  # (lead)
    "analysis/detector.py",  # (lead)
    "analysis/identity.py",  # (lead)
    "analysis/entry.py",
    "analysis/figures.py",
    "analysis/noise.py",
    "analysis/pairs.py",
    "analysis/within_run.py",
    "analysis/legacy.py",
    "report/compare_markdown.py",
    "report/wall_clock.py",
    "report/sections/overview.py",
    "report/sections/precision.py",
    "report/sections/results.py",
    "report/sections/timing.py",
    "results/archive_layout.py",
    "results/compare.py",
    "results/results_csv.py",
    "results/shared.py",
    "tune/measure.py",
}
# Modules whose reads of these names are of another record than a result: the measure stage
# writing its raw trials as it measures (measure/, owned by the measure wing's change), and its
# launcher adding how the process ended to the record it wrote (measure/launch/runner.py: the
# measure package may not import fabench.analysis, which imports it), the compiling processes'
# outcomes by backend (measure/launch/precompile.py: the compile ahead's record, not a result), the
# paired test's evidence (`trials`: a count) in the verdict's words, and the config's `backends`.
OTHER_RECORDS = {"measure/cell.py", "measure/job.py", "measure/launch/runner.py", "measure/launch/precompile.py",
                 "analysis/verdict_text.py", "config.py"}
LOOKUPS = ("get", "pop", "setdefault")


def core_key_reads(source: str) -> list[tuple[int, str]]:
    """(line, key) of each subscript or .get/.pop/.setdefault of a core key by a string constant."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            key = node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOOKUPS
              and node.args):
            key = node.args[0]
        else:
            continue
        if isinstance(key, ast.Constant) and key.value in CORE_KEYS:
            found.append((node.lineno, key.value))
    return found


def readers() -> dict[str, list[tuple[int, str]]]:
    """Each module of src/fabench (path under it) that reads a core key by name, with where."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        reads = core_key_reads(path.read_text())
        if reads:
            found[str(path.relative_to(SRC))] = reads
    return found


def test_no_module_but_the_decoder_reads_a_result_by_its_core_keys():
    found = readers()
    outside = {path: reads for path, reads in found.items()
               if path != DECODER and path not in NOT_YET_TYPED | OTHER_RECORDS}
    assert not outside, "a result read by key outside fabench.analysis.result_types (read it through its types): " \
        + "; ".join(f"{path}:{line} [{key!r}]" for path, reads in outside.items() for line, key in reads)


def test_the_not_yet_typed_list_names_only_modules_that_still_read_by_key():
    found = readers()
    typed = sorted(path for path in NOT_YET_TYPED | OTHER_RECORDS if path not in found)
    assert not typed, "no longer read a result by key (take them off NOT_YET_TYPED): " + ", ".join(typed)


def test_the_walk_sees_each_way_of_reading_a_key():
    """The blind side of the two above: each form the walk must see, seen; a non-core key not."""
    source = 'a["backends"]\nb.get("stats")\nc["provenance"] = 1\nd.pop("trials", None)\ne["method"]\nf["status"]\n'
    assert core_key_reads(source) == [(1, "backends"), (2, "stats"), (3, "provenance"), (4, "trials"), (5, "method")]
    assert len(readers()) >= len(NOT_YET_TYPED)


def test_the_types_decode_a_committed_result():
    """The decoder reads a real archived result: every backend typed, each ok one with its stats."""
    import json

    run = json.loads((SRC.parents[1] / "examples" / "h200" / "archive" / "cuda-13.0" / "0003-25eb76a9"
                      / "results.json").read_text())
    results = [Result.of(r) for r in run["results"]]
    entries = [e for r in results for e in r.backends.values()]
    assert entries and all(isinstance(e, BackendEntry) for e in entries)
    ok = [e for e in entries if e.ok]
    assert ok and all(e.stats is not None and e.stats.metric("wall_mean_ms").median > 0 for e in ok)
    assert all(r.provenance.finished for r in results)
