"""The compile ahead's record (written by fabench.measure.launch.precompile, checked as the side
file COMPILE_AHEAD of fabench.side_files) in a line, for the report's wall-clock section.

A module of its own because the record is not a result: its processes name their `backends` (each
backend's outcome of compiling), a key tests/test_typed_results.py otherwise reads as a result's."""

from __future__ import annotations


def compile_ahead_summary(record: dict) -> dict:
    """The compile ahead in a line: how long it held its GPU, its processes, how many at a time, the
    kernels' first calls it made, the processes or backends that failed (their jobs compiled for
    themselves) and the jobs it found compiled ahead before (their stamps)."""
    processes = record.get("processes") or []
    outcomes = [o for p in processes for o in (p.get("backends") or {}).values()]
    return {"seconds": record["ended_at"] - record["leased_at"], "processes": len(processes),
            "parallel": record.get("parallel"), "gpu": record.get("gpu_uuid") or record.get("gpu"),
            "compiled": sum(1 for o in outcomes if o.get("status") == "compiled"),
            "cached": len(record.get("cached") or []),
            "failed": sum(1 for p in processes if p.get("reason"))
            + sum(1 for o in outcomes if o.get("status") == "failed")}
