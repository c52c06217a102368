"""One backend in one job: prepared and checked once, then timed in trials that the job
interleaves with its other backends (trial 1 of every backend, then trial 2, ...), so a slow
drift of the GPU (clocks, temperature) spreads over all backends instead of biasing one.

Whatever a backend raises becomes its failed entry with the reason; it never stops the job.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time

import torch

from fabench.measure import metrics, observations, stopping, timeline
from fabench.measure.device import graph_time, kernels, timing, warmup
from fabench.measure.backends.registry import Backend, Prepared, Problem
from fabench.measure.backends.failures import classify_failure
from fabench.measure.device.gpu_state import GpuState, slowdown
from fabench.measure.device.accelerator import named, synchronize
from fabench.measure.spec import Measurement
from fabench.measure.record import backend_entry


# Kernels per call assumed by the device loop's chunking where no profile counted them (the
# profile failed): it sizes chunks to stay below the launch queue's depth, nothing else.
UNPROFILED_KERNELS_PER_CALL = 8


@dataclasses.dataclass(frozen=True)
class TrialRun:
    """What one trial measured (Cell._measure); Cell._trial_record makes its record of it."""
    first: bool  # the process's first trial of the backend
    warm: dict  # warmup.warm_up's
    iters: int  # the wall loop's calls
    stream: dict | None  # the device stream's figures (Cell._stream)
    checks: dict  # Cell._checks'
    wall: float | None  # the wall loop's mean, where it ran
    start: dict | None  # the GPU's state before the warm-up
    after_device: float | None  # the SM clock after the device stream
    end: dict | None  # the GPU's state after the checks: the one the device figures were taken in


class Cell:
    def __init__(self, backend: Backend, problem: Problem, reference: torch.Tensor, job: Measurement, process: int = 0):
        self.backend, self.problem, self.reference, self.job, self.process = backend, problem, reference, job, process
        self.entry = backend_entry(backend.label)
        self.notes: list[dict] = []  # coded observations (fabench.measure.observations)
        self.do_bench_reason: str | None = None
        self.prepared: Prepared | None = None
        self.timer: timing.DeviceTimer | None = None
        self.live = False
        self.device_fallback: str | None = None  # why the device time is not from graph replays
        self.launches_per_call: int | None = None  # kernels one call launches, where profiled
        self.first_call_ms: float | None = None  # sizes a CPU trial's loop before any trial ran
        self.profiled_host_ms: float | None = None  # a profiled sample's host cost in the last trial here
        self.local_memory_kept: str | None = None  # why its local memory could not be placed anew

    @property
    def gpu(self) -> bool:
        return self.job.platform.is_gpu

    # --- once per process -----------------------------------------------------------------

    def setup(self) -> bool:
        """Prepare, run once (compiling), check the numbers and, on a GPU, the kernels and the
        device timer. True when the backend is to be timed."""
        reason = self.backend.unavailable(self.problem.platform)
        if reason:
            self.entry.update(status="unavailable", reason=reason)
            return False
        name = self.backend.name
        try:
            with timeline.phase("prepare", name):
                self.prepared = self.backend.prepare(self.problem)
            self.entry["kernel_config"] = self.prepared.kernel_config
            self.entry["implementation"] = self.prepared.implementation
            with self.prepared.context():
                with timeline.phase("first call and check", name):
                    self._first_call()
                if self.gpu:
                    self._kernels_and_timer()
        except Exception as err:  # a backend's failure is a result, never the job's end
            self.fail(err)
            return False
        self.live = True
        return True

    def _first_call(self) -> None:
        """Warm-up 1: compiles what is compiled (timed as compile_s); its output is the one checked."""
        with kernels.InductorModules(enabled=self.backend.compiled) as generated:
            began = time.perf_counter()
            out = self.prepared.fn()
            synchronize(self.problem.platform)
            first_s = time.perf_counter() - began
        self.generated = generated.modules
        self.first_call_ms = first_s * 1000.0
        if self.backend.compiled:
            self.entry["compile_s"] = first_s
        if self.prepared.verify:
            self.prepared.verify()
        if self.prepared.layout == "bhsd":
            out = out.transpose(1, 2)
        correctness = metrics.compare(out, self.reference, self.job.tolerance)
        del out
        self.entry["correctness"] = correctness
        if not correctness["passed"]:  # still timed: the cell says how fast the wrong answer was
            tol = self.job.tolerance
            self.entry.update(status="failed", failure_kind="correctness",
                              reason=f"wrong numbers: max abs err {correctness['max_abs_err']:.3g} "
                                     f"(tolerance {tol.max_abs_err:g}), cosine {correctness['cosine']:.6f} "
                                     f"(at least {tol.min_cosine:g})"
                              if correctness["finite"] else "wrong numbers: output has inf or nan")

    def _kernels_and_timer(self) -> None:
        """Every process profiles: the device figure is the kernels' own time from the profiler's
        trace. Its first-use cost (4.7-6.9 s a process) is paid once per process (warm_profiler)."""
        with timeline.phase("profiler start-up", self.backend.name):
            kernels.warm_profiler()
        with timeline.phase("kernel identification", self.backend.name):
            launches = kernels.profile_call(self.prepared.fn)
            self.entry["kernels"] = kernels.describe(launches, self.generated)
            self.launches_per_call = len(launches) if launches is not None else None
        with timeline.phase("device timer set-up", self.backend.name):
            per_call = self.launches_per_call or UNPROFILED_KERNELS_PER_CALL
            self.timer = timing.DeviceTimer(self.prepared.fn, self.job.timing.clear_l2,
                                            kernels_per_call=per_call, method=self.job.timing.device_method)
        self.device_fallback = self.timer.fallback_reason

    # --- once per trial -------------------------------------------------------------------

    def trial(self, index: int, gpu_state: GpuState, position: int | None = None) -> None:
        """One trial: the warm-up, one fed stream of calls under the profiler until the stopping rule
        says stop (the device figure, the event pair around each call and the per-call period by both
        clocks, all from that one stream), in a process's last trial the independent checks, then the
        published wall-clock loop (it idles the GPU at every synchronize, so it runs last). `position`:
        its place in the round of the job's backends (0 ran first; trial_order), recorded where given."""
        try:
            with self.prepared.context():
                run = self._measure(index, gpu_state)
        except Exception as err:
            self.fail(err, f"trial {index} of process {self.process}: ")
            return
        if not run.warm["settled"]:
            self.notes.append(observations.warmup_unsettled(self.process, index, self.job.timing.max_warmup_ms))
        self.entry["trials"].append(self._trial_record(run, index, position))

    def _measure(self, index: int, gpu_state: GpuState) -> TrialRun:
        """The trial's steps, in the order they run."""
        settings = self.job.timing
        if self.gpu and settings.local_memory == "per_trial" and self.local_memory_kept is None:
            # Where the kernels' local memory lies is fixed per process and moved a spilling kernel's
            # time as much as its processes differ: each trial is timed at a placement of its own.
            with self._phase("local memory placed anew", index):
                self.local_memory_kept = named(self.job.platform).place_local_memory_anew()
        start = gpu_state.read()
        first = not self.entry["trials"]
        warm = self._warm_up(index, first, gpu_state)
        iters = timing.trial_iters(settings, warm["estimate_ms"] or self._host_estimate_ms())
        samples = timing.device_samples(settings, warm["estimate_ms"])
        with self._phase("kernel loop", index):
            stream = self._stream(samples, index)
        # One query, so the checks follow without a pause: under a power cap two methods
        # are comparable only when they ran at one clock (fabench.analysis.entry.power_capped).
        after_device = gpu_state.sm_clock()
        checks = self._checks(index, stream)
        end = gpu_state.read()
        # The wall loop (the published figure, not the judged one): on a GPU in a process's last trial
        # only, as per trial it cost native fp32 at (4,4096,8,256) 1.7 s (100 calls of 17 ms) in each
        # of 6 trials of the cell; without a device stream (a CPU) it is the trial's figure, every trial.
        wall = None
        if index == settings.trials - 1 or not stream:
            with self._phase("wall loop", index):
                wall = timing.wall_mean_ms(self.prepared.fn, self.problem.platform, iters)
        return TrialRun(first, warm, iters, stream, checks, wall, start, after_device, end)

    def _warm_up(self, index: int, first: bool, gpu_state: GpuState) -> dict:
        """The published warm-up count once per process, its first call being the checked one; a
        backend held at its power cap in an earlier trial warms up as in its first."""
        settings = self.job.timing
        capped = any(t.get("clock_slowdown") for t in self.entry["trials"])
        with self._phase("warm-up", index):
            return warmup.warm_up(self.prepared.fn, self.problem.platform, self.timer,
                                  warmup.trial_warmup_settings(settings, first, capped),
                                  max(settings.warmup - 1, 0) if first else 0, gpu_state.sm_clock,
                                  full_windows=(first or capped) and not settings.min_warmup_ms)

    def _checks(self, index: int, stream: dict | None) -> dict:
        """The independent checks, in a process's last trial on a GPU: each judges the cell's figure,
        and per trial they would cost more than the trial. do_bench in the first process alone: its
        calls are sized for the judgement's power in one process (timing.do_bench_calls), and the
        agreement asks its median only. The kernels' own time by graphs in every process: their
        tolerance holds the spread of their per-process medians, and the processes stay alike. Graphs in
        the last process alone saved an H200 default run 3.6 s but made the rounds unlike: on one card the
        round with graphs read FlexAttention at (4,1024,8,256) 3.4% slower than the round without (Triton
        2.1%), in every run, and same-card pairs answered 57% of cells against 98% (the acceptance lease
        of 2026-11-28, examples/h200-x2-house-2026-11-28). On a CPU, none."""
        if not self.gpu:
            return {}
        checks = {"do_bench_ms": None, "host_call_ms": None}
        if index != self.job.timing.trials - 1:
            return checks
        if self.process == 0:
            with self._phase("do_bench", index):
                checks = self._cross_check_trial(_kernel_median(stream))
        with self._phase("kernel-time check", index):
            checks["kernel_time_graph"] = self._graph_check(stream)
        return checks

    def _trial_record(self, run: TrialRun, index: int, position: int | None) -> dict:
        """The trial's record, every field of it assembled here."""
        return {
            "process": self.process, "index": index, **({} if position is None else {"position": position}),
            "iters": run.iters if run.wall is not None else None, "wall_mean_ms": run.wall,
            # The trial's figure is the analysis stage's (fabench.analysis.stats.trial_figure); the samples are the record.
            "device_ms": None, "warmup_iters": run.warm["iters"] + (1 if run.first else 0),
            **run.checks, **(run.stream or {}),
            "gpu_state": {"start": run.start, "device_loop_sm_clock_mhz": run.after_device, "end": run.end}
            if self.gpu and (run.start or run.end) else None,
            # Not a doubt about the figure: a kernel that draws the GPU to its power cap runs at
            # the capped clock whenever it is used for long; the record says so in words.
            "clock_slowdown": slowdown(run.end),
        }

    def _phase(self, name: str, trial: int):
        return timeline.phase(name, self.backend.name, trial)

    def _host_estimate_ms(self) -> float | None:
        """Without a device timer (a CPU), a trial's loop is sized by the last trial's wall mean,
        the first trial's by the checked first call (compiled backends' first calls compile, so
        theirs is too long: it only shortens that loop), as pytest-benchmark calibrates its rounds
        to a minimum time; no extra call is made for it (one native call at seq 4096 is 13-40 s on
        2 cores)."""
        if self.entry["trials"]:
            return self.entry["trials"][-1]["wall_mean_ms"]
        return self.first_call_ms

    def _stream(self, calls: int, index: int) -> dict | None:
        """The trial's timed stream: the kernels' own time (CUPTI) where the kernels were identified,
        else (the profile failed) the event pairs of a plain stream; None on a CPU."""
        if self.timer is None:
            return None
        if self.launches_per_call:
            try:
                return self._profiled_stream(calls)
            except UnreadableTrace as err:
                self.notes.append(observations.no_kernel_time(self.process, index, str(err)))
        samples, periods = self.timer.samples_and_periods(calls)
        return {"device_samples_ms": _rounded(samples), "period_events_ms": _rounded(periods)}

    def _profiled_stream(self, calls: int) -> dict:
        """The device figure's samples: each call's kernels' own time (summed CUPTI durations), from
        streams of calls run under the profiler, in batches until the stopping rule
        (fabench.measure.stopping) says stop. From the same streams: the event pair around each call,
        the per-call period by events and by CUPTI, each kernel's share, why the trial stopped, and
        the SM clock each chunk left (sleep_clock_mhz, chunk_calls: the analysis's cycles figure).

        Every chunk's kernel durations are kept: a kernel the GPU reached before the host had queued
        it waited to start, which is not in its own duration. The event pairs and the periods are
        kept from the chunks proven fed only (a wait for the host lengthens those); the chunks not
        proven fed are counted (unfed_chunks) and make the next stream's sleep longer. A stream is
        never taken again for them: that cost a second per trial on an H100 and changed no figure."""
        rule = stopping.StopRule.from_timing(self.job.timing)
        record = {"device_samples_ms": [], "period_profiled_events_ms": [], "period_cupti_ms": []}
        clocks: dict[str, list] = {"sleep_clock_mhz": [], "chunk_calls": []}
        by_kernel: dict[str, float] = {}
        counters = {"chunks": 0, "unfed_chunks": 0}
        taken: list[float] = []

        host = {"ms": 0.0}  # host time of the batches so far: their cost per sample sizes the next

        def batch() -> list[float]:
            began = time.perf_counter()
            per_sample = host["ms"] / len(taken) if taken else self.profiled_host_ms
            wanted = stopping.batch_size(rule, calls, taken, per_sample, host["ms"])
            counts = self.timer.chunk_counts(wanted)
            trace, chunks, sleeps = kernels.profiled_chunks(self.timer, counts)
            figures, why_not = kernels.stream_figures(trace, counts, self.launches_per_call,
                                                      self.timer.cache is not None, sleeps,
                                                      named(self.job.platform).sleep_counts_sm_cycles)
            if figures is None:
                raise UnreadableTrace(why_not)
            period_at = 0
            for count, (pairs, periods, fed) in zip(counts, chunks):
                counters["chunks"] += 1
                if fed:
                    record["device_samples_ms"] += pairs
                    record["period_profiled_events_ms"] += periods
                    record["period_cupti_ms"] += figures["period_ms"][period_at:period_at + count - 1]
                else:
                    counters["unfed_chunks"] += 1
                period_at += count - 1
            taken.extend(figures["kernel_ms"])
            if "sleep_clock_mhz" in figures and clocks["sleep_clock_mhz"] is not None:
                clocks["sleep_clock_mhz"] += figures["sleep_clock_mhz"]
                clocks["chunk_calls"] += counts
            else:  # one batch without its clocks: the trial's samples cannot all be given theirs
                clocks["sleep_clock_mhz"] = None
            for name, us in figures["by_kernel"].items():
                by_kernel[name] = by_kernel.get(name, 0.0) + us
            host["ms"] += (time.perf_counter() - began) * 1000.0
            return figures["kernel_ms"]

        samples, stop = stopping.collect(rule, batch)
        if taken:
            self.profiled_host_ms = host["ms"] / len(taken)
        return {"kernel_samples_ms": _rounded(samples), **{k: _rounded(v) for k, v in record.items()},
                **(clocks if clocks["sleep_clock_mhz"] and sum(clocks["chunk_calls"]) == len(samples) else {}),
                **counters, "kernel_shares": kernels.kernel_shares(by_kernel, len(samples)), "stop": stop}

    def _graph_check(self, stream: dict | None) -> dict:
        """The kernels' own time by CUDA/HIP graphs (graph_time.graph_kernel_time): the record the
        analysis judges the CUPTI figure by (fabench.analysis.kernel_check), or why it was not taken.
        One replay of the captured graph is profiled for the names of the kernels the captured call
        ran: under capture a library may choose other kernels than the eager call's."""
        kernel_ms = (stream or {}).get("kernel_samples_ms")
        if not kernel_ms:
            return {"error": "no kernel-time samples in this trial to size the graphs by"}
        per_call = self.launches_per_call
        block = per_call + (1 if self.timer.cache is not None else 0)

        def call_kernels(replay) -> list[str]:
            work = [launch["name"] for launch in kernels.profile_call(replay)]
            return work[block - per_call: block]  # the first call's own kernels, its clear left out

        try:
            calls = graph_time.graph_calls(statistics.median(kernel_ms))
            out = graph_time.graph_kernel_time(self.prepared.fn, self.timer.cache, calls, call_kernels)
        except Exception as err:  # a call that cannot be captured: the check cannot judge, the cell stands
            return {"error": f"graph capture failed: {type(err).__name__}: {' '.join(str(err).split())[:200]}"}
        return {**out, "kernels_per_call": per_call}

    def _cross_check_trial(self, estimate_ms: float | None = None) -> dict:
        """How long a call takes on the host, then triton.testing.do_bench on the eager call right after
        the trial (so both see the GPU in the same state), unless the host needs at least the kernels'
        time (`estimate_ms`) to queue a call: do_bench's per-call events would then time the host, and
        its figure could not judge ours (15 of an H200 default run's 40 cells, ~1.4 s of its round 0)."""
        none = {"do_bench_ms": None, "host_call_ms": None} if self.gpu else {}
        if self.timer is None or not self.job.timing.do_bench or self.do_bench_reason:
            return none
        try:
            import triton.testing  # noqa: F401
        except ImportError as err:
            self.do_bench_reason = f"Triton is not installed ({err})"
            return none
        try:
            host = timing.host_call_ms(self.prepared.fn)
            if estimate_ms is not None and host >= estimate_ms:
                return {"do_bench_ms": None, "host_call_ms": host}
            return {"do_bench_ms": timing.do_bench_ms(self.prepared.fn, estimate_ms,
                                                      self.job.timing.cross_check_tolerance), "host_call_ms": host}
        except Exception as err:
            self.do_bench_reason = f"do_bench failed: {type(err).__name__}: {' '.join(str(err).split())[:200]}"
            return none

    def finish(self) -> dict:
        """The raw entry: trials and observations; fabench.analysis derives every figure from it."""
        reason = self.do_bench_reason or (None if self.job.timing.do_bench else "do_bench disabled in config")
        self.entry["observations"] = {"notes": list(self.notes), "do_bench_reason": reason if self.gpu else None}
        return self.entry

    def fail(self, err: BaseException, where: str = "") -> None:
        kind, why = classify_failure(err)
        self.entry.update(status="failed", failure_kind=kind, reason=where + why)
        self.release()

    def release(self, collect: bool = True) -> None:
        """Drop the prepared call and its timer; `collect` False leaves the (slow: 0.1-0.6 s) garbage
        collection to a caller that releases many cells at once."""
        self.live = False
        self.prepared = self.timer = None
        if collect:
            gc.collect()
            named(self.job.platform).empty_cache()


def trial_order(names: list[str], process: int, index: int, trials: int) -> list[str]:
    """The backends' order in round `index` of process `process`: a rotation of the configured
    order, run forwards in one round and backwards in the next, the next rotation every two rounds,
    the rounds counted on across the job's processes (round `index` of process p is the job's round
    p * trials + index). In the two rounds of a rotation any two backends run once in each order, so
    an effect of running second (the state the previous kernel left: clocks, heat, allocator) falls
    on each in turn: noise between processes, which the paired test counts (fabench.analysis.pairs),
    not a bias that pairing cannot remove, as a fixed order left it."""
    step = process * trials + index
    turn = (step // 2) % len(names)
    rotated = names[turn:] + names[:turn]
    return rotated[::-1] if step % 2 else rotated


def _kernel_median(stream: dict | None) -> float | None:
    """The trial's kernel-time median (sizes do_bench's repetitions); None without samples."""
    samples = (stream or {}).get("kernel_samples_ms") or (stream or {}).get("device_samples_ms")
    return statistics.median(samples) if samples else None


def _rounded(values: list[float]) -> list[float]:
    return [round(value, 6) for value in values]


class UnreadableTrace(Exception):
    """A profiler trace whose kernels cannot be told apart per call (the message says why)."""
