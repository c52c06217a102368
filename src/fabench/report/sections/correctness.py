"""Correctness: every backend that ran, its output against the reference, judged against the
run's tolerance; backends that could not run on this host are listed once instead.
"""

from __future__ import annotations

from collections import Counter

from fabench.analysis.result_types import backend_dicts
from fabench.report.format import backend_name, fmt, md_code, md_text, shape_text, status_text
from fabench.report.model import RAN, ROLES, Run


def verdict(correctness: dict | None, tolerance: dict) -> str:
    """Judged against the run's tolerance; the runner's own verdict only when no numbers exist."""
    c = correctness or {}
    err, cos = c.get("max_abs_err"), c.get("cosine")
    if err is None and cos is None:
        passed = c.get("passed")
        return "n/a" if passed is None else ("pass" if passed else "**FAIL**")
    good = (err is None or err <= tolerance["max_abs_err"]) and (cos is None or cos >= tolerance["min_cosine"])
    return "pass" if good else "**FAIL**"


def unavailable(run: Run) -> list[dict]:
    """One entry per backend that did not run on this host, with its reason, not one per job.

    A role backend missing from a job's results counts too (`missing`). `jobs` says in how many
    of the `total` jobs, so the template can say so when not all jobs agree.
    """
    counts: Counter = Counter()
    for result in run.results:
        for name, backend in backend_dicts(result).items():
            if backend["status"] not in RAN:
                counts[backend_name(name, backend), md_text(backend["reason"]) if backend["reason"] else None, False] += 1
        for role in ROLES:
            name = result["roles"][role]
            if name not in backend_dicts(result):
                counts[md_code(name), None, True] += 1
    return [{"backend": who, "reason": reason, "missing": missing, "jobs": n, "total": len(run.results)}
            for (who, reason, missing), n in counts.items()]


def context(run: Run, published: dict | None) -> dict:
    rows = []
    for result, name, backend in run.ran_backends():
        c = backend.get("correctness") or {}
        rows.append([md_text(run.variant_label(result["variant"])), shape_text(result["shape"]),
                     backend_name(name, backend), status_text(backend), fmt(c.get("max_abs_err"), ".2e"),
                     fmt(c.get("cosine"), ".6f"), verdict(c, result["tolerance"])])
    return {"tolerance": run.first["tolerance"], "unavailable": unavailable(run), "rows": rows}
