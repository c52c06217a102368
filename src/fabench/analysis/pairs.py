"""Two backends of one job, compared trial by trial: the data the comparison policy's paired test
(fabench.analysis.within_run.paired) reads.

A job interleaves its backends in every process: trial i of every backend, back to back, in an
order that turns from round to round (fabench.measure.cell.trial_order). Partners share that process's state (its clocks, its host's speed
at that minute, its memory layout), so the ratio of two partners, log(A_i / B_i), carries much
less of the process's noise than either figure does. What is left is what differs between
processes for this pair: the unit of the test is the process, never the trial (trials of one
process share its effect). Per process the mean of its paired log ratios; over processes their
mean (the run's estimate) and their variance (P - 1 degrees of freedom).

No distribution-free test can decide at the process unit with two processes: a permutation of
the signs of two process means reaches p = 1/2 at best (for two cells' medians, complete
separation is p = 1/3 each way). So the test is Student's t, valid where the process effects on a
pair's log ratio are normal, an assumption its words state beside the p. Two processes estimate a
pair's variance with one degree of freedom, so the run's other pairs lend it theirs, as limma's
moderated t does (Smyth 2004): the pair's variance s^2 (d = P - 1 degrees of freedom) is shrunk
toward a prior s0^2 worth d0 degrees of freedom,
    s~^2 = (d0 s0^2 + d s^2) / (d0 + d),   the t test at d0 + d degrees of freedom.
Noise depends on duration (fabench.analysis.noise pools cells by it), so the prior is local: s0^2
is the pooled variance of the POOL_PAIRS pairs nearest in duration of the run's other jobs (those
of the pair's own job share its processes, so its own data would count twice), each carried to the
pair's duration along the run's trend of log variance with log duration (where the run shows one
beyond chance). Its degrees of freedom count independent units, not pairs: a job's pairs share its
processes, so all the pairs of k of its backends are worth (k - 1)(P - 1), some of them that share.
How much the prior is worth, d0, adds two uncertainties about a pair's log variance: the prior's
own (trigamma of half its degrees of freedom, and the trend's error carried to the pair) and how far
the pairs' true variances differ beyond their durations', estimated by the method of moments of
Smyth's model from how far the pairs' log variances spread about their priors beyond chance; a run
whose pairs differ in noise at one duration (a cell a busy host disturbed) lends each pair less.
What the trials inside each process put into a process mean (Pair.within_mean_variance) stays a
floor under s~^2.
A pair whose cells carry a doubt on their figure (warm-up, other kernels: not mere spread) stays
out of the pool: its noise has a cause of its own.

The backends' order turns from round to round (fabench.measure.cell.trial_order), so an effect of
running second is noise between processes here, not a bias; each partner trial records its place
(`position`), and Pair.ran_first counts which of the two ran first.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from itertools import combinations

from fabench.analysis import legacy, stats
from fabench.analysis.result_types import backend_dicts, cell_stats, recorded_trials

# Instability the paired test absorbs as noise: the trials of a cell spread (a host that changes
# speed moves both partners), or a clock held down moved them. Any other doubt (warm-up never
# settled, kernels other than identified, event pairs that waited) is about the figure itself.
NOISE_CODES = frozenset({"spread", "clock"})
# The pairs a pair's prior is pooled over (the nearest in duration of other jobs), as
# fabench.analysis.noise pools POOL_CELLS cells; and the fewest pairs with a prior that estimate
# how much a prior is worth (below it none is lent: each pair stands on its own variance).
POOL_PAIRS = 16
MIN_PRIOR_PAIRS = 3
HETEROGENEITY_LEVEL = 0.95
TREND_LEVEL = 0.975


def steady(entry: dict) -> bool:
    """A cell stable and not held at a power cap: its noise is the run's common one. A capped
    cell's (stats.capped) is its own, as an unstable cell's spread is: it pools only `unsteady`."""
    stats = cell_stats(entry)
    return stats is None or (stats.stable and not stats.capped)


def doubted(entry: dict) -> bool:
    """Whether a cell's figure is doubted beyond spread (a doubt the paired test cannot absorb).
    Results analysed before the codes were kept say it by their reason's notes (legacy.notes)."""
    summary = cell_stats(entry)
    if summary is None or summary.stable:
        return False
    codes = summary.unstable_codes
    return bool(legacy.notes(entry)) if codes is None else not set(codes) <= NOISE_CODES


