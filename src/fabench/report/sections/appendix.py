"""Appendix: the last variant printed as the published benchmark script prints its output, a
fixed-width table in a code block, then a vendor-vs-Triton comparison for each shape of another
head_dim. Inside a code block text is literal, so nothing here is escaped.

The printout's derived figures follow the comparison policy as the Results tables do: a speedup
carries the policy's mark (fabench.report.sections.results.MARKS), and the "X is N x faster than
Y" line is printed only where the policy names a faster cell; otherwise the line says what the
policy says instead (the same within its margin, or no claim and why).
"""

from __future__ import annotations

from typing import Sequence

from fabench.report.format import fmt_ms, fmt_times, shape_text, status_text
from fabench.report.model import ROLES, Run, role_backend, role_ms, speedup
from fabench.report.sections.results import MARKS, NAMES_A_WINNER, column_roles

# The published appendix prints fields left-aligned in these widths, one space apart, under and
# over rules of 90 '=' (measured from the published text). A column whose label or a value does not
# fit is widened to its longest cell plus GAP, and the rules by as much.
WIDTHS = (20, 15, 15, 15, 12)
RULE_WIDTH = 90
GAP = 2


def column_widths(lines: list[list[str]]) -> list[int]:
    """The published widths, except where a cell does not fit (leaves no space before the next)."""
    widths = []
    for i, width in enumerate(WIDTHS):
        longest = max((len(cells[i]) for cells in lines if len(cells) > i), default=0)
        widths.append(width if longest < width else longest + GAP)
    return widths


def fixed_width(cells: list[str], widths: Sequence[int]) -> str:
    padded = [f"{cell:<{width}}" for cell, width in zip(cells, widths)]
    return " ".join(padded + list(cells[len(widths):]))


def plain_ms(result: dict, role: str) -> str:
    ms = role_ms(result, role)
    return fmt_ms(ms) if ms is not None else status_text(role_backend(result, role))


def speedup_text(run: Run, result: dict, role: str) -> str:
    """The role's speedup over the baseline, with the policy's mark on the two cells."""
    text, mark = fmt_times(speedup(result, role)), MARKS.get(run.role_claim(result, "baseline", role)["claim"])
    return f"{text} {mark}" if mark and text != "n/a" else text


def comparison(run: Run, result: dict) -> dict:
    """The published "CK vs Triton" lines' values: times (or what happened instead) and
    Triton/vendor, which the published text calls "slower" when the vendor took longer; the
    ratio only where the policy names a faster cell, else its verdict (`same`, or `why` not)."""
    vendor, triton = role_ms(result, "vendor"), role_ms(result, "triton")
    claim = run.role_claim(result, "vendor", "triton")
    told = claim["claim"] in NAMES_A_WINNER
    untold = claim["claim"] in ("cannot tell", "below margin") and vendor and triton
    return {"shape": run.shape_name(result["shape"]),
            "vendor": {"ms": vendor, "status": status_text(role_backend(result, "vendor"))},
            "triton": {"ms": triton, "status": status_text(role_backend(result, "triton"))},
            "ratio": triton / vendor if vendor and triton and told else None,
            "vendor_slower": claim["faster"] == "b",
            "same": claim["claim"] == "same", "no_claim": claim["why"] if untold else None}


def context(run: Run, published: dict | None) -> dict:
    groups = run.head_dim_groups(run.variants[-1])
    b, v, t = (run.label(role) for role in ROLES)
    # One column per backend, as in the Results tables: a backend in two roles is printed once.
    shown = list(column_roles(run))
    speedups = [role for role in shown if role != "baseline"]
    header = ["Config", *(f"{run.label(role)} (ms)" for role in shown), *(f"{run.label(role)} Speedup" for role in speedups)]
    rows = [[shape_text(r["shape"]), *(plain_ms(r, role) for role in shown),
             *(speedup_text(run, r, role) for role in speedups)]
            for head_dim, results in groups if head_dim == run.main_head_dim for r in results]
    widths = column_widths([header, *rows])
    gpu = run.provenance_values("device")
    return {
        "device": run.platform.torch_device,
        "gpu": gpu[0] if gpu and run.platform.is_gpu else None,
        "rule": "=" * (RULE_WIDTH + sum(widths) - sum(WIDTHS)),
        "header": fixed_width(header, widths),
        "rows": [fixed_width(row, widths) for row in rows],
        "vendor": v,
        "triton": t,
        "label_width": max(len(v), len(t)) + 2,
        # A backend in the vendor and the Triton role has no other to be compared with.
        "comparisons": [] if "triton" not in shown else [
            comparison(run, r) for head_dim, results in groups if head_dim != run.main_head_dim for r in results],
    }
