"""Timing methods: the published one (wall clock) and a device time that is the kernel's.

Device time. Per-iteration events measure the GPU waiting for the CPU whenever a call's kernels
are shorter than its host launch overhead (compiled FlexAttention at (4,512,8,256): 0.100 ms by
events behind nothing, 0.041 ms by do_bench). So the calls are queued in chunks behind a short
GPU sleep (Platform.sleep: torch.cuda._sleep), and every iteration is proven fed: the host had queued all of it
before the GPU could have reached it (see `_fed`). A chunk with an iteration the GPU may have
waited for is measured again with a longer sleep. The sleep is only as long as the host needs to
stay ahead: an idle GPU between chunks would run cooler than under sustained load, and a
power-capped kernel (cuDNN at (4,4096,8,256) on an H200: 0.466 ms at 1980 MHz with 20% idle,
0.51 ms at the 1710 MHz the 700 W cap holds it to when busy throughout) would then read faster than
it runs in use. Every iteration has its own pair of events; a trial's figure is the median of its
iterations. Optionally the L2 is cleared before every iteration (outside the events), as
triton.testing.do_bench does.

The device figure is not these events' time but the kernels' own time, read by CUPTI from the same
kind of stream run under the profiler (fabench.measure.device.kernels.stream_figures); the events give the
event pair around each call (do_bench's quantity, its peer) and the per-call period, which, with
the same period by CUPTI, is the second method (fabench.analysis.entry.period_check).

"queued" (the default) queues the eager call itself, so the figure is the time of exactly the
kernels the published method launches. "graph" captures the call once in a CUDA/HIP graph and
queues replays; on an H200 that changed what was timed (native fp32 +3% at seq 4096 against
do_bench, -4% at seq 512: cuBLAS under capture, no launch gaps), so it is an option only. When
capture fails, the eager call is queued instead and the fallback recorded.

Each trial's warm-up before these loops: fabench.measure.device.warmup.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager
from typing import Callable

import torch

from fabench.measure.device.accelerator import Event, Graph, here, synchronize
from fabench.measure.spec import Timing

L2_CLEAR_BYTES = 256 * 1024 * 1024  # as triton.testing.do_bench: larger than any current L2
MAX_QUEUED_OPS = 512  # stay well below the launch queue's depth: a full queue blocks the host
MAX_SLEEP_FACTOR = 64
SLEEP_FACTOR = 2.0  # the first chunk's; relaxing never goes below it
# A fed chunk whose GPU waited this share of its sleep for nothing halves the sleep factor.
SPARE_TO_RELAX = 0.75
MAX_RETRIES = 3  # a chunk the GPU caught up with is measured again, this often at most
# A profiled stream's first sleep, before any was measured, takes the host this many times as long
# per call as the plain stream: CUPTI's tracing adds host work to every launch. The first profiled
# stream then measures the real rate, which every later one of the backend starts from.
PROFILED_HOST_FACTOR = 2.0
# A stream's closing sleep (DeviceTimer.closing_sleep): long enough that its duration in the trace
# (1 us resolution) reads the clock to about 0.5%, short beside any stream.
CLOSING_SLEEP_MS = 0.2
DEVICE_TIME_METHODS = {
    "queued": ("eager calls queued in chunks behind a GPU sleep (torch.cuda._sleep), each chunk checked "
               "to be fully queued before the GPU reached it; events around every call"),
    "graph": ("CUDA/HIP graph of one call, replayed in chunks queued behind a GPU sleep, each chunk checked "
              "to be fully queued before the GPU reached it; events around every replay"),
}
EAGER_FALLBACK = "eager calls queued behind a GPU sleep (graph capture failed)"

_cycles_per_ms: float | None = None
_l2_buffer: torch.Tensor | None = None


def sleep_cycles_per_ms() -> float:
    """GPU clock cycles per ms of the platform's GPU sleep, measured once per process."""
    global _cycles_per_ms
    if _cycles_per_ms is None:
        cycles = 2_000_000
        start, end = here().event(), here().event()
        here().sleep(cycles)  # the first sleep may run at idle clocks: measure the second
        start.record()
        here().sleep(cycles)
        end.record()
        end.synchronize()
        _cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)
    return _cycles_per_ms


