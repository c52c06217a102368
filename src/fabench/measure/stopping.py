"""When one trial has measured enough: nvbench's "stdrel" stopping criterion on the profiled GPU path.

Every sample updates the relative noise of all the trial's samples so far (standard deviation over
mean) and, from nvbench's 5 samples on (fewer give no noise estimate), appends it to a trailing
history of that noise. Once at least `min_samples` samples and `min_trial_ms` of measured time are
in, the trial stops when either
  - the noise is at most `max_noise` (a quiet kernel: `converged`), or
  - the noise itself has settled: the history holds more than `history_min` values and, checked
    every `check_every` samples, the history's standard deviation taken about the current noise
    is under `settled_spread` of it (`noise_converged`): a kernel whose noise stays above
    `max_noise` (on an H100, kernels under 0.1 ms sit at 1.5-2.5%) stops as soon as more samples
    would no longer change what is known of it, instead of running to the timeout.
`max_trial_ms` of host time since the first batch is the last resort (`timeout`); the report
counts its use. Why a trial stopped is recorded with its samples.

nvbench's minimum time and timeout, split per call length. `min_trial_ms` counts the kernels' own
time, the timeout host time; a call of 0.02 ms costs the host about 0.33 ms a sample under the
profiler (H200), so 20 ms of kernel time needed more host time than the whole 250 ms budget and a
quiet kernel ran to the timeout (most of the 74 timeouts of an H200 default run). So the minimum
time also counts as met once `min_time_share` (a fifth) of the timeout has passed: the noise
clauses always have the rest of the budget, as nvbench's 0.5 s minimum leaves them most of its 15 s
timeout. The settled clause needs the early, wildly varying noise values to
leave the 512-value history: on seeded lognormal noise of 0.5-3% a sample it first held at a
median of about 500 samples, by SETTLE_SAMPLES in 90% of trials (tests/test_stopping.py). A trial
whose samples cost the host more than max_trial_ms / SETTLE_SAMPLES each is not assured of it; its
record says so (`settle_reachable`), so a timeout is counted with its reason.

Samples arrive in batches (a profiled stream of calls); the rule is evaluated after every sample,
as nvbench evaluates it after every launch, and the trial ends with the batch in which it first
held. The clock is injected so the rule is tested without real sleeps.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable

CONVERGED = "converged"  # the noise fell to max_noise (the name archived trials carry)
NOISE_CONVERGED = "noise_converged"  # the noise settled above max_noise
TIMEOUT = "timeout"
STOP_REASONS = (CONVERGED, NOISE_CONVERGED, TIMEOUT)
# nvbench's statistics::standard_deviation: no noise estimate from fewer samples.
NOISE_MIN_SAMPLES = 5
# Samples by which the settled clause has held in at least 90% of trials of lognormal noise of 0.5-3%
# a sample (seeded trials in tests/test_stopping.py; median about 500): the bound docs/timing.md states.
SETTLE_SAMPLES = 600


@dataclass(frozen=True)
class StopRule:
    max_noise: float  # relative standard deviation of the samples that is quiet enough
    min_samples: int
    min_trial_ms: float  # measured time (the samples' sum) before the noise may stop it
    max_trial_ms: float  # host time after which the trial stops, quiet or not
    # The share of max_trial_ms of host time after which the minimum time counts as met (see above);
    # the profiled batches are sized to it too (batch_size).
    min_time_share: float = 0.2
    # nvbench's convergence clause, with its constants: the noise history is a trailing window of
    # `history_window` values, judged once it holds more than `history_min`, every `check_every`
    # samples; settled when its spread about the current noise is under `settled_spread` of it.
    history_window: int = 512
    history_min: int = 64
    check_every: int = 16
    settled_spread: float = 0.05

    @classmethod
    def from_timing(cls, timing) -> "StopRule":
        """The rule from a job's timing (fabench.measure.spec.Timing carries its configured fields; the
        convergence clause's constants are nvbench's, kept as this rule's defaults)."""
        return cls(**{f.name: getattr(timing, f.name) for f in dataclasses.fields(cls) if hasattr(timing, f.name)})

    def describe(self) -> dict:
        return {**asdict(self), "noise": "standard deviation / mean of the trial's samples",
                "settled": "the trailing noise history's standard deviation about the current noise, over it"}


class Tracker:
    """The running noise of one trial's samples and its trailing history (Welford's update: each
    sample costs O(1), the settled check O(history_window) every check_every samples)."""

    def __init__(self, rule: StopRule):
        self.rule = rule
        self.count, self.total, self._mean, self._m2 = 0, 0.0, 0.0, 0.0
        self.history: deque[float] = deque(maxlen=rule.history_window)

    @property
    def noise(self) -> float:
        """Standard deviation over mean; infinite with fewer than two samples (nothing known yet)."""
        if self.count < 2 or self._mean <= 0:
            return math.inf
        return math.sqrt(self._m2 / (self.count - 1)) / self._mean

    def add(self, sample: float) -> str | None:
        """Take one sample; the stop reason if the rule now holds, else None."""
        self.count += 1
        self.total += sample
        delta = sample - self._mean
        self._mean += delta / self.count
        self._m2 += delta * (sample - self._mean)
        noise = self.noise
        if self.count >= NOISE_MIN_SAMPLES and math.isfinite(noise):
            self.history.append(noise)
        return self.finished()

    def finished(self, time_met: bool = False) -> str | None:
        """The stop reason if the rule holds now; `time_met`: the minimum time counts as met (the
        host has spent min_time_share of the timeout), whatever the kernel time."""
        rule = self.rule
        if self.count < rule.min_samples or not self.history or (self.total < rule.min_trial_ms and not time_met):
            return None
        current = self.history[-1]
        if current <= rule.max_noise:
            return CONVERGED
        if len(self.history) > rule.history_min and self.count % rule.check_every == 0 and self.settled(current):
            return NOISE_CONVERGED
        return None

    def settled(self, current: float) -> bool:
        if current <= 0:
            return True
        spread = math.sqrt(sum((n - current) ** 2 for n in self.history) / (len(self.history) - 1))
        return spread / current < self.rule.settled_spread


