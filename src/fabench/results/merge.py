"""Merge the results of one job's processes (its `repeats`) into the job's result.

Every process measured every backend in its own trials and recorded raw observations only; the
merged entry holds all trials, each tagged with its process, and every observation, and the
analysis stage (fabench.analysis) derives its figures from them, so a figure that moves between
processes widens the intervals or makes the entry unstable instead of hiding. Kernels that differ
between processes (by fabench.analysis.policy's identity of what was launched) become a note on
the cell.

A job's file holds each cell's own figures only (medians, spread, stability): the intervals need
the noise of the run's other cells and exist only in the collected results.json, derived there
once (fabench.analysis.noise), so no two files hold different intervals for one cell.

Torch-free: the coordinating process (fabench.measure.launch.runner) never touches the GPU, and the
workflow merges the process files of a job on the host:

    python -m fabench.results.merge --out JOB.json PROCESS-0.json PROCESS-1.json ...
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from fabench.analysis.entry import analyse_result
from fabench.analysis.identity import launched_kernels
from fabench.analysis.result_types import (BackendEntry, Result, backend_names, drop_backends, method_of,
                                           process_index, shared_backends,
                                           with_backends, with_method, with_provenance, with_trials)
from fabench.measure import observations
from fabench.files import FileReadError, json_problem, output_file_arg, read_regular, write_json
from fabench.results.bounds import bounds_problem
from fabench.results.contract import PROCESS_FAILED_KEY, SHARED_KEY, SKIPPED_KEY  # noqa: F401 (the runner's too)



def merge(results: list[dict], processes: list[dict], lost: list[dict] = ()) -> dict:
    """The job's result from its processes' results (in process order) and how each process ended.
    `lost`: the records of the job's processes that wrote no result (fabench.measure.launch.launcher's
    no_result); each backend measured ok by the others is failed with why (lost_reason)."""
    typed = [Result.of(r) for r in results]
    ids = [r.provenance.process_or(i) for i, r in enumerate(typed)]
    backends = {}
    for name in backend_names(results[0]):
        backends[name] = merge_entry([r.backends[name].raw for r in typed], results[0], ids)
        if lost and backends[name]["status"] == "ok":
            backends[name].update(status="failed", failure_kind="error", reason=lost_reason(lost, ids))
    merged = with_method(with_backends(copy.deepcopy(results[0]), backends),
                         process_exits=[dict(p, **_where(typed, p["index"])) for p in processes],
                         device_fallbacks=_per_backend(typed, "device_fallbacks"),
                         local_memory_kept=_per_backend(typed, "local_memory_kept"))
    failed_reference = next((r.reference for r in typed if r.reference["status"] != "ok"), None)
    if failed_reference:
        merged["reference"] = copy.deepcopy(dict(failed_reference))
    # The last process to end, not the last by index: one process may be measured again later.
    # The times are the runner's UTC ISO strings to the second, so their order is the text's.
    merged = with_provenance(merged, finished=max(r.provenance.finished for r in typed))
    merged.pop("timeline", None)
    merged["timelines"] = [dict(r["timeline"], process=i) for i, r in zip(ids, results) if r.get("timeline")]
    return analyse_result(with_provenance(merged, drop=("process",)))


def lost_reason(lost: list[dict], measured: list[int]) -> str:
    """Why a cell whose other processes measured is failed: a process of it was lost (killed, crashed,
    timed out), so its figures are of fewer processes than the method asks; the next run of the
    workflow measures the lost process again (times_lost)."""
    said = "; ".join(str(record["reference"].get("reason") or "a process wrote no result").removeprefix(
        "no process of the job wrote a result: ") for record in lost)
    ids = ", ".join(str(i) for i in measured)
    return (f"{said}: a process of the cell was lost, its figures are of process {ids} alone "
            "(the next run measures the lost one again)")


def _where(results: list[Result], index: int) -> dict:
    """Where and when process `index` measured (its processes may run on different hosts or GPUs
    when the workflow runs them as jobs of their own); nothing for a process without a result."""
    for i, result in enumerate(results):
        prov = result.provenance
        if prov.process_or(i) == index:
            return {"host": prov.host, "gpu_uuid": prov.gpu_uuid, "gpu_lease": prov.gpu_lease,
                    "started": prov.started, "finished": prov.finished}
    return {}


def times_lost(process_file: Path) -> int:
    """How many times this process of a job was lost (killed, crashed, timed out), as its process
    file tells: the count its launcher was run with (--measured-again, recorded with how it
    ended), one more when the file is the record of a process that wrote no result. Snakemake
    re-runs a job whose params changed: a lost record's count differs from the one its job ran
    with, so the next run measures it again, and the result then recorded keeps that count, so
    the run after does not (once per loss, not forever). 0 for no file or one the merge refuses."""
    try:
        record = json.loads(Path(process_file).read_bytes())
        count = int(method_of(record)["process_exits"][0].get("measured_again", 0))
        return count + (1 if record.get(PROCESS_FAILED_KEY) else 0)
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return 0


class ProcessFileError(ValueError):
    """A process file the merge cannot use: the message names the file and what is wrong, on one line."""


REDO = "delete it and run the same command to measure that process again"
# Far above a GPU process's file (tens of thousands of samples per backend: a few MB).
MAX_PROCESS_FILE_BYTES = 256 * 1024 * 1024
# What the merge reads of a process's result, and the type of each.
PROCESS_KEYS = {"run": str, "variant": str, "shape_id": str, "platform": str, "method": dict, "backends": dict,
                "provenance": dict, "reference": dict}


def read_process_file(path: Path) -> dict:
    """A process file as the merge needs it, or ProcessFileError naming the file and the problem."""
    try:
        value = json.loads(read_regular(path, MAX_PROCESS_FILE_BYTES, follow=False))
    except FileNotFoundError:
        raise ProcessFileError(f"{path}: no such process file") from None
    except FileReadError as err:  # a link, a FIFO, a device: never followed, waited on or read
        raise ProcessFileError(f"{err}; {REDO}") from None
    except OSError as err:
        raise ProcessFileError(f"{path}: cannot be read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ProcessFileError(f"{path} is not a process result (not text); {REDO}") from None
    except json.JSONDecodeError as err:
        raise ProcessFileError(f"{path} is not a process result (not JSON: {err.msg} at line {err.lineno}, "
                               f"column {err.colno}); {REDO}") from None
    except RecursionError:
        raise ProcessFileError(f"{path} is not a process result (nested too deeply to read); {REDO}") from None
    # NaN, an infinity, nesting deeper than any result, a number no measurement can be
    problem = json_problem(value) or bounds_problem(value)
    if problem:
        raise ProcessFileError(f"{path} is not a process result ({problem}); {REDO}")
    if isinstance(value, dict) and SKIPPED_KEY in value:
        return value
    missing = [key for key, kind in PROCESS_KEYS.items() if not isinstance(value, dict)
               or not isinstance(value.get(key), kind)]
    if missing:
        what = f"a JSON {type(value).__name__}" if not isinstance(value, dict) else "without " + ", ".join(missing)
        raise ProcessFileError(f"{path} is not a process result ({what}); {REDO}")
    return value


def merge_files(paths: list[Path]) -> dict:
    """The job's result from its process files (written by `python -m fabench.measure --process N`)."""
    loaded = {Path(path): read_process_file(path) for path in paths}
    results = sorted((r for r in loaded.values() if SKIPPED_KEY not in r),
                     key=process_index)
    if not results:
        raise ProcessFileError(f"no process file among {', '.join(map(str, paths))} holds a measurement")
    _without_shared(results)
    _same_job(loaded)
    exits = sorted((e for r in results for e in method_of(r).get("process_exits", [])), key=lambda e: e["index"])
    measured = [r for r in results if not r.get(PROCESS_FAILED_KEY)]
    lost = [r for r in results if r.get(PROCESS_FAILED_KEY)]
    if measured:
        try:
            return merge(measured, exits, lost)
        except (KeyError, TypeError, ValueError, IndexError) as err:  # a file edited or cut inside
            names = ", ".join(str(p) for p, r in loaded.items() if SKIPPED_KEY not in r)
            raise ProcessFileError(f"the process files {names} do not merge ({type(err).__name__}: {err}): one "
                                   f"of them is not as its process wrote it; {REDO}") from None
    failed = with_method(copy.deepcopy(results[0]), process_exits=exits)
    failed.pop(PROCESS_FAILED_KEY)
    return failed


