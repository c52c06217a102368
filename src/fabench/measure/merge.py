"""Merge the results of one job's processes (its `repeats`) into the job's result.

Every process measured every backend in its own trials and recorded raw observations only; the
merged entry holds all trials, each tagged with its process, and every observation, and the
analysis stage (fabench.analysis) derives its figures from them, so a figure that moves between
processes widens the intervals or makes the entry unstable instead of hiding. Kernels that differ
between processes (names or generated source) become a note on the cell.

Torch-free: the coordinating process (fabench.measure.runner) never touches the GPU, and the
workflow merges the process files of a job on the host:

    python -m fabench.measure.merge --out JOB.json PROCESS-0.json PROCESS-1.json ...
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from fabench.files import write_json
from fabench.analysis import analyse_run

# A process file that is no measurement: a process beyond its platform's repeats (a CPU's
# cpu.repeats), which measured nothing and is left out of the merge.
SKIPPED_KEY = "_skipped"
# A process file made for a process that wrote no result (killed, crashed): every backend failed
# with why. Kept only when no process of the job measured; otherwise only its exit is recorded.
PROCESS_FAILED_KEY = "_process_failed"


def merge(results: list[dict], processes: list[dict]) -> dict:
    """The job's result from its processes' results (in process order) and how each process ended."""
    merged = copy.deepcopy(results[0])
    method = merged["method"]
    ids = [r["provenance"].get("process", i) for i, r in enumerate(results)]
    for name in merged["backends"]:
        merged["backends"][name] = merge_entry([r["backends"][name] for r in results], merged, ids)
    method["process_exits"] = [dict(p, **_where(results, p["index"])) for p in processes]
    method["device_fallbacks"] = _fallbacks(results)
    failed_reference = next((r["reference"] for r in results if r["reference"]["status"] != "ok"), None)
    if failed_reference:
        merged["reference"] = failed_reference
    merged["provenance"]["finished"] = results[-1]["provenance"]["finished"]
    merged["provenance"].pop("process", None)
    return analyse_run({"results": [merged]})["results"][0]


def _where(results: list[dict], index: int) -> dict:
    """Where and when process `index` measured (its processes may run on different hosts or GPUs
    when the workflow runs them as jobs of their own); nothing for a process without a result."""
    for i, result in enumerate(results):
        prov = result["provenance"]
        if prov.get("process", i) == index:
            gpu = prov.get("gpu") or {}
            return {"host": prov.get("host"), "gpu_uuid": gpu.get("uuid"), "started": prov.get("started"),
                    "finished": prov.get("finished")}
    return {}


def merge_files(paths: list[Path]) -> dict:
    """The job's result from its process files (written by `python -m fabench.measure --process N`)."""
    loaded = [json.loads(Path(path).read_text()) for path in paths]
    results = sorted((r for r in loaded if SKIPPED_KEY not in r), key=lambda r: r["provenance"].get("process", 0))
    if not results:
        raise ValueError(f"no process file among {[str(p) for p in paths]} holds a measurement")
    exits = sorted((e for r in results for e in r["method"].get("process_exits", [])), key=lambda e: e["index"])
    measured = [r for r in results if not r.get(PROCESS_FAILED_KEY)]
    if measured:
        return merge(measured, exits)
    failed = copy.deepcopy(results[0])
    failed.pop(PROCESS_FAILED_KEY)
    failed["method"]["process_exits"] = exits
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.measure.merge",
                                     description="Merge a job's process files into the job's result.")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("processes", nargs="+", type=Path, help="the job's process files, any order")
    args = parser.parse_args(argv)
    write_json(args.out, merge_files(args.processes))
    return 0


def merge_entry(entries: list[dict], result: dict, ids: list[int]) -> dict:
    """One backend over the processes: failed if it failed in any (that process's reason), ok if
    ok in all; all trials and observations, the kernels and compile time of the first that has them."""
    entries = copy.deepcopy(entries)
    failed = [i for i, e in enumerate(entries) if e["status"] == "failed"]
    ok = [i for i, e in enumerate(entries) if e["status"] == "ok"]
    first = failed[0] if failed else (ok[0] if ok else 0)
    merged = entries[first]
    if failed and len(entries) > 1 and not merged["reason"].startswith("process "):
        merged["reason"] = f"process {ids[first]}: {merged['reason']}"
    merged["trials"] = [trial for entry in entries for trial in entry["trials"]]
    merged["kernels"] = next((e["kernels"] for e in entries if e["kernels"]), None)
    merged["compile_s"] = next((e["compile_s"] for e in entries if e["compile_s"] is not None), None)
    observed = [e.get("observations") or {} for e in entries]
    merged["observations"] = {
        "notes": [note for o in observed for note in o.get("notes", [])] + kernel_differences(entries, ids),
        "do_bench_reason": next((o["do_bench_reason"] for o in observed if o.get("do_bench_reason")), None)}
    return merged


def kernel_differences(entries: list[dict], ids: list[int]) -> list[str]:
    """A note when the processes launched different kernels or compiled different sources."""
    seen = [(i, e["kernels"]) for i, e in zip(ids, entries) if e["kernels"]]
    if len(seen) < 2:
        return []
    signature = [(k["names"], k["source_sha256"], (k["launch"] or {}).get("num_stages"),
                  (k["launch"] or {}).get("num_warps"), (k["launch"] or {}).get("block_sizes")) for _, k in seen]
    if all(s == signature[0] for s in signature):
        return []
    described = "; ".join(f"process {i}: {', '.join(k['names'])} (source sha256 {str(k['source_sha256'])[:12]}, "
                          f"launch {k['launch']})" for i, k in seen)
    return [f"the processes ran different kernels: {described}"]


def _fallbacks(results: list[dict]) -> dict:
    fallbacks: dict = {}
    for result in results:
        for name, reason in (result["method"].get("device_fallbacks") or {}).items():
            fallbacks.setdefault(name, reason)
    return fallbacks


if __name__ == "__main__":
    sys.exit(main())
