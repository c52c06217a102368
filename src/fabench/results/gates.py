"""What a gate of `fabench compare` (--fail-on, --min-answered) needs before it can pass: evidence.
A gate over runs that share no ok cell has judged nothing, and nothing judged is no pass (the
same exit as too few cells answered); a first run alone, with nothing to compare it with yet,
passes. The comparison itself is fabench.results.compare's; `gate` decides what a gate asked for does with it."""

from __future__ import annotations

from fabench.analysis.policy import Code, Rule


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


# The gate's floors: never fewer than this share answered (no evidence is no pass), nor more asked
# than this (the acceptance's answered share).
GATE_FLOOR, GATE_CEILING = 0.5, 0.9


def gate(comparison: dict, rule: Rule, least: float | None = None) -> dict:
    """What a CI gate on this comparison decides: {regressions (confirmed for the comparison as a
    whole), least (the answered share asked), answered_ok}. A regression flag fails the gate where
    it holds for the comparison as a whole, its p within the rule's alpha over the cells judged
    (Bonferroni): a gate asks one question of many cells, and at the per-cell alpha unchanged
    software of 45 cells would fail one run in fourteen (a 1.2% blip in one cell). The answered
    share asked is `least` where given, else what the cells' noise lets unchanged software reach
    (answers' expected less two of its standard deviations) within [GATE_FLOOR, GATE_CEILING]."""
    found = comparison["answers"]
    cells = max(found["judged"], 1)
    confirmed = [f for f in comparison["flags"] if f["code"] == Code.REGRESSION
                 and (f.get("p") is None or f["p"] <= rule.alpha / cells)]
    if least is None:
        expected = (found["expected"] or 0.0) - 2 * (found["expected_sd"] or 0.0)
        least = min(GATE_CEILING, max(GATE_FLOOR, expected))
    share = found["share"]
    # Nothing judged is answered by fabench.results.gates.no_evidence (a first run alone passes).
    return {"regressions": confirmed, "least": least,
            "answered_ok": not found["judged"] or (share is not None and share >= least)}