def _partners(a: dict, b: dict, metric: str):
    """(process, a's value, b's value, which ran first: "a", "b" or None where not recorded) for
    each trial index both cells timed in a process; trials are partners by (process, index)."""
    b_trials = {(t.get("process", 0), t.get("index")): t for t in recorded_trials(b) or ()}
    for trial in recorded_trials(a) or ():
        key = (trial.get("process", 0), trial.get("index"))
        partner = b_trials.get(key)
        x, y = trial.get(metric), (partner or {}).get(metric)
        if key[1] is None or not x or not y or x <= 0 or y <= 0:
            continue
        places = trial.get("position"), partner.get("position")
        yield key[0], x, y, None if None in places else "a" if places[0] < places[1] else "b"


@dataclass(frozen=True)
class Pair:
    """One pair's paired log ratios, summarised by process."""

    by_process: tuple[tuple[float, ...], ...]  # per process: its paired trials' log ratios (a over b)
    log_time: float = math.nan  # the pair's duration: the mean log of both partners' figures
    ran_first: tuple[int, int] | None = None  # partner trials a ran first in, b ran first in; None: not recorded
    cells: tuple[int, int] = field(default=(0, 0), compare=False)  # id() of a's and b's entries (their job)

    @classmethod
    def of(cls, a: dict, b: dict, metric: str) -> "Pair | None":
        found = list(_partners(a, b, metric))
        if not found:
            return None
        by_process: dict[int, list[float]] = {}
        for process, x, y, _ in found:
            by_process.setdefault(process, []).append(math.log(x / y))
        firsts = [first for *_, first in found]
        return cls(tuple(tuple(by_process[p]) for p in sorted(by_process)),
                   statistics.fmean(math.log(x * y) / 2 for _, x, y, _ in found),
                   None if None in firsts else (firsts.count("a"), firsts.count("b")), (id(a), id(b)))

    @property
    def process_means(self) -> tuple[float, ...]:
        return tuple(statistics.fmean(ratios) for ratios in self.by_process)

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(r for ratios in self.by_process for r in ratios)

    @property
    def within_mean_variance(self) -> float:
        """What the trials inside each process alone put into a process mean's variance: their pooled
        variance about their process's mean over the fewest trials of a process (0 without two
        trials in a process). A floor under the variance between process means, which two processes
        estimate by chance too low (a power cap that moves the partners apart trial by trial)."""
        df = sum(len(r) - 1 for r in self.by_process)
        if not df:
            return 0.0
        squares = sum((x - statistics.fmean(r)) ** 2 for r in self.by_process for x in r)
        return squares / df / min(len(r) for r in self.by_process)

    @property
    def processes(self) -> int:
        return len(self.process_means)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.process_means)

    @property
    def variance(self) -> float:
        """The variance of the process means (P - 1 degrees of freedom); 0 for one process."""
        return statistics.variance(self.process_means) if self.processes > 1 else 0.0


@dataclass(frozen=True)
class PooledPair:
    """One pair of the run's pool: its duration, its variance and degrees of freedom, its job, that
    job's degrees of freedom per contrast of its backends (one per process beyond the first) and its
    two cells (id() of their entries)."""

    log_time: float
    variance: float
    df: int
    job: int
    job_df: int
    cells: tuple[int, int]