def l2_buffer() -> torch.Tensor:
    global _l2_buffer
    if _l2_buffer is None:
        _l2_buffer = torch.empty(L2_CLEAR_BYTES, dtype=torch.int8, device="cuda")
    return _l2_buffer


def capture_graph(fn: Callable[[], object]) -> Graph:
    """fn captured once; the warm-up calls on a side stream are what torch's graph docs require.
    A capture that fails leaves the stream cleared as far as torch can, then raises."""
    device = here()
    stream = device.stream()
    stream.wait_stream(device.current_stream())
    with device.on_stream(stream):
        for _ in range(2):
            fn()
    device.current_stream().wait_stream(stream)
    graph = device.graph()
    try:
        with device.capture(graph):
            fn()
    except Exception:
        _recover_from_capture()
        raise
    graph.replay()
    device.synchronize()
    return graph


class DeviceTimer:
    """Per-iteration device times of one backend's call, with no host time in them."""

    def __init__(self, fn: Callable[[], object], clear_l2: bool, kernels_per_call: int = 1,
                 method: str = "queued"):
        self.fallback_reason: str | None = None
        self.graph = None
        if method == "graph":
            try:
                self.graph = capture_graph(fn)
            except Exception as err:  # cuDNN, aiter, ... may refuse capture: time the eager call
                self.fallback_reason = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        self.kernels_per_call = kernels_per_call
        self.run = self.graph.replay if self.graph is not None else fn
        self.method = DEVICE_TIME_METHODS[method] if self.fallback_reason is None else EAGER_FALLBACK
        ops_per_iter = 3 + (1 if self.graph is not None else max(kernels_per_call, 1)) + (1 if clear_l2 else 0)
        self.chunk = max(1, MAX_QUEUED_OPS // 2 // ops_per_iter)  # two chunks in flight (run_chunks)
        self.last_end: Event | None = None  # the last timed call's end event
        self.cache = l2_buffer() if clear_l2 else None
        self.host_ms_per_iter = host_call_ms(self.run)  # refined by every chunk
        self.device_ms_per_iter = 0.0  # unknown until the first chunk: sleep as if launch-bound
        self.sleep_factor = SLEEP_FACTOR
        self._rates: dict[str, tuple[float, float]] = {}  # per stream kind: (host ms per call, sleep factor)
        self.busy_ms = 0.0  # device time of every timed chunk's calls, chunks measured again included
        self.idle_ms = 0.0  # device time before each chunk's first call: the sleep, and any wait for the host
        self.caught_up = 0  # chunks not proven fed even after MAX_RETRIES longer sleeps
        self._previous_end: float | None = None  # host-time lower bound of the GPU's end of the last chunk read
        self.sleep_cycles: list[int] = []  # the current stream's sleeps, in SM cycles, in queue order

    def samples(self, n: int) -> list[float]:
        return self.samples_and_periods(n)[0]

    @contextmanager
    def stream_kind(self, kind: str):
        """Size the sleep-ahead for the rate the host queues at in this kind of stream ("profiled":
        under CUPTI, slower per launch than a plain one). Each kind keeps its own measured host rate
        and sleep factor, so a profiled stream is not sized by the plain stream's faster host, nor the
        plain one slowed by the profiled one's (sizing the profiled streams by the plain rate left
        the GPU catching up with the host in most of them on an H100)."""
        plain = (self.host_ms_per_iter, self.sleep_factor)
        self.host_ms_per_iter, self.sleep_factor = self._rates.get(
            kind, (plain[0] * (PROFILED_HOST_FACTOR if kind == "profiled" else 1.0), plain[1]))
        try:
            yield self
        finally:
            self._rates[kind] = (self.host_ms_per_iter, self.sleep_factor)
            self.host_ms_per_iter, self.sleep_factor = plain

    def samples_and_periods(self, n: int) -> tuple[list[float], list[float]]:
        """n event pairs (each call's start to end event), and the periods between consecutive
        calls' start events within each chunk (the per-call time of the back-to-back stream). A
        chunk the GPU caught up with is measured again with a longer sleep, MAX_RETRIES times in a
        row at most; then it is kept, and counted in caught_up (the trial's verdict says so)."""
        out: list[float] = []
        periods: list[float] = []
        unfed_in_a_row = 0
        while len(out) < n:
            for times, between, fed in self.run_chunks(self.chunk_counts(n - len(out))):
                if not fed:
                    self.sleep_factor = min(self.sleep_factor * 2, MAX_SLEEP_FACTOR)
                    if unfed_in_a_row < MAX_RETRIES:
                        unfed_in_a_row += 1
                        continue
                    self.caught_up += 1
                unfed_in_a_row = 0
                out += times
                periods += between
        return out, periods

    def chunk_counts(self, n: int) -> list[int]:
        return [min(self.chunk, n - done) for done in range(0, n, self.chunk)]

    def run_chunks(self, counts: list[int]) -> list[tuple[list[float], list[float], bool]]:
        """Each chunk's (event pairs, periods, fed), chunk k+1 queued before chunk k's events are
        read: reading a chunk's events takes the host milliseconds (hundreds of driver calls), and
        the GPU would idle through them after every chunk (the busy test read 0.87-0.89 on H100s).
        Two chunks in flight stay below the launch queue's depth (self.chunk is sized so)."""
        results, pending = [], None
        self._previous_end = None  # no chunk of this stream yet (see _read)
        self.sleep_cycles = []  # this stream's sleeps only
        for count in counts:
            queued = self._queue(count)
            if pending is not None:
                results.append(self._read(pending))
            pending = queued
        if pending is not None:
            results.append(self._read(pending))
        return results

    def _sleep_ms(self, count: int) -> float:
        """Long enough for the host to stay ahead of the GPU through `count` iterations: one call's
        queueing time when the GPU takes longer per iteration than the host (the host gains on it),
        else the host's deficit over the chunk; times sleep_factor, which grows when it was short."""
        host, device = self.host_ms_per_iter, self.device_ms_per_iter
        needed = max(host, count * host - (count - 1) * device)
        return needed * self.sleep_factor + 0.05

    def sleep_ahead(self, count: int) -> None:
        """Queue the GPU sleep that lets the host queue `count` iterations before the GPU reaches them."""
        self._sleep(int(self._sleep_ms(count) * sleep_cycles_per_ms()))

    def closing_sleep(self) -> None:
        """A short GPU sleep after a stream's last chunk, its cycles recorded as every chunk's sleep
        is: the sleep right after a chunk runs at the clock the chunk's own load left, which the
        sleep before a stream's first chunk does not (the GPU idled before it while the host read
        the previous stream), so each chunk's clock is read from the sleep after it."""
        self._sleep(int(CLOSING_SLEEP_MS * sleep_cycles_per_ms()))

    def _sleep(self, cycles: int) -> None:
        self.sleep_cycles.append(cycles)
        here().sleep(cycles)

    def clear_cache(self) -> None:
        """Clear the L2 (when configured), as before every timed iteration."""
        if self.cache is not None:
            self.cache.zero_()

    def _queue(self, count: int) -> dict:
        """Queue one chunk: a marker event, the sleep, then per call the L2 clear (when configured)
        and the call between its two events; the host time by which each call was queued."""
        device = here()
        marker = device.event()
        starts = [device.event() for _ in range(count)]
        ends = [device.event() for _ in range(count)]
        began = time.perf_counter()
        marker.record()
        self.sleep_ahead(count)
        queued = []
        for start, end in zip(starts, ends):
            self.clear_cache()
            start.record()
            self.run()
            end.record()
            queued.append(time.perf_counter())
        self.host_ms_per_iter = (queued[-1] - began) * 1000.0 / count
        return {"marker": marker, "starts": starts, "ends": ends, "began": began,
                "queued_ms": [(q - began) * 1000.0 for q in queued]}

    def _read(self, chunk: dict) -> tuple[list[float], list[float], bool]:
        """A queued chunk's event pairs, its periods and whether it was proven fed (see _fed).

        The GPU ran the chunk's marker no earlier than the host recorded it (`began`), and, in a
        stream of chunks, no earlier than it ended the previous chunk, which (by the same argument,
        chunk after chunk) was no earlier than that chunk's own lower bound plus its marker-to-end
        time on the GPU. The later of the two is the marker's lower bound in host time: with chunks
        pipelined, the marker waits for the chunk before it, and counting from `began` alone would
        call a chunk unfed that the GPU reached long after the host had queued it (on an H100 that
        doubled the sleeps until the GPU idled 69% of a long kernel's timed window)."""
        marker, starts, ends, queued_ms = chunk["marker"], chunk["starts"], chunk["ends"], chunk["queued_ms"]
        ends[-1].synchronize()
        self.last_end = ends[-1]
        self.device_ms_per_iter = starts[0].elapsed_time(ends[-1]) / len(starts)
        from_marker = [marker.elapsed_time(start) for start in starts]
        reached_ms, self._previous_end = reached_after_began(chunk["began"], self._previous_end, from_marker,
                                                             marker.elapsed_time(ends[-1]))
        times = [start.elapsed_time(end) for start, end in zip(starts, ends)]
        periods = [a.elapsed_time(b) for a, b in zip(starts, starts[1:])]
        # Busy: from the first call's start to the last one's end, the gaps between calls included
        # (the GPU is not idle in them: it runs the events and launches the next kernel); idle: the
        # lead-in from the marker, the sleep and any wait for the host.
        self.busy_ms += starts[0].elapsed_time(ends[-1])
        self.idle_ms += from_marker[0]
        fed = _fed(queued_ms, reached_ms)
        if fed:
            self.sleep_factor = relaxed_sleep_factor(self.sleep_factor, queued_ms, reached_ms)
        return times, periods, fed


def reached_after_began(began: float, previous_end: float | None, from_marker: list[float],
                        marker_to_end_ms: float) -> tuple[list[float], float]:
    """Lower bounds, in ms after `began` (host time, s), of when the GPU reached each call of a chunk,
    and of when it ended the chunk (host time, s): its marker ran no earlier than `began` nor than
    the end of the chunk queued before it on the same stream (`previous_end`, None for a stream's
    first chunk); from_marker holds the GPU's times from the marker to each call's start event."""
    marker_at = began if previous_end is None else max(began, previous_end)
    lead_ms = (marker_at - began) * 1000.0
    return [lead_ms + ms for ms in from_marker], marker_at + marker_to_end_ms / 1000.0


def _fed(queued_ms: list[float], reached_ms: list[float]) -> bool:
    """Whether the GPU never waited for the host inside any iteration of a chunk.

    queued_ms[j]: host time, from just before the chunk's marker event was recorded, by which all
    of iteration j had been queued. reached_ms[j]: GPU time from the marker to iteration j's start
    event. The GPU cannot run the marker before the host records it, so it reached iteration j no
    earlier than reached_ms[j] after `began`; an iteration queued by then was fed. A proof, not an
    estimate: it needs no clock shared by host and GPU."""
    return all(queued <= reached for queued, reached in zip(queued_ms, reached_ms))


def relaxed_sleep_factor(factor: float, queued_ms: list[float], reached_ms: list[float]) -> float:
    """The sleep factor after a fed chunk: halved, down to the first chunk's, when the GPU waited
    most of its sleep for nothing.

    A chunk the GPU caught up with doubles the factor; before this it never came down again, so one
    slow chunk early in a process (a first call's host path, a hiccup of the host) left every later
    sleep of the backend longer than needed, the GPU idle in each. `spare`, the least time between
    an iteration being queued and the GPU reaching it, is what the sleep had too much; reached_ms[0]
    is how long the GPU waited before the first iteration. Never below the first chunk's factor: a
    sleep cut to the bone makes the next host hiccup a chunk measured again."""
    spare = min(reached - queued for queued, reached in zip(queued_ms, reached_ms))
    if reached_ms and spare > SPARE_TO_RELAX * reached_ms[0]:
        return max(SLEEP_FACTOR, factor / 2)
    return factor


def host_call_ms(fn: Callable[[], object], calls: int = 5) -> float:
    """Median time for one call to return on the host, the GPU idle before each: how long the
    host needs to queue a call (its launch overhead), whatever the kernels then take."""
    times = []
    for _ in range(calls):
        here().synchronize()
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000.0)
    here().synchronize()
    return statistics.median(times)


