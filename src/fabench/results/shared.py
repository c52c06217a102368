"""Backends measured once per shape: those whose kernel reads no variant config (native fp32, SDPA
and its pinned backends; a backend says so in its registration, fabench.measure.backends.registry's
`reads_variant_config`). The jobs of the run's first variant measure them; every other variant's
job leaves them out and records where they were measured (`shared_backends`).

results.json keeps each such cell once, under the variant that measured it, so that the pooled
noise, the stop counts, the CSV and `compare` count it once. The report and the plots show it in
every variant's table: `shown` places a copy of the measured entry there, marked `measured_in`.

Torch-free: the collector, the report and the plots use it.
"""

from __future__ import annotations

import copy

from fabench.analysis.result_types import backend_dicts, shared_backends, with_backends
from fabench.results.contract import SHARED_KEY


def shared_problems(results: list[dict]) -> list[str]:
    """A shared backend must be in the measuring variant's result of the same shape: one line per
    backend that is not (a result collected without the job that measured it)."""
    by_job = {(r["variant"], r["shape_id"]): r for r in results}
    problems = []
    for result in results:
        shared = result.get(SHARED_KEY)
        if not shared:
            continue
        source = by_job.get((shared["measured_in"], result["shape_id"]))
        for name in shared_backends(result):
            if source is None or name not in backend_dicts(source):
                problems.append(f"{result['variant']}/{result['shape_id']}: $.{SHARED_KEY}: {name} measured in "
                                f"{shared['measured_in']!r}, whose result of this shape does not hold it")
            elif name in backend_dicts(result):
                problems.append(f"{result['variant']}/{result['shape_id']}: $.backends.{name}: measured here and "
                                f"shared from {shared['measured_in']!r}")
    return problems


def shown(collected: dict) -> dict:
    """The collected run as the report shows it: each shared backend's entry copied into every
    variant that shares it (marked `measured_in`), in the measuring result's backend order. The
    input is not changed; a result whose measuring job is missing keeps what it has."""
    results = collected.get("results") or []
    if not any(r.get(SHARED_KEY) for r in results):
        return collected
    by_job = {(r["variant"], r["shape_id"]): r for r in results}
    placed = []
    for result in results:
        shared = result.get(SHARED_KEY)
        source = by_job.get((shared["measured_in"], result["shape_id"])) if shared else None
        if source is None:
            placed.append(result)
            continue
        own, measured, once = backend_dicts(result), backend_dicts(source), shared_backends(result)
        names = [n for n in measured if n in once or n in own]
        names += [n for n in own if n not in names]
        placed.append(with_backends(result, {
            n: own[n] if n in own else {**copy.deepcopy(measured[n]), "measured_in": shared["measured_in"]}
            for n in names}))
    return {**collected, "results": placed}


def measured_once(collected: dict) -> dict[str, list[str]]:
    """{measuring variant: [backend names]} of the run's shared backends, for the report's sentence."""
    found: dict[str, list[str]] = {}
    for result in collected.get("results") or []:
        shared = result.get(SHARED_KEY)
        if shared:
            names = found.setdefault(shared["measured_in"], [])
            names += [n for n in shared_backends(result) if n not in names]
    return found
