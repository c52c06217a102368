"""When one trial has measured enough: nvbench's stopping rule, per trial of a cell.

Samples are taken in batches until their relative noise (standard deviation over mean, as
nvbench's stdrel criterion) is at most `max_noise`, with at least `min_samples` samples and at
least `min_trial_ms` of measured time in them; or, whatever the noise, when `max_trial_ms` of
host time have passed since the first batch began (the timeout). A fixed count measures a 20 us
kernel as long as a 1 ms one and stops a noisy one as early as a quiet one; this stops each where
its own noise says it can. Why it stopped is recorded with the samples.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Callable

CONVERGED = "converged"
TIMEOUT = "timeout"


@dataclass(frozen=True)
class StopRule:
    max_noise: float  # relative standard deviation of the samples that is quiet enough
    min_samples: int
    min_trial_ms: float  # measured time (the samples' sum) before the noise may stop it
    max_trial_ms: float  # host time after which the trial stops, quiet or not

    @classmethod
    def from_timing(cls, timing) -> "StopRule":
        """The rule from a job's timing (fabench.measure.spec.Timing carries every field of it)."""
        return cls(**{f.name: getattr(timing, f.name) for f in dataclasses.fields(cls)})

    def describe(self) -> dict:
        return {"max_noise": self.max_noise, "min_samples": self.min_samples, "min_trial_ms": self.min_trial_ms,
                "max_trial_ms": self.max_trial_ms, "noise": "standard deviation / mean of the trial's samples"}


def relative_noise(samples: list[float]) -> float:
    """Standard deviation over mean; infinite with fewer than two samples (nothing known yet)."""
    if len(samples) < 2:
        return float("inf")
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean > 0 else float("inf")


def quiet(rule: StopRule, samples: list[float]) -> bool:
    return (len(samples) >= rule.min_samples and sum(samples) >= rule.min_trial_ms
            and relative_noise(samples) <= rule.max_noise)


def collect(rule: StopRule, take: Callable[[], list[float]],
            clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], dict]:
    """Batches from `take` (each a list of samples in ms) until the rule stops; the samples and
    {stopped, samples, noise, elapsed_ms}. At least one batch is always taken."""
    began = clock()
    samples: list[float] = []
    while True:
        samples += take()
        elapsed = (clock() - began) * 1000.0
        if quiet(rule, samples):
            stopped = CONVERGED
        elif elapsed >= rule.max_trial_ms:
            stopped = TIMEOUT
        else:
            continue
        noise = relative_noise(samples)
        return samples, {"stopped": stopped, "samples": len(samples),
                         "noise": round(noise, 6) if noise != float("inf") else None,
                         "elapsed_ms": round(elapsed, 3)}