@dataclass(frozen=True)
class PairNoise:
    """The run's prior for a pair's variance (log ratio of process means): the pooled pairs, how
    far their true variances differ beyond their durations' (`heterogeneity`: the variance of their
    logs, Smyth's trigamma(d0/2) of a prior known exactly), the run's independent degrees of freedom
    (`df`: one per process beyond a job's first) and the number of pairs pooled."""

    pool: tuple[PooledPair, ...]
    heterogeneity: float
    df: int
    pairs: int
    trend: tuple[float, float] = (0.0, 0.0)  # d log(variance) / d log(time) over the run's pairs, its variance
    jobs: dict = field(default_factory=dict, compare=False)  # id() of each cell entry of the run: its job

    @classmethod
    def of(cls, results: list[dict], metric: str, unsteady: bool = False) -> "PairNoise | None":
        """Over every pair of ok, undoubted, stable cells of every job with two processes or
        more; `unsteady` (for a pair with a cell whose trials spread beyond the run's limit, or a
        clock held down moved them) over the unstable ones too, whose noise is of its own (as
        fabench.analysis.noise pools a capped cell's). None where no job has two processes."""
        pool, jobs, df = [], {}, 0
        for job, result in enumerate(results):
            cells = [e for e in backend_dicts(result).values() if e.get("status") == "ok" and not doubted(e)
                     and (unsteady or steady(e))]
            jobs.update((id(e), job) for e in backend_dicts(result).values())
            pairs = [pair for a, b in combinations(cells, 2)
                     if (pair := Pair.of(a, b, metric)) is not None and pair.processes > 1]
            job_df = max((pair.processes - 1 for pair in pairs), default=0)
            pool += [PooledPair(pair.log_time, pair.variance, pair.processes - 1, job, job_df, pair.cells)
                     for pair in pairs]
            df += job_df
        if not pool:
            return None
        trend = _trend(pool, _units(pool))
        return cls(tuple(pool), _heterogeneity(tuple(pool), trend), df, len(pool), trend, jobs)

    def prior(self, log_time: float, job: int | None) -> tuple[float, float, float]:
        """(s0^2, its degrees of freedom, the log variance the trend's error adds) for a pair of
        this duration in `job`: the pooled variance of the POOL_PAIRS pairs nearest in duration of
        other jobs, each carried to this duration along the run's trend (at the longest pairs every
        neighbour is shorter, and a run's longest cells, held at a power cap, are its noisiest),
        with the independent units behind it (_units); the trend's error, carried over the distance
        from the neighbours' mean duration, adds to its log uncertainty. (nan, 0, 0) where no other
        job has a pair."""
        others = [p for p in self.pool if p.job != job]
        nearest = sorted(others, key=lambda p: abs(p.log_time - log_time))[:POOL_PAIRS]
        if not nearest:
            return math.nan, 0, 0.0
        df = _units(nearest)
        slope, error = self.trend
        moved = sum(p.variance * p.df * math.exp(slope * (log_time - p.log_time)) for p in nearest)
        carried = error * (log_time - statistics.fmean(p.log_time for p in nearest)) ** 2
        return moved / sum(p.df for p in nearest), df, carried

    def moderated(self, pair: Pair) -> tuple[float, int]:
        """The pair's moderated variance and its degrees of freedom, d0 + d (module docstring); its
        own variance and degrees of freedom where no prior is lent."""
        own, d = pair.variance, pair.processes - 1
        prior, prior_df, carried = self.prior(pair.log_time, self.jobs.get(pair.cells[0]))
        d0 = prior_weight(prior_df, self.heterogeneity + carried)
        if d0 < 1 or not prior > 0:
            return max(own, pair.within_mean_variance), d
        return max((d0 * prior + d * own) / (d0 + d), pair.within_mean_variance), d0 + d


def prior_weight(prior_df: float, heterogeneity: float) -> int:
    """Smyth's d0 of a prior estimated from prior_df degrees of freedom where the pairs' true log
    variances spread by `heterogeneity` about it: the two uncertainties about a pair's log variance
    add, trigamma(d0/2) = trigamma(prior_df/2) + heterogeneity; rounded down (a whole count)."""
    if prior_df < 1 or math.isinf(heterogeneity):
        return 0
    return math.floor(min(2 * stats.trigamma_inverse(stats.trigamma(prior_df / 2) + heterogeneity), prior_df))


