"""Statistics over a backend's trials: median, a 95% CI, spread, stability.

Pure Python and torch-free: the repeat coordinator (fabench.measure.repeats) merges the trials of
several processes and summarizes them without importing torch.

The CI of the median is the hull of two intervals:
- over all trials, from order statistics: for n samples the interval [x(k), x(n-k+1)] covers the
  population median with probability 1 - 2 P(Bin(n, 1/2) <= k - 1), whatever the distribution.
  We take the narrowest such interval with coverage >= 95%. Below n = 6 no interval reaches 95%;
  then [min, max] is given and its real coverage is stated in `ci_method`.
- with trials from 2 or more processes, over the per-process medians, a Student-t interval of
  their mean. The trials of one process share its state (memory placement, compiled code, clocks)
  and are not independent of each other; the processes are. On an H200, with the order-statistic
  interval alone, 12 of 50 second-run medians fell outside the first run's interval (by 0.01-0.8%)
  although the two runs' medians differed by 0.12% (median over cells).
"""

from __future__ import annotations

import math
import statistics

CI_LEVEL = 0.95
CI_METHOD = "distribution-free CI of the median from order statistics (binomial, no distribution assumed)"
PROCESS_CI_METHOD = ("widened to cover a Student-t 95% CI of the mean of the per-process medians "
                     "(processes are the independent replicates)")
# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom; the normal 1.96 beyond 30.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
         26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n-k+1)) for n samples: 1 - 2 P(Bin(n, 1/2) <= k - 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1.0 - 2.0 * tail


def ci_rank(n: int, level: float = CI_LEVEL) -> int:
    """The largest k (1-based) whose interval [x(k), x(n-k+1)] still covers with >= level; 1 if none does."""
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(n, k + 1) >= level:
        k += 1
    return k


def median_ci(samples: list[float], level: float = CI_LEVEL) -> tuple[float, float]:
    ordered = sorted(samples)
    k = ci_rank(len(ordered), level)
    return ordered[k - 1], ordered[len(ordered) - k]


def process_ci(samples: list[float], processes: list[int]) -> tuple[float, float] | None:
    """Student-t 95% CI of the mean of the per-process medians; None with fewer than 2 processes."""
    groups: dict[int, list[float]] = {}
    for value, process in zip(samples, processes):
        groups.setdefault(process, []).append(value)
    if len(groups) < 2:
        return None
    medians = [statistics.median(values) for values in groups.values()]
    half = T_975.get(len(medians) - 1, 1.96) * statistics.stdev(medians) / math.sqrt(len(medians))
    centre = statistics.fmean(medians)
    return centre - half, centre + half


def ci_description(n: int, level: float = CI_LEVEL, processes: int = 1) -> str:
    """What the interval is for this n (and number of processes), with its exact coverage."""
    if n == 0:
        return CI_METHOD + "; no samples"
    k = ci_rank(n, level)
    cover = coverage(n, k)
    where = f"n={n}: [x({k}), x({n - k + 1})], coverage {cover:.1%}"
    if cover < level:
        where += f" (below {level:.0%}: too few trials for a {level:.0%} interval, this is [min, max])"
    if processes >= 2:
        where += f"; {PROCESS_CI_METHOD}, {processes} processes"
    return f"{CI_METHOD}; {where}"


def spread(samples: list[float]) -> float:
    """max/min - 1: how far apart the trials lie (0 for one trial)."""
    low = min(samples)
    return math.inf if low <= 0 else max(samples) / low - 1.0


def summary(samples: list[float], processes: list[int] | None = None) -> dict:
    """One metric's {median, ci95, spread, n} over trials (processes: each trial's process)."""
    lo, hi = median_ci(samples)
    between = process_ci(samples, processes) if processes else None
    if between:
        lo, hi = min(lo, between[0]), max(hi, between[1])
    return {"median": statistics.median(samples), "ci95": [max(lo, 0.0), hi], "spread": spread(samples),
            "n": len(samples)}


def percentile(ordered: list[float], q: float) -> float:
    # Linear interpolation between closest ranks, as numpy's default.
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def describe(samples: list[float]) -> dict:
    """{median, p10, p90, mean, n}: the shape of the result's device_ms (kept since schema 1)."""
    ordered = sorted(samples)
    return {"median": statistics.median(ordered), "p10": percentile(ordered, 0.10),
            "p90": percentile(ordered, 0.90), "mean": statistics.fmean(ordered), "n": len(ordered)}


def verdict(primary: dict, stable_spread: float, notes: list[str]) -> tuple[bool, str | None]:
    """Stable when the trials of the judged metric lie within `stable_spread` of each other and
    nothing else (warm-up that never settled, a GPU that caught up with the host, kernels that
    differ between processes) casts doubt on them. The reason names every problem found."""
    reasons = list(notes)
    if primary["spread"] > stable_spread:
        reasons.insert(0, f"trials spread {primary['spread']:.1%} (max/min - 1 over {primary['n']} trials) "
                          f"exceeds {stable_spread:.1%}")
    return (not reasons), ("; ".join(reasons) or None)


def trial_stats(trials: list[dict], stable_spread: float, notes: list[str] = ()) -> dict | None:
    """The backend entry's `stats` from its trials; None without trials.

    The verdict judges the device figure where there is one (it is the kernel's time), else the
    published-method wall figure (CPU).
    """
    if not trials:
        return None
    processes = [t.get("process", 0) for t in trials]
    wall = summary([t["wall_mean_ms"] for t in trials], processes)
    timed = [t for t in trials if t["device_ms"] is not None]
    device = summary([t["device_ms"] for t in timed], [t.get("process", 0) for t in timed]) if timed else None
    stable, reason = verdict(device or wall, stable_spread, list(notes))
    return {"wall_mean_ms": wall, "device_ms": device,
            "ci_method": ci_description(len(trials), processes=len(set(processes))),
            "stable": stable, "unstable_reason": reason}


def relative_difference(a: float, b: float) -> float:
    return abs(a - b) / b if b else math.inf
