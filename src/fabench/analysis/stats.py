"""Statistics over samples: pure functions, no knowledge of results."""

from __future__ import annotations

import math
import random
import statistics


def _scipy():
    """SciPy's stats, imported on first use: a measuring process reads medians through this module
    and should not pay SciPy's import (0.5-0.8 s) for the quantiles it never asks for."""
    from scipy import stats as scipy_stats

    return scipy_stats


def _special():
    """SciPy's special functions, Student's t among them: what the intervals and the paired test
    need, in 0.14 s of import where scipy.stats took 1.7 s of the report's 7.5 s on a 2-core host."""
    from scipy import special

    return special


def median(values: list[float]) -> float:
    return statistics.median(values)


# The share of a trial's samples set aside at each end before their mean is taken (trial_figure).
TRIM = 0.10
TRIAL_FIGURE_TEXT = f"the mean of its calls with the shortest and longest {TRIM:.0%} set aside"


def trial_figure(samples: list[float]) -> float:
    """One trial's figure from its per-call samples: their mean with the TRIM share at each end set
    aside. Not their median: short kernels' per-call times are often bimodal (cuDNN at
    (4,1024,8,64) on an H200: modes 22.2 and 23.2 us, about half the calls in each, the median in
    the gap between them), and a median then jumps between the modes from trial to trial (22.56 to
    23.10 us, where the trials' means lay within 22.73-22.94), which the processes, two a cell,
    cannot average out. A mean moves with the modes' shares smoothly; the trimming keeps a rare
    long call (a kernel held up by another context) from moving it (what it changed in the
    verdicts: docs/archive.md). nvbench's figure is the plain mean."""
    ordered = sorted(samples)
    cut = int(len(ordered) * TRIM)
    kept = ordered[cut:len(ordered) - cut] if len(ordered) > 2 * cut else ordered
    return statistics.fmean(kept)


def spread(samples: list[float]) -> float:
    """max/min - 1: how far apart the samples lie (0 for one sample)."""
    low = min(samples)
    return math.inf if low <= 0 else max(samples) / low - 1.0


def relative_difference(a: float, b: float) -> float:
    return abs(a - b) / b if b else math.inf


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def describe(samples: list[float]) -> dict:
    """{median, p10, p90, mean, n}: the shape of a result's device_ms (kept since schema 1)."""
    ordered = sorted(samples)
    return {"median": statistics.median(ordered), "p10": percentile(ordered, 0.10),
            "p90": percentile(ordered, 0.90), "mean": statistics.fmean(ordered), "n": len(ordered)}


def t_quantile(probability: float, df: float) -> float:
    """Student's t quantile; the normal one for unlimited degrees of freedom."""
    if math.isinf(df):
        return statistics.NormalDist().inv_cdf(probability)
    return float(_special().stdtrit(df, probability))


def welch_df(parts: list[tuple[float, float]]) -> float:
    """The degrees of freedom of a sum of variance estimates [(variance, df)] (Welch-Satterthwaite):
    a part known from many cells (df = inf) adds variance but no uncertainty of its own, so a sum
    of a 1-df process part and such a part is not held to t(1)."""
    total = sum(v for v, _ in parts)
    spread = sum(v * v / df for v, df in parts if v > 0 and not math.isinf(df))
    return math.inf if spread == 0 else total * total / spread


def t_two_sided_p(t: float, df: float) -> float:
    """The two-sided p of Student's t statistic |t| with df degrees of freedom (0 for an infinite t)."""
    if math.isinf(t):
        return 0.0
    if math.isinf(df):
        return 2 * (1 - statistics.NormalDist().cdf(abs(t)))
    return float(2 * _special().stdtr(df, -abs(t)))


def two_sided(level: float) -> float:
    """The upper quantile's probability of a two-sided interval at `level`."""
    return 1.0 - (1.0 - level) / 2.0


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value (exact for small samples without ties)."""
    return float(_scipy().mannwhitneyu(a, b, alternative="two-sided").pvalue)


def binomial_tail(count: int, n: int, rate: float) -> float:
    """P(Bin(n, rate) >= count): how surprising `count` misses are at the nominal `rate`."""
    return float(_scipy().binom.sf(count - 1, n, rate))


def process_medians(values: list[float], processes: list[int]) -> list[float]:
    """The median of each process's values, in process order."""
    groups: dict[int, list[float]] = {}
    for value, process in zip(values, processes):
        groups.setdefault(process, []).append(value)
    return [statistics.median(groups[p]) for p in sorted(groups)]


def within_spread(values: list[float], processes: list[int], level: float = 0.95) -> float:
    """How far one process's values leave its median in doubt, apart from how far the processes
    lie from each other: the largest spread (high/low - 1) among the processes of the
    distribution-free `level` interval of their median (order_interval): max/min up to 8 values
    at 95%; from 9 on, one outlier on each side no longer counts (a trial that a busy host
    preempted)."""
    groups: dict[int, list[float]] = {}
    for value, process in zip(values, processes):
        groups.setdefault(process, []).append(value)
    return max(spread(list(order_interval(group, level))) for group in groups.values())


def order_interval(values: list[float], level: float) -> tuple[float, float]:
    """The distribution-free interval of the median from the values' order statistics: the
    narrowest [x_(k), x_(n+1-k)] that holds the median with at least `level` probability whatever
    the distribution; [min, max] when even that does not reach it (fewer than 6 values at 95%)."""
    ordered = sorted(values)
    n, k = len(ordered), 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * _binomial_cdf(k + 1, n) >= level:
        k += 1
    return ordered[k - 1], ordered[n - k]


def _binomial_cdf(k: int, n: int) -> float:
    """P(Bin(n, 1/2) < k): the chance that fewer than k of n values lie below the median."""
    return sum(math.comb(n, i) for i in range(k)) / 2**n


def log_variance(values: list[float]) -> float:
    """Sample variance of log(values): relative noise, comparable across durations."""
    logs = [math.log(v) for v in values]
    return statistics.variance(logs) if len(logs) > 1 else 0.0


def trigamma(x: float) -> float:
    """The variance of log(chi2_2x): trigamma(x), the derivative of digamma."""
    return float(_special().polygamma(1, x))


def trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (y > 0), by Newton's method from limma's start (Smyth 2004)."""
    if y > 1e7:
        return 1 / math.sqrt(y)
    if y < 1e-6:
        return 1 / y
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = trigamma(x)
        step = tri * (1 - tri / y) / float(_special().polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


def run_draws(run_ids: list[str], draws: int, seed: int) -> list[dict[str, int]]:
    """Seeded bootstrap draws of runs: each draw the runs resampled with replacement, as
    {run id: multiplicity}. The run is the unit resampled: it carries the state all of its cells share."""
    rng = random.Random(seed)
    found = []
    for _ in range(draws):
        drawn: dict[str, int] = {}
        for _ in run_ids:
            pick = rng.choice(run_ids)
            drawn[pick] = drawn.get(pick, 0) + 1
        found.append(drawn)
    return found


def wilson(hits: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share: what the count alone allows, were the cells independent."""
    if not n:
        return math.nan, math.nan
    share = hits / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
