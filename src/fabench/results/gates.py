"""What a gate of `fabench compare` (--fail-on, --min-answered) needs before it can pass: evidence.
A gate over runs that share no ok cell has judged nothing, and nothing judged is no pass (the
same exit as too few cells answered); a first run alone, with nothing to compare it with yet,
passes. The comparison itself is fabench.results.compare's."""

from __future__ import annotations


def no_evidence(comparison: dict, fail_on: str | None, min_answered: float | None) -> str | None:
    """One line when a gate was asked for (`fail_on`, or `min_answered` above 0) over two entries
    or more and no ok cell was compared with an earlier run (answers.judged is 0), else None."""
    if not fail_on and not min_answered:
        return None
    entries = len(comparison.get("entries") or [])
    # One entry is a first run, with nothing to compare it with yet (said so): not a failed gate.
    if entries < 2 or (comparison.get("answers") or {}).get("judged"):
        return None
    return (f"no ok cell of the {entries} entries compared was measured in an earlier "
            "one as well (no shared shape, variant and backend that both ran), so the gate has no evidence and "
            "does not pass; compare runs of one experiment")
