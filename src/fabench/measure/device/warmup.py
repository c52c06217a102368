"""Each trial's warm-up, before its timed loops (fabench.measure.device.timing times them).

A GPU that idled runs at low clocks for its first kernels, and one that has been busy for a while
may be held down by its power cap, so each trial warms up for the configured count, then
for at least `min_warmup_ms` of back-to-back calls, in windows of device time, until two
consecutive windows agree in time and in SM clock.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable

from fabench.measure.device.accelerator import synchronize
from fabench.measure.device.timing import DeviceTimer
from fabench.measure.spec import Timing


def warm_up(fn: Callable[[], object], platform: str, timer: DeviceTimer | None, timing: Timing,
            calls: int, sm_clock: Callable[[], float | None] = lambda: None, full_windows: bool = False) -> dict:
    """`calls` plain calls (the rest of the published warm-up before a process's first trial, none
    before the others), then windows of calls (window_calls: by device time, or the host's where
    that is longer), growing from `warmup_window_ms` to four times that, until at least
    `min_warmup_ms` have passed and two consecutive windows agree within `warmup_tolerance` in
    median time and within `warmup_clock_tolerance` in the SM clock read
    after each (or `max_warmup_ms` has passed). The clock check catches a power cap setting in: on
    an H200 it lowered the clock from 1965 to 1710 MHz over ~300 ms of cuDNN at (4,4096,8,256),
    30-50 MHz per 40 ms window, while the windows' times still agreed within 2%.

    `full_windows` (a process's first trial of a backend, and every trial of one held at its power
    cap before): the windows are four times `warmup_window_ms` from the first sized one on, and a
    first 4-call window shorter than that is never one of the two that agree: a cap setting in moves the clock 30-50
    MHz per 40 ms window (1.5-2.5%), beyond `warmup_clock_tolerance`, so the warm-up goes on until
    the clock is steady, with no fixed minimum. A configured `min_warmup_ms` (the sweep's 20 ms)
    replaces the full windows: then at least that long, in growing windows (Cell.trial decides).

    Returns {iters, settled, estimate_ms, sm_clock_mhz}: estimate_ms is the per-iteration time the
    trial's iteration count is sized by (the last window's median; the wall time per call without
    a timer); sm_clock_mhz the clock after the last window (None where it cannot be read).
    """
    began = time.perf_counter()
    for _ in range(calls):
        fn()
        synchronize(platform)
    iters = calls
    estimate = (time.perf_counter() - began) * 1000.0 / iters if iters else None
    if timer is None or timing.max_warmup_ms <= 0:
        return {"iters": iters, "settled": True, "estimate_ms": estimate, "sm_clock_mhz": None}
    tolerance = timing.warmup_tolerance
    window_ms = timing.warmup_window_ms * (4 if full_windows else 1)
    previous, count = None, 4
    while True:
        current = (statistics.median(timer.samples(count)), sm_clock())
        iters += count
        elapsed = (time.perf_counter() - began) * 1000.0
        if (previous is not None and elapsed >= timing.min_warmup_ms
                and _agree(current[0], previous[0], tolerance)
                and _agree(current[1], previous[1], timing.warmup_clock_tolerance)):
            return {"iters": iters, "settled": True, "estimate_ms": current[0], "sm_clock_mhz": current[1]}
        if elapsed > timing.max_warmup_ms:
            return {"iters": iters, "settled": False, "estimate_ms": current[0], "sm_clock_mhz": current[1]}
        # With full windows, a first 4-call window shorter than a full one is no window to agree with.
        short_first = full_windows and iters - calls == 4 and 4 * current[0] < window_ms
        previous = None if short_first else current
        count = window_calls(window_ms, current[0], timer.host_ms_per_iter)
        window_ms = min(window_ms * 2, 4 * timing.warmup_window_ms)


def window_calls(window_ms: float, device_ms: float, host_ms: float) -> int:
    """The calls of a warm-up window of `window_ms`: by the device time of a call, or by the host's
    time to queue one where that is longer. A call the host is slower to queue than the GPU is to
    run idles the GPU between calls whatever the count, so its windows counted in device time only
    lasted 5-7x their length: on an H200 SDPA at (4,512,8,256), 22 us a call and ~0.15 ms of
    host time in the timed stream, warmed up for 3016 calls (0.57 s) where its windows agreed. A
    call the GPU takes longer to run (where a power cap sets in) is sized as before."""
    return max(4, math.ceil(window_ms / max(device_ms, host_ms, 1e-4)))


def trial_warmup_settings(timing: Timing, first: bool, capped: bool = False) -> Timing:
    """A process's first trial of a backend warms up for at least min_warmup_ms (0 by default: until
    steady in full windows, see warm_up); a later one only until two consecutive windows agree in
    time and SM clock: the GPU has been busy with the job's trials since (they are interleaved), and
    where the clock still moves the clock check goes on as long as it moves.

    Not for a kernel that drew the GPU to its power cap in an earlier trial (`capped`): after another
    backend's trial the GPU starts it uncapped, two short windows agree before the cap sets in, and
    its later trials read 5-6% faster than its first (cuDNN at (4,4096,8,256) on an H100: 0.465 ms at
    1980 MHz against 0.49 ms at 1740-1800 MHz, 4-9% spread within a process, the cell unstable).
    Every trial of such a kernel warms up as the first does, and is taken at the capped clock."""
    return timing if first or capped else dataclasses.replace(timing, min_warmup_ms=0)


def _agree(now: float | None, before: float | None, tolerance: float) -> bool:
    """Within the tolerance of each other; a value that cannot be read (None) does not object."""
    return now is None or before is None or abs(now - before) <= tolerance * before