def _least(pool) -> float:
    """A variance of exactly 0 (figures quantised alike in every process) has no logarithm:
    limma's floor, a hundred-thousandth of the typical variance, stands in."""
    positive = [p.variance for p in pool if p.variance > 0]
    return 1e-5 * statistics.median(positive) if positive else 1e-12


def _trend(pool: list[PooledPair], units: float) -> tuple[float, float]:
    """The slope of the pairs' log variance on their log duration (least squares) and its variance,
    the pairs counted as the `units` independent ones they hold (pairs of one job share its
    processes); (0, 0) where fewer than MIN_PRIOR_PAIRS pairs or units, or one duration."""
    if len(pool) < MIN_PRIOR_PAIRS or units < MIN_PRIOR_PAIRS:
        return 0.0, 0.0
    least = _least(pool)
    x = [p.log_time for p in pool]
    y = [math.log(max(p.variance, least)) for p in pool]
    mean_x, mean_y = statistics.fmean(x), statistics.fmean(y)
    spread = sum((a - mean_x) ** 2 for a in x)
    if not spread > 0:
        return 0.0, 0.0
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y)) / spread
    scatter = sum((b - mean_y - slope * (a - mean_x)) ** 2 for a, b in zip(x, y)) / max(len(pool) - 2, 1)
    error = scatter / spread * len(pool) / units
    # A slope within chance is none: carried far, its error would cost the prior more than it gives.
    return (slope, error) if slope * slope > stats.t_quantile(TREND_LEVEL, math.inf) ** 2 * error else (0.0, 0.0)


def _units(pool: list[PooledPair]) -> float:
    """The independent units the pairs hold: per job, its backends less one times its processes
    less one where every pair of those backends is among them (their mean is the backends' sample
    variance), that share of it where only some are (a mean over fewer pairs is worth less)."""
    cells: dict[int, set] = {}
    counts: dict[int, int] = {}
    for p in pool:
        cells.setdefault(p.job, set()).update(p.cells)
        counts[p.job] = counts.get(p.job, 0) + 1
    return sum(2 * counts[job] / len(cells[job]) * p.job_df for job, p in {p.job: p for p in pool}.items())


def _heterogeneity(pool: tuple[PooledPair, ...], trend: tuple[float, float]) -> float:
    """How far the pairs' true log variances differ beyond their durations' prior, by the method
    of moments of Smyth's model: their log variances spread about their priors (PairNoise.prior) by
    trigamma(d/2) from their own degrees of freedom, trigamma(prior_df/2) from the prior's, and the
    rest from how their true variances differ. From tens of pairs of one degree of freedom that
    spread is itself uncertain (log chi2_1 has a long tail: the sample variance of 20 of them has a
    standard error of about 2.7 where trigamma(1/2) is 4.9), so only the excess beyond chance
    counts: the spread's one-sided HETEROGENEITY_LEVEL lower bound, 0 where none is. inf (no prior
    is lent) where fewer than MIN_PRIOR_PAIRS pairs have a prior."""
    noise, least = PairNoise(pool, 0.0, 0, len(pool), trend), _least(pool)
    residuals, chance = [], []
    for p in pool:
        prior, prior_df, carried = noise.prior(p.log_time, p.job)
        if prior_df >= 1 and prior > 0:
            residuals.append(math.log(max(p.variance, least) / prior))
            chance.append(stats.trigamma(p.df / 2) + stats.trigamma(prior_df / 2) + carried)
    if len(residuals) < MIN_PRIOR_PAIRS:
        return math.inf
    center, spread = statistics.fmean(residuals), statistics.variance(residuals)
    fourth = statistics.fmean((r - center) ** 4 for r in residuals)
    error = math.sqrt(max(fourth - spread ** 2, 0.0) / len(residuals))
    return max(spread - stats.t_quantile(HETEROGENEITY_LEVEL, math.inf) * error - statistics.fmean(chance), 0.0)