def collect(rule: StopRule, take: Callable[[], list[float]],
            clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], dict]:
    """Batches from `take` (each a list of samples in ms) until the rule stops; the samples and
    {stopped, samples, noise, elapsed_ms, settle_reachable}. At least one batch is always taken.

    The host clock is read per batch: the minimum time counts as met for every sample of a batch
    begun after min_time_share of the timeout had passed, and once it has passed at a batch's end
    the rule is asked again (the settled clause then without waiting for a 16th sample)."""
    began = clock()
    tracker = Tracker(rule)
    samples: list[float] = []
    time_met = False
    while True:
        batch = take()
        samples += batch
        stopped = None
        for sample in batch:
            reason = tracker.add(sample)  # every sample enters the noise, also after the rule first held
            if reason is None and time_met:
                reason = tracker.finished(time_met=True)
            stopped = stopped or reason
        elapsed = (clock() - began) * 1000.0
        if not time_met and elapsed >= rule.min_time_share * rule.max_trial_ms:
            time_met = True
            stopped = stopped or _finished_at_batch_end(tracker)
        if stopped is None and elapsed >= rule.max_trial_ms:
            stopped = TIMEOUT
        if stopped is None:
            continue
        noise = tracker.noise
        per_sample = elapsed / len(samples) if samples else 0.0
        return samples, {"stopped": stopped, "samples": len(samples),
                         "noise": round(noise, 6) if math.isfinite(noise) else None,
                         "elapsed_ms": round(elapsed, 3),
                         # Could the settled clause have held at this host cost per sample (SETTLE_SAMPLES)?
                         "settle_reachable": per_sample * SETTLE_SAMPLES <= rule.max_trial_ms}


def _finished_at_batch_end(tracker: Tracker) -> str | None:
    """The rule at a batch's end once the minimum time is met by the host clock: the settled
    clause is judged there even between its every-16th-sample checks (its history is the same)."""
    reason = tracker.finished(time_met=True)
    rule = tracker.rule
    if reason is None and len(tracker.history) > rule.history_min and tracker.settled(tracker.history[-1]):
        return NOISE_CONVERGED
    return reason


# Host time a profiled sample costs before any was measured: 0.33 ms on an H200 for short kernels
# (765 samples in 250 ms, the L2 cleared; the trace read back per call), about the kernel time above.
PROFILED_SAMPLE_HOST_MS = 0.35


def batch_size(rule: StopRule, calls: int, taken: list[float], host_ms_per_sample: float | None,
               host_ms: float = 0.0) -> int:
    """The next profiled stream's calls: `calls` (sized by the warm-up's event time) first; then,
    while the minimum samples or kernel time are not reached (kernel time is below the event time
    the first was sized by), just what is missing, plus one; once only the noise is left, `calls`.

    Never more than the host can take within the minimum time at its cost per sample
    (`host_ms_per_sample`: measured on this trial's batches, else on the backend's previous trial in
    the process, else the larger of PROFILED_SAMPLE_HOST_MS and the kernel time the first was sized
    by): until the minimum is met (`host_ms` spent so far is under min_time_share of the timeout),
    what is left of it, rounded up so that the batch reaches it; after, a whole min_time_share for
    the noise. A first batch of 20 ms of a 0.02 ms kernel cost the host 330 ms, past the 250 ms
    timeout, before the rule was asked at all. Sized by the fixed 0.35 ms, a short kernel's batch
    cost 0.5-1.4 ms a sample (aiter's Triton kernel and FlexAttention at (4,512,8,256) on an H200:
    100-230 ms of host time where the minimum is 50 ms); replayed through this rule, the recorded
    trials of 16 H200 runs spent 6-12% less host time in their kernel loops, the comparison's
    answers unchanged (tools/replay_batches.py, docs/timing.md)."""
    per_sample = sample_cost(rule, calls, host_ms_per_sample)
    minimum_ms = rule.min_time_share * rule.max_trial_ms
    left_ms = minimum_ms - host_ms
    fit_ms = left_ms if left_ms > 0 else minimum_ms
    return batch_within(rule, calls, taken, max(rule.min_samples, math.ceil(fit_ms / per_sample)))


def sample_cost(rule: StopRule, calls: int, measured_ms: float | None) -> float:
    """A profiled sample's host cost: as measured, else the larger of PROFILED_SAMPLE_HOST_MS and the
    kernel time the first batch of `calls` was sized by."""
    return measured_ms or max(PROFILED_SAMPLE_HOST_MS, rule.min_trial_ms / max(calls, 1))


def batch_within(rule: StopRule, calls: int, taken: list[float], fit: int) -> int:
    """The next batch's calls at most `fit` (batch_size's, or a replay's: tools/replay_batches.py)."""
    if not taken:
        return min(calls, fit)
    short_ms = rule.min_trial_ms - sum(taken)
    if len(taken) < rule.min_samples or short_ms > 0:
        mean = sum(taken) / len(taken)
        wanted = max(rule.min_samples - len(taken), math.ceil(max(short_ms, 0.0) / max(mean, 1e-6))) + 1
        return min(wanted, fit)
    return min(calls, fit)
