"""A result's core keys are read by name in one module, fabench.analysis.result_types (the decoder);
everywhere else a result is read through its types. The test walks the syntax tree of every
module of src/fabench and fails on a string subscript of a core key (`x["backends"]`, stores and
deletes included) or a `.get`/`.pop`/`.setdefault` of one, outside the decoder and the modules
OTHER_RECORDS names (each reads a record of another kind by a name it shares; the list only
shrinks: a module on it that no longer does fails the test too).

Blind side: a key spelled through a variable or a computed string is not seen, nor one passed as a
keyword (`entry.update(stats=...)`, `dict(trials=...)`); nor is a module that reads a core key of
another record that happens to share the name (a config's `method`)."""

from __future__ import annotations

import ast
from pathlib import Path

from fabench.analysis.result_types import CORE_KEYS, BackendEntry, Result

SRC = Path(__file__).resolve().parents[1] / "src" / "fabench"
DECODER = "analysis/result_types.py"
# Modules whose reads of these names are of another record than a result: the measure stage
# writing its raw trials as it measures (measure/, owned by the measure wing's change), and its
# launcher adding how the process ended to the record it wrote (measure/launch/runner.py: the
# measure package may not import fabench.analysis, which imports it), the paired test's evidence
# (`trials`: a count) in the verdict's words, the config's `backends`, and the compile ahead's
# record (each process's `backends`: their outcomes of compiling, read by the report and by
# measure/launch/precompile.py).
OTHER_RECORDS = {"measure/cell.py", "measure/job.py", "measure/launch/runner.py", "measure/launch/precompile.py",
                 "analysis/verdict_text.py", "config.py", "report/precompile_summary.py"}
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
               if path != DECODER and path not in OTHER_RECORDS}
    assert not outside, "a result read by key outside fabench.analysis.result_types (read it through its types): " \
        + "; ".join(f"{path}:{line} [{key!r}]" for path, reads in outside.items() for line, key in reads)


def test_the_other_records_list_names_only_modules_that_still_read_by_key():
    found = readers()
    typed = sorted(path for path in OTHER_RECORDS if path not in found)
    assert not typed, "no longer read a core key's name (take them off OTHER_RECORDS): " + ", ".join(typed)


def test_the_walk_sees_each_way_of_reading_a_key():
    """The blind side of the two above: each form the walk must see, seen; a non-core key not."""
    source = 'a["backends"]\nb.get("stats")\nc["provenance"] = 1\nd.pop("trials", None)\ne["method"]\nf["status"]\n'
    assert core_key_reads(source) == [(1, "backends"), (2, "stats"), (3, "provenance"), (4, "trials"), (5, "method")]
    assert OTHER_RECORDS <= set(readers())


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


def test_the_cross_checks_and_method_decode_committed_runs():
    """The kernels' own time check of two committed H200 runs, decoded (CrossCheck): judged in 43
    and 34 of their 60 ok cells, agreeing in 38 and 29 (docs/timing.md states these), each judged
    one naming its method; a check an entry does not record decodes as not judged. Their method
    (Method): 3 trials, 2 processes a job, not reduced; the publication's, as its file states it."""
    import json
    import tarfile

    import yaml

    from fabench.analysis import analyse_run
    from fabench.analysis.result_types import CrossCheck, Method, backend_dicts

    repo = SRC.parents[1]
    with tarfile.open(repo / "examples" / "h200-x2-2026-11-27" / "archive.tgz") as tar:
        runs = [analyse_run(json.load(tar.extractfile(f"archive/cuda-13.0/{entry}/results.json")))
                for entry in ("0001-3878ea69", "0003-d182ed62")]
    counts = []
    for run in runs:
        ok = [e for r in run["results"] for e in backend_dicts(r).values() if e["status"] == "ok"]
        checks = [CrossCheck.of(e, "kernel_time") for e in ok]
        judged = [c for c in checks if c.agrees is not None]
        assert len(ok) == 60 and all(c.method for c in judged)
        assert CrossCheck.of(ok[0], "no_such_check") == CrossCheck(None, None, {})
        counts.append((len(judged), sum(1 for c in judged if c.agrees)))
        methods = {(m.trials, m.repeats, m.reduced) for m in map(Method.of, run["results"])}
        assert methods == {(3, 2, False)}
    assert counts == [(43, 38), (34, 29)]
    published = yaml.safe_load((repo / "report" / "published" / "mi300x-2025-12-30.yaml").read_text())
    method = Method.of(published)
    assert (method.warmup, method.iters, method.trials, method.get("dtype")) == (10, 100, None, "float16")


def test_an_entry_recording_no_trials_is_another_identity_than_one_with_none_in_them():
    """recorded_trials keeps a schema v1 entry (no `trials` key: its recorded figures are its
    measurements) apart from an entry whose trials list is empty, in an archive entry's identity."""
    from fabench.results.archive_layout import measurements_sha256

    entry = {"status": "ok", "reason": None, "wall_mean_ms": 1.5}
    result = {"shape_id": "b1", "provenance": {"started": "t"}}
    v1 = {"results": [{**result, "backends": {"x": entry}}]}
    empty = {"results": [{**result, "backends": {"x": {**entry, "trials": []}}}]}
    faster = {"results": [{**result, "backends": {"x": {**entry, "wall_mean_ms": 1.0}}}]}
    assert len({measurements_sha256(v1), measurements_sha256(empty), measurements_sha256(faster)}) == 3
    # With trials recorded, the recorded figures are derived, not measurements: not in the identity.
    assert measurements_sha256(empty) == measurements_sha256(
        {"results": [{**result, "backends": {"x": {**entry, "trials": [], "wall_mean_ms": 9.0}}}]})
