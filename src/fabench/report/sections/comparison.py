"""Published vs Reproduced: each published time beside this run's, for every variant and shape
both have. Left out of the report when no published numbers are given.
"""

from __future__ import annotations

from fabench.analysis import claims
from fabench.analysis.policy import matches_published_hardware
from fabench.analysis.result_types import provenance_of
from fabench.report.format import fmt_ms, fmt_sig, md_text, shape_text, status_text
from fabench.report.model import ROLES, Run, role_backend, role_ms
from fabench.results.published import find_published


def same_hardware(result: dict, published: dict) -> bool:
    """Measured on the published hardware (the policy's test), so a difference in % means something."""
    return matches_published_hardware([result], published)


def difference_text(result: dict, published: dict, ours: float | None, pub: float) -> str:
    """A % on the published hardware; across machines a % is noise, so there the factor between them."""
    if ours is None or not pub:
        return "n/a"
    if same_hardware(result, published):
        return f"{(ours - pub) / pub * 100:+.1f}%"
    return f"{fmt_sig(ours / pub)}x slower" if ours >= pub else f"{fmt_sig(pub / ours)}x faster"


def untold_mark(run: Run, backend: dict | None) -> str:
    """" ~" where this run's figure supports no claim (unstable, one process, no noise estimate)."""
    return "" if run.published or not claims.unsupported(backend) else " ~"


def untold_reasons(run: Run) -> list[str]:
    """Why some of this run's figures support no claim, once each (the legend of untold_mark)."""
    if run.published:
        return []
    reasons = (claims.unsupported(role_backend(r, role)) for r in run.results for role in ROLES)
    return [md_text(reason) for reason in dict.fromkeys(reasons) if reason]


def comparison_rows(run: Run, published: dict) -> list[dict]:
    """One row per role that the published report printed a time for, raw backend labels kept
    for the caveat about roles filled by other backends."""
    rows = []
    for result in run.results:
        row = find_published(published, result["variant"], result["shape"])
        for role in ROLES if row else ():
            name = published["roles"][role]
            if row["ms"].get(name) is None:
                continue
            pub, ours, backend = row["ms"][name], role_ms(result, role), role_backend(result, role)
            rows.append({
                "published_backend": published["labels"][name],
                "backend": backend["label"] if backend else result["roles"][role],
                "cells": [md_text(run.variant_label(result["variant"])), shape_text(result["shape"]), role,
                          md_text(published["labels"][name]), fmt_ms(pub),
                          md_text(backend["label"] if backend else result["roles"][role]),
                          fmt_ms(ours) if ours is not None else status_text(backend),
                          difference_text(result, published, ours, pub) + untold_mark(run, backend)],
            })
    return rows


def context(run: Run, published: dict | None) -> dict | None:
    if not published:
        return None
    source, hardware = published["source"], published["source"]["hardware"]
    rows = comparison_rows(run, published)
    other = [r for r in run.results if not same_hardware(r, published)]
    swapped = sorted({(r["published_backend"], r["backend"]) for r in rows
                      if r["published_backend"] != r["backend"]})
    return {
        "source": {key: md_text(source[key]) for key in ("title", "subtitle", "date")},
        "device": md_text(hardware["device"]),
        "arch": md_text(hardware["arch"]),
        "rows": [r["cells"] for r in rows],
        "untold": untold_reasons(run),
        # Jobs measured on other hardware than published: their Difference is a factor, not a %.
        "other_devices": [md_text(d) for d in dict.fromkeys(provenance_of(r).get("device") for r in other) if d],
        "other_hardware": bool(other),
        "all_other": len(other) == len(run.results),
        "swapped": [(md_text(a), md_text(b)) for a, b in swapped],
    }
