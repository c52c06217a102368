"""Other projects' rules for a change, applied to our trials, so the docs can say how ours
compares (tools: fabench detector-check).

asv (asv._stats.is_different, at its default factor): a change needs the ratio of the medians
beyond a factor (1.1) AND a difference asv calls significant. Where the two sample counts let a
two-sided Mann-Whitney U test reach p < 0.002 at all (1 / C(m + n, min(m, n)) < 0.002, asv's own
gate), that test decides; else asv falls back to its 99% intervals of the median: different only
when they do not overlap. asv's interval is the distribution-free one from order statistics;
with too few samples for a 99% one (fewer than 8), asv widens the samples' range to the 99%
credible interval of a Laplace model's location, the scale integrated out (posterior density
proportional to (sum |y_i - beta|)^-n). Written here from that description, not copied.

nvbench's robust compare: FAST/SLOW only when the [min, q3] intervals of the samples do not
overlap and the gap is at least 0.5%; SAME when the centres (medians) are within 0.5%; otherwise
AMBIGUOUS.
"""

from __future__ import annotations

import math

from fabench.analysis import stats

ASV_FACTOR, ASV_P, ASV_LEVEL = 1.1, 0.002, 0.99
NVBENCH_GAP = 0.005


def asv_changed(old: list[float], new: list[float], factor: float = ASV_FACTOR) -> bool:
    ratio = stats.median(new) / stats.median(old)
    if max(ratio, 1 / ratio) <= factor:
        return False
    return asv_different(old, new)


def asv_different(old: list[float], new: list[float]) -> bool:
    """asv's significance: the rank test where it can reach p < 0.002, else non-overlapping 99% intervals."""
    if 1 / math.comb(len(old) + len(new), min(len(old), len(new))) < ASV_P:
        return stats.mann_whitney_p(old, new) < ASV_P
    (a_low, a_high), (b_low, b_high) = median_interval(old), median_interval(new)
    return a_high < b_low or b_high < a_low


def median_interval(samples: list[float], level: float = ASV_LEVEL) -> tuple[float, float]:
    """The median's interval at `level` as asv takes it: the widest-coverage-enough pair of order
    statistics [x_(k), x_(n+1-k)] (coverage 1 - 2 P(Bin(n, 1/2) < k)); with too few samples for
    any, the samples' range widened to the Laplace posterior's central interval."""
    ordered = sorted(samples)
    n = len(ordered)
    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * stats.binomial_tail(n - k + 1, n, 0.5) >= level:
            best = (ordered[k - 1], ordered[n - k])
    if best is not None:
        return best
    if n < 2:
        return -math.inf, math.inf
    tail = (1 - level) / 2
    posterior = LaplacePosterior(ordered)
    return min(posterior.quantile(tail), ordered[0]), max(posterior.quantile(1 - tail), ordered[-1])


class LaplacePosterior:
    """The location beta of samples y_1..y_n under Laplace noise of unknown scale (prior 1/scale):
    density proportional to S(beta)^-n, S(beta) = sum |y_i - beta|. S is linear between the sorted
    samples, so the mass of each piece has a closed form and so does the quantile within it."""

    def __init__(self, ordered: list[float]):
        self.y, n = ordered, len(ordered)
        self.n = n
        # S on each piece: S(beta) = intercept + slope * beta; pieces (-inf, y0], [y0, y1], ..., [y_last, inf).
        edges = [-math.inf, *ordered, math.inf]
        self.pieces = []
        for i in range(n + 1):
            slope = 2 * i - n  # i samples lie left of the piece, n - i right of it
            intercept = sum(ordered[i:]) - sum(ordered[:i])
            self.pieces.append((edges[i], edges[i + 1], intercept, slope))
        self.masses = [self._mass(*piece) for piece in self.pieces]
        self.total = sum(self.masses)

    def _antiderivative(self, beta: float, intercept: float, slope: float) -> float:
        """An antiderivative of (intercept + slope * beta)^-n in beta (slope != 0); 0 at +-inf."""
        if math.isinf(beta):
            return 0.0
        return (intercept + slope * beta) ** (1 - self.n) / (slope * (1 - self.n))

    def _mass(self, low: float, high: float, intercept: float, slope: float) -> float:
        if slope == 0:
            return (high - low) * intercept ** -self.n
        return self._antiderivative(high, intercept, slope) - self._antiderivative(low, intercept, slope)

    def quantile(self, p: float) -> float:
        """The beta below which a share p of the posterior lies."""
        want = p * self.total
        for (low, high, intercept, slope), mass in zip(self.pieces, self.masses):
            if want > mass:
                want -= mass
                continue
            if slope == 0:
                return low + want * intercept ** self.n
            # Solve F(beta) - F(low) = want on this piece, F the antiderivative above.
            value = want + self._antiderivative(low, intercept, slope)
            return ((value * slope * (1 - self.n)) ** (1 / (1 - self.n)) - intercept) / slope
        return self.y[-1]


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
