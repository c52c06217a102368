"""Two backends of one job, compared trial by trial: the data the comparison policy's paired test
(fabench.analysis.policy.paired) reads.

A job interleaves its backends in every process: trial i of backend A, then trial i of backend B,
back to back (fabench.measure.cell). Both share that process's state (its clocks, its host's speed
at that minute, its memory layout), so the ratio of two partners, log(A_i / B_i), carries much
less of the process's noise than either figure does. What is left is what differs between
processes for this pair: the unit of the test is the process, never the trial (trials of one
process share its effect). Per process the mean of its paired log ratios; over processes their
mean (the run's estimate) and their variance (P - 1 degrees of freedom).

No distribution-free test can decide at the process unit with two processes: a permutation of
the signs of two process means reaches p = 1/2 at best (for two cells' medians, complete
separation is p = 1/3 each way). So the test is Student's t, valid where the process effects on a
pair's log ratio are normal with one variance across the run's pairs, an assumption its words
state beside the p. Two processes estimate that variance with one degree of freedom. The pairs of one run share their
noise sources, so the variance is also pooled over every pair of the run (PairNoise): its degrees
of freedom are counted by independent unit, one per process beyond the first of each job (pairs
of one job share its processes), so pooling the pairs of one job adds no false confidence. A
pair's own variance replaces the pooled one where larger (conservative, as noise.cell_sigma does).
A pair whose cells carry a doubt on their figure (warm-up, other kernels: not mere spread) stays
out of the pool: its noise has a cause of its own.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from itertools import combinations

from fabench.analysis import legacy

# Instability the paired test absorbs as noise: the trials of a cell spread (a host that changes
# speed moves both partners), or a clock held down moved them. Any other doubt (warm-up never
# settled, kernels other than identified, event pairs that waited) is about the figure itself.
NOISE_CODES = frozenset({"spread", "clock"})


def paired_log_ratios(a: dict, b: dict, metric: str) -> dict[int, list[float]]:
    """{process: [log(a_i / b_i) for each trial index i both cells timed in that process]}; only
    processes with at least one partner pair. Trials are partners by (process, index)."""
    found: dict[int, list[float]] = {}
    b_trials = {(t.get("process", 0), t.get("index")): t for t in b.get("trials") or ()}
    for trial in a.get("trials") or ():
        key = (trial.get("process", 0), trial.get("index"))
        partner = b_trials.get(key)
        x, y = trial.get(metric), (partner or {}).get(metric)
        if key[1] is None or not x or not y or x <= 0 or y <= 0:
            continue
        found.setdefault(key[0], []).append(math.log(x / y))
    return found


def doubted(entry: dict) -> bool:
    """Whether a cell's figure is doubted beyond spread (a doubt the paired test cannot absorb).
    Results analysed before the codes were kept say it by their reason's notes (legacy.notes)."""
    stats = entry.get("stats") or {}
    if stats.get("stable", True):
        return False
    codes = stats.get("unstable_codes")
    return bool(legacy.notes(entry)) if codes is None else not set(codes) <= NOISE_CODES


@dataclass(frozen=True)
class Pair:
    """One pair's paired log ratios, summarised by process."""

    by_process: tuple[tuple[float, ...], ...]  # per process: its paired trials' log ratios (a over b)

    @classmethod
    def of(cls, a: dict, b: dict, metric: str) -> "Pair | None":
        found = paired_log_ratios(a, b, metric)
        return cls(tuple(tuple(found[p]) for p in sorted(found))) if found else None

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
class PairNoise:
    """The run's pooled variance of a pair's process means (log ratio), with its degrees of freedom
    (one per process beyond a job's first) and the pairs it was pooled over."""

    variance: float
    df: int
    pairs: int

    @classmethod
    def of(cls, results: list[dict], metric: str, unsteady: bool = False) -> "PairNoise | None":
        """Pooled over every pair of ok, undoubted, stable cells of every job with two processes or
        more; `unsteady` (for a pair with a cell whose trials spread beyond the run's limit, or a
        clock held down moved them) over the unstable ones too, whose noise is of its own (as
        fabench.analysis.noise pools a capped cell's). None where no job has two processes."""
        weighted, weight, df, count = 0.0, 0, 0, 0
        for result in results:
            cells = [e for e in result["backends"].values() if e.get("status") == "ok" and not doubted(e)
                     and (unsteady or (e.get("stats") or {}).get("stable", True))]
            job_processes = 0
            for a, b in combinations(cells, 2):
                pair = Pair.of(a, b, metric)
                if pair is None or pair.processes < 2:
                    continue
                weighted += pair.variance * (pair.processes - 1)
                weight += pair.processes - 1
                count += 1
                job_processes = max(job_processes, pair.processes)
            df += max(job_processes - 1, 0)
        if not weight:
            return None
        return cls(weighted / weight, df, count)