def _without_shared(results: list[dict]) -> None:
    """A lost process's record (the launcher's, which cannot know what its job leaves to another)
    names every configured backend; the backends its job's measured processes left to the job
    that measures them (SHARED_KEY) are not this job's, and are dropped from it."""
    shared = {name for r in results if not r.get(PROCESS_FAILED_KEY) for name in shared_backends(r)}
    for result in results:
        if result.get(PROCESS_FAILED_KEY) and shared:
            drop_backends(result, shared)


def _same_job(loaded: dict[Path, dict]) -> None:
    """Every process file measured the same job with the same backends (not a file of another job)."""
    first_path, first = next((p, r) for p, r in loaded.items() if SKIPPED_KEY not in r)
    for path, result in loaded.items():
        if SKIPPED_KEY in result:
            continue
        for key in ("run", "variant", "shape_id"):
            if result[key] != first[key]:
                raise ProcessFileError(f"{path}: {key} {result[key]!r} differs from {first[key]!r} of {first_path} "
                                       f"(a process file of another job?); {REDO}")
        if set(backend_names(result)) != set(backend_names(first)):
            raise ProcessFileError(f"{path}: backends {sorted(backend_names(result))} differ from "
                                   f"{sorted(backend_names(first))} of {first_path}; {REDO}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.results.merge",
                                     description="Merge a job's process files into the job's result.")
    parser.add_argument("--out", required=True, type=output_file_arg)
    parser.add_argument("processes", nargs="+", type=Path, help="the job's process files, any order")
    args = parser.parse_args(argv)
    try:
        merged = merge_files(args.processes)
    except ProcessFileError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 1
    write_json(args.out, merged)
    return 0