def _recover_from_capture() -> None:
    """A failed capture can leave the stream in capture mode's error state: clear what torch can."""
    try:
        here().synchronize()
    except Exception:
        pass
    here().empty_cache()


def wall_mean_ms(fn: Callable[[], object], platform: str, iters: int) -> float:
    """The published report's method, kept so our numbers compare with its numbers: wall clock
    around the loop, a device synchronize after every iteration, the mean per iteration."""
    synchronize(platform)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
        synchronize(platform)
    return (time.perf_counter() - start) / iters * 1000.0


def trial_iters(timing: Timing, estimate_ms: float | None) -> int:
    """The published method's loop: at least `iters` iterations (its published count) and at least
    `min_trial_ms` of (estimated) time."""
    if not estimate_ms or timing.min_trial_ms <= 0:
        return timing.iters
    return max(timing.iters, math.ceil(timing.min_trial_ms / estimate_ms))


def device_samples(timing: Timing, estimate_ms: float | None) -> int:
    """The device loop: at least `min_samples` per-iteration samples and at least `min_trial_ms` of
    (estimated) device time. Not the published count: each sample is one iteration's own time, and
    a long kernel's samples agree closely (native fp32 at (4,4096,8,256): 18 ms a call on an H200,
    where 100 samples per trial cost 5.8 s of a process's 38 s)."""
    if not estimate_ms:
        return max(timing.min_samples, timing.iters)
    return max(timing.min_samples, math.ceil(timing.min_trial_ms / estimate_ms))


