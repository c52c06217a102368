"""Results written before the analysis stage (schema 1 and 2) are read as they are, never
migrated: their files stay byte for byte what was archived (and what SHA256SUMS covers).

Schema 2 recorded every trial but kept some observations only inside derived fields: the notes
on a cell (warm-up that never settled, kernels that differed between processes) inside the
stability verdict's reason, and do_bench's values only as the cross-check's median. Those are
taken back from there. Schema 1 has no trials: its figures are kept, with no interval.
"""

from __future__ import annotations

SPREAD_REASON = "trials spread "


def notes(entry: dict) -> list[str]:
    """The recorded verdict's notes: its reasons without the spread reason the analysis adds."""
    reason = (entry.get("stats") or {}).get("unstable_reason") or ""
    return [part for part in reason.split("; ") if part and not part.startswith(SPREAD_REASON)]


def observations(entry: dict) -> dict:
    """What the measuring processes observed beyond the trials, for any schema."""
    recorded = entry.get("observations")
    if recorded is not None:
        return recorded
    return {"notes": notes(entry), "do_bench_reason": None, "recorded_cross_check": entry.get("cross_check")}
