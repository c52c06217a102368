"""Scoring a stage's candidates over its shapes, from the per-shape sweep jobs' records.

A candidate's figure at a shape is its median time (device time on a GPU, the published wall
clock on a CPU, as the benchmark judges), and its speedup there is the reference config's time,
measured in the same process, over its own. Only a candidate that ran correctly at every shape
can be ranked: one config is written for the whole experiment. The score over shapes is the
geometric mean of the speedups (`geomean`) or the smallest one (`worst`).
"""

from __future__ import annotations

import math

OBJECTIVES = ("geomean", "worst")


class SweepError(ValueError):
    """The sweep's records cannot give an answer; the message says why, on one line."""


def score(speedups: list[float], objective: str) -> float:
    if objective == "geomean":
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    if objective == "worst":
        return min(speedups)
    raise SweepError(f"sweep.objective: {objective!r} (expected one of {', '.join(OBJECTIVES)})")


def by_candidate(jobs: list[dict]) -> dict[str, dict[str, dict]]:
    """candidate id -> shape id -> the candidate's record at that shape; every job of a stage must
    have timed the same candidates."""
    table: dict[str, dict[str, dict]] = {}
    first = None
    for job in jobs:
        ids = [c["id"] for c in job["candidates"]]
        if first is None:
            first = (job["shape_id"], ids)
        elif sorted(ids) != sorted(first[1]):
            raise SweepError(f"stage {job['stage']}: the job of {job['shape_id']} timed other candidates than "
                             f"the job of {first[0]} (was the space changed between them? run the stage again)")
        for record in job["candidates"]:
            table.setdefault(record["id"], {})[job["shape_id"]] = record
    return table


def reference_id(table: dict[str, dict[str, dict]]) -> str:
    return next(cid for cid, shapes in table.items() if any(r["reference"] for r in shapes.values()))


def reference_times(table: dict[str, dict[str, dict]]) -> dict[str, float]:
    """The reference config's time per shape; a reference that did not run stops the sweep."""
    ref = table[reference_id(table)]
    for shape_id, record in ref.items():
        if record["status"] != "ok":
            raise SweepError(f"the reference config {record['id']} did not run at {shape_id} "
                             f"({record['status']}: {record['reason']}): no speedup can be taken")
    return {shape_id: record["ms"] for shape_id, record in ref.items()}


def dropped_reason(shapes: dict[str, dict]) -> str | None:
    """Why a candidate cannot be ranked (its first shape that did not run cleanly), else None."""
    for shape_id, record in shapes.items():
        if record["status"] != "ok":
            return f"{shape_id}: {record['reason'] or record['status']}"
    return None


def ranking(jobs: list[dict], objective: str) -> list[dict]:
    """Every candidate of a stage, best first: {id, values, score, speedups, dropped}; those
    that could not be ranked (dropped is their reason) last, score None."""
    table = by_candidate(jobs)
    base = reference_times(table)
    ranked, unranked = [], []
    for cid, shapes in table.items():
        record = next(iter(shapes.values()))
        entry = {"id": cid, "values": record["values"], "config": record["config"],
                 "reference": record["reference"], "score": None, "speedups": {}, "dropped": dropped_reason(shapes)}
        if entry["dropped"] is None:
            entry["speedups"] = {s: base[s] / shapes[s]["ms"] for s in base}
            entry["score"] = score(list(entry["speedups"].values()), objective)
            ranked.append(entry)
        else:
            unranked.append(entry)
    ranked.sort(key=lambda e: (-e["score"], e["id"]))
    return ranked + sorted(unranked, key=lambda e: e["id"])


def shortlist(jobs: list[dict], objective: str, keep: int) -> list[dict]:
    """The values of the best `keep` ranked candidates (the coarse stage's survivors)."""
    ranked = [e for e in ranking(jobs, objective) if e["score"] is not None]
    if not ranked:
        raise SweepError(f"stage {jobs[0]['stage']}: no candidate ran correctly at every shape")
    return [e["values"] for e in ranked[:keep]]


def per_shape_best(jobs: list[dict]) -> dict[str, dict]:
    """shape id -> the fastest candidate that ran correctly there, with its speedup over the reference."""
    table = by_candidate(jobs)
    base = reference_times(table)
    best = {}
    for shape_id, ref_ms in base.items():
        ran = [(shapes[shape_id]["ms"], cid) for cid, shapes in table.items()
               if shape_id in shapes and shapes[shape_id]["status"] == "ok"]
        ms, cid = min(ran)
        record = table[cid][shape_id]
        best[shape_id] = {"id": cid, "ms": ms, "ci95": record["ci95"], "speedup": ref_ms / ms}
    return best