DO_BENCH_SPREAD = 0.10  # do_bench's per-call spread where it can judge (10-40% only where host-bound)
DO_BENCH_MAX_REP_MS, DO_BENCH_MIN_REP_MS = 100.0, 5.0  # its own default at most: never more than by itself
L2_CLEAR_MS = 0.1  # about what do_bench's L2 clear adds to each call (as graph_time sizes by)


def do_bench_calls(tolerance: float) -> int:
    """The calls do_bench needs for its median's 95% half-width to be at most half the cross-check
    tolerance at a per-call spread of DO_BENCH_SPREAD (a median's standard error is about 1.2533
    sigma / sqrt(n)): 269 at the default 3%."""
    return math.ceil((1.96 * 1.2533 * DO_BENCH_SPREAD / (tolerance / 2)) ** 2)


def do_bench_rep_ms(estimate_ms: float | None, tolerance: float) -> float:
    """do_bench's repetition time for do_bench_calls calls of `estimate_ms` (plus its L2 clear),
    within [DO_BENCH_MIN_REP_MS, DO_BENCH_MAX_REP_MS]; its default 100 ms without an estimate."""
    wanted = do_bench_calls(tolerance) * (estimate_ms + L2_CLEAR_MS) if estimate_ms else DO_BENCH_MAX_REP_MS
    return min(DO_BENCH_MAX_REP_MS, max(DO_BENCH_MIN_REP_MS, wanted))


def do_bench_ms(fn: Callable[[], object], estimate_ms: float | None = None, tolerance: float = 0.03) -> float:
    """triton.testing.do_bench's median (L2 cleared before every call): an independent measurement
    to compare ours with. Its warm-up is its default 25 ms; its repetitions take the calls its
    judgement needs (do_bench_rep_ms; its default 100 ms at most): for a 0.02 ms call 32 ms
    instead of 100 (about 270 calls instead of about 800), for calls over ~0.3 ms its default."""
    import triton.testing

    rep = do_bench_rep_ms(estimate_ms, tolerance)
    return float(triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median"))