def merge_entry(entries: list[dict], result: dict, ids: list[int]) -> dict:
    """One backend over the processes: failed if it failed in any (that process's reason), ok if
    ok in all; all trials and observations, the kernels and compile time of the first that has them."""
    typed = [BackendEntry.of(e) for e in entries]
    first = _telling(typed)
    merged = with_trials(copy.deepcopy(entries[first]), [copy.deepcopy(t) for e in typed for t in e.trials])
    if typed[first].status == "failed" and len(entries) > 1 and not merged["reason"].startswith("process "):
        merged["reason"] = f"process {ids[first]}: {merged['reason']}"
    recorded = [e.kernels for e in typed if e.kernels]
    kernels = next((k for k in recorded if k.get("names") is not None), recorded[0] if recorded else None)
    merged["kernels"] = copy.deepcopy(kernels)
    merged["compile_s"] = next((e.compile_s for e in typed if e.compile_s is not None), None)
    # The kernels are told apart as merged: the entry merged from holds the kernels chosen above.
    compared = [{**e, "kernels": kernels} if i == first else e for i, e in enumerate(entries)]
    merged["observations"] = _observations(typed, kernel_differences(compared, ids))
    return merged


def _observations(entries: list[BackendEntry], differences: list[dict]) -> dict:
    """The processes' observations of one backend as one: every note, then the kernels' differences;
    the first reason do_bench was not used."""
    observed = [e.observations for e in entries]
    return {"notes": [copy.deepcopy(note) for o in observed for note in o.get("notes", [])] + differences,
            "do_bench_reason": next((o["do_bench_reason"] for o in observed if o.get("do_bench_reason")), None)}


def _telling(entries: list[BackendEntry]) -> int:
    """The process whose entry the merged one starts from: the first that failed, else the first ok."""
    failed = [i for i, e in enumerate(entries) if e.status == "failed"]
    ok = [i for i, e in enumerate(entries) if e.ok]
    return failed[0] if failed else (ok[0] if ok else 0)


def kernel_differences(entries: list[dict], ids: list[int]) -> list[dict]:
    """An observation (fabench.measure.observations.kernels_differ) when the processes launched
    different kernels (fabench.analysis.policy's identity: names, source digest, launch settings).
    Only a job's first process profiles its kernels; the digest of what Inductor generated depends
    on the compile caches' state, not the kernel, and is no evidence either way."""
    profiled = [(i, e.kernels) for i, e in zip(ids, map(BackendEntry.of, entries))
                if (e.kernels or {}).get("names") is not None]
    launched = {json.dumps(launched_kernels(k), sort_keys=True) for _, k in profiled}
    if len(launched) <= 1:
        return []
    return [observations.kernels_differ([{"process": i, "names": list(k["names"]), "launch": k.get("launch"),
                                          "source_sha256": k.get("source_sha256")} for i, k in profiled])]


def _per_backend(results: list[Result], key: str) -> dict:
    """A method's per-backend reasons (`key`) over the job's processes: each backend's first."""
    reasons: dict = {}
    for result in results:
        for name, reason in (result.method.get(key) or {}).items():
            reasons.setdefault(name, reason)
    return reasons


if __name__ == "__main__":
    sys.exit(main())
