"""Other projects' rules for a change, applied to our trials, so the docs can say how ours
compares (tools: fabench detector-check).

asv: a change needs the ratio beyond a factor (default 1.1) AND a Mann-Whitney U test of the
samples with p < 0.002. nvbench's robust compare: FAST/SLOW only when the [min, q3] intervals
of the samples do not overlap and the gap is at least 0.5%; SAME when the centres (medians) are
within 0.5%; otherwise AMBIGUOUS.
"""

from __future__ import annotations

from fabench.analysis import stats

ASV_FACTOR, ASV_P = 1.1, 0.002
NVBENCH_GAP = 0.005


def asv_changed(old: list[float], new: list[float], factor: float = ASV_FACTOR) -> bool:
    ratio = stats.median(new) / stats.median(old)
    if max(ratio, 1 / ratio) <= factor:
        return False
    return stats.mann_whitney_p(old, new) < ASV_P


def nvbench_verdict(old: list[float], new: list[float]) -> str:
    """SLOW, FAST, SAME or AMBIGUOUS."""
    def box(values):
        ordered = sorted(values)
        return ordered[0], stats.percentile(ordered, 0.75)

    (old_lo, old_hi), (new_lo, new_hi) = box(old), box(new)
    if new_lo > old_hi and new_lo / old_hi - 1 >= NVBENCH_GAP:
        return "SLOW"
    if old_lo > new_hi and old_lo / new_hi - 1 >= NVBENCH_GAP:
        return "FAST"
    if stats.relative_difference(stats.median(new), stats.median(old)) <= NVBENCH_GAP:
        return "SAME"
    return "AMBIGUOUS"
