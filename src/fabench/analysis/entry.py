"""One backend of one job: its figures, stability and independent cross-checks, derived from
the trials and observations its processes recorded.

The run-level intervals (a CI of each median and a prediction interval for another run) need
the noise of many cells and come from fabench.analysis.noise.
"""

from __future__ import annotations

from fabench.analysis import legacy, stats
from fabench.analysis.figures import clocked_samples, judged_metric, tflops, trial_values
from fabench.analysis.kernel_check import kernel_time_check
from fabench.analysis.result_types import backend_dicts, method_of, metric_median, recorded_trials, set_stats
from fabench.analysis.verdict_text import observation_text
from fabench.config import schema_default
from fabench.measure.observations import Kind
from fabench.measure.record import EVENT_RESOLUTION_MS
from fabench.platforms import PlatformName

# What a result that does not record them was measured with: the config's defaults (the schema's).
DEFAULT_STABLE_SPREAD = schema_default("timing", "stable_spread")
DEFAULT_TOLERANCE = schema_default("timing", "cross_check_tolerance")


def metric_summary(values: list[float], processes: list[int]) -> dict:
    """{median, spread, within_spread, n, process_medians} of one metric over the trials; intervals
    come later. spread: over every trial; within_spread: the largest over one process's trials
    (stats.within_spread: from 9 trials a process's outermost two no longer count)."""
    return {"median": stats.median(values), "ci95": None, "pi95": None, "spread": stats.spread(values),
            "within_spread": stats.within_spread(values, processes),
            "n": len(values), "process_medians": stats.process_medians(values, processes)}


# Why a cell is unstable (stats["unstable_codes"], beside the reason in words): a process's trials
# of the figure disagree (and a clock held down moved with them), a warm-up never settled, the kernels timed were not the ones identified
# (or differed between processes), the event pairs that were the figure waited for the host, or a
# note of an older result this code cannot classify.
SPREAD, CLOCK, WARMUP, KERNELS, UNFED_PAIRS, NOTE = "spread", "clock", "warm-up", "kernels", "unfed pairs", "note"


def doubt_code(item: dict) -> str:
    """The code of an observation that doubts the figure (see sort_notes for those that do not)."""
    kind = item["kind"]
    if kind == Kind.WARMUP_UNSETTLED:
        return WARMUP
    if kind in (Kind.KERNELS_DIFFER, Kind.NO_KERNEL_TIME):
        return KERNELS
    return UNFED_PAIRS if legacy.stream_doubted(item.get("text", "")) == "loop" else NOTE


def sort_notes(notes: list[dict], figure_is_pairs: bool) -> tuple[list[dict], dict[str, list[str]]]:
    """(the observations that doubt the figure, {stream: the words of the notes that doubt only that
    stream}). A GPU that caught up with the host doubts the periods and event pairs of that stream,
    not a kernel's own duration: only where the figure is the event pairs of the device loop
    (results from before the kernels' own time was the figure) is the loop's note a doubt on the
    figure. Notes of streams measured again no more often than one batch's retries
    (legacy.remeasured_note_holds) doubt nothing. Those notes are older results' (kind `note`)."""
    figure, streams = [], {}
    for item in notes:
        text = item.get("text", "") if item["kind"] == Kind.NOTE else ""
        if not legacy.remeasured_note_holds(text):
            continue
        stream = legacy.stream_doubted(text)
        if stream is None or (stream == "loop" and figure_is_pairs):
            figure.append(item)
        else:
            streams.setdefault(stream, []).append(text)
    return figure, streams


def stability(figure: dict, stable_spread: float, doubts: list[dict],
              trials: list[dict] = ()) -> tuple[bool, str | None, list[str], str | None]:
    """(stable, reason, codes, capped). Stable when each process's trials of the judged figure lie
    within `stable_spread` of each other and no observation that changes that figure (`doubts`:
    warm-up that never settled, kernels other than those identified or differing between processes)
    doubts it. The processes' medians may lie further apart: that is the noise between processes,
    which `repeats` estimate and the cell's intervals carry (fabench.analysis.noise), not
    instability.

    A spread that a clock held down explains (power_capped: the GPU reported its clocks held and
    the SM clock moved beyond the spread limit between the trials) is no doubt on what was run: the
    cell is `capped` (its reason in words), stable, and judged at the noise of capped cells (the
    noise model pools them apart, the calibration has their own between-run noise), as nvbench keeps
    a throttled state's samples above its clock floor. A capped cell with any other doubt is
    unstable, and its reasons say the clock too (code `clock`)."""
    reasons, codes = [observation_text(item) for item in doubts], [doubt_code(item) for item in doubts]
    within = figure.get("within_spread", figure["spread"])
    capped = power_capped(list(trials), stable_spread)
    if within > stable_spread:
        if capped and not reasons:
            return True, None, [], capped
        reasons.insert(0, f"{legacy.SPREAD_REASON}{within:.1%} within one process ({figure['n']} trials in "
                          f"{len(figure['process_medians'])} process(es)) exceeds {stable_spread:.1%}")
        codes.insert(0, SPREAD)
        if capped:
            reasons.insert(1, capped)
            codes.append(CLOCK)
    return (not reasons), ("; ".join(reasons) or None), sorted(set(codes)), capped


def trial_stats(trials: list[dict], stable_spread: float, doubts: list[dict]) -> dict:
    wall = metric_summary(*trial_values(trials, "wall_mean_ms"))
    device_values = trial_values(trials, "device_ms")
    device = metric_summary(*device_values) if device_values[0] else None
    stable, reason, codes, capped = stability(device or wall, stable_spread, doubts, trials if device else ())
    out = {"wall_mean_ms": wall, "device_ms": device, "judged": judged_metric(trials), "ci_method": None,
           "stable": stable, "unstable_reason": reason, "unstable_codes": codes, "capped": capped,
           "device_cycles": device_cycles(trials)}
    # The device figure at the clock it ran at, where every timed trial read its clocks through its
    # loop: what a capped cell is judged by between runs (fabench.analysis.figures.compared_metric),
    # and only where it is itself stable: where each process's trials in cycles lie within the
    # spread limit, the clock explained what moved the time. Where they do not, the cell keeps its
    # time and the capped cells' noise: a clock read that did not follow the kernel's would otherwise
    # be judged at the steady cells' noise.
    cycles = [t.get("device_kcycles") for t in trials if t.get("device_ms") is not None]
    if device and cycles and all(c is not None for c in cycles):
        figure = metric_summary(*trial_values(trials, "device_kcycles"))
        if figure["within_spread"] <= stable_spread:
            out["device_kcycles"] = figure
    # The device loop's period (no profiler) where one ran; runs with one loop per trial have only
    # the profiled stream's.
    periods = trial_medians(trials, "period_events_ms")
    if not periods[0]:
        periods = trial_medians(trials, "period_profiled_events_ms")
    if periods[0]:  # beside the kernels' own time: the per-call time of the back-to-back stream
        out["period_ms"] = metric_summary(*periods)
        out["kernel_shares"] = next((t["kernel_shares"] for t in trials if t.get("kernel_shares")), None)
    return out


def trial_medians(trials: list[dict], samples_key: str) -> tuple[list[float], list[int]]:
    """Each trial's median of one kind of samples (those that have them), and each one's process."""
    kept = [t for t in trials if t.get(samples_key)]
    return [stats.median(t[samples_key]) for t in kept], [t.get("process", 0) for t in kept]


def device_cycles(trials: list[dict]) -> dict | None:
    """The device figure in clock cycles (kilocycles: ms x MHz), from each trial's device figure and
    the SM clock read right after its device loop; None without clocks. A power cap or another card
    moves the clock, and the time with it; the cycles stay (nvbench confirms a change this way)."""
    pairs = [(t["device_ms"], (t.get("gpu_state") or {}).get("device_loop_sm_clock_mhz")) for t in trials
             if t.get("device_ms") is not None]
    pairs = [(ms, clock) for ms, clock in pairs if clock]
    if not pairs:
        return None
    return {"median": stats.median([ms * clock for ms, clock in pairs]),
            "clock_mhz": stats.median([clock for _, clock in pairs]), "n": len(pairs)}


def analyse_entry(entry: dict, result: dict) -> dict:
    """Fill the entry's derived keys from its trials and observations (in place; returned)."""
    trials = recorded_trials(entry)
    if not trials:
        if trials is not None:  # measured nothing: no figure; schema 1 (no trials key) keeps its own
            set_stats(entry, None, host_overhead_ms=None)
        return entry
    method = method_of(result)
    figure_is_pairs = trial_figures(trials) == "device_samples_ms"
    observed = legacy.observations(entry)
    doubts, stream_doubts = sort_notes(observed["notes"], figure_is_pairs)
    set_stats(entry, trial_stats(trials, method.get("stable_spread", DEFAULT_STABLE_SPREAD), doubts))
    entry["wall_mean_ms"] = metric_median(entry, "wall_mean_ms")
    device = trial_values(trials, "device_ms")[0]
    entry["device_ms"] = stats.describe(device) if device else None
    device_median = entry["device_ms"]["median"] if device else None
    entry["tflops"] = {"wall": tflops(result.get("flops"), entry["wall_mean_ms"]),
                       "device_median": tflops(result.get("flops"), device_median)}
    # The published method's figure minus the kernel's: what launching from Python adds per call.
    entry["host_overhead_ms"] = None if device_median is None else entry["wall_mean_ms"] - device_median
    if result.get("platform") != PlatformName.CPU:
        tolerance = (method.get("cross_check") or {}).get("tolerance", DEFAULT_TOLERANCE)
        # do_bench times each call between two events, the L2 cleared: its peer is our event pairs
        # (the same quantity in our fed stream); results from before the kernels' own time was the
        # figure compare it with the device median, which was the event pairs' median then.
        pairs = trial_medians(trials, "device_samples_ms")[0]
        peer = stats.median(pairs) if pairs and any(t.get("kernel_samples_ms") for t in trials) else device_median
        entry["cross_check"] = cross_checks(trials, peer, tolerance, observed)
        if peer is not device_median:
            unjudged_peer(entry["cross_check"], stream_doubts.get("loop", []))
        for key, check in (("second_method", period_check(trials, stream_doubts)),
                           ("kernel_time", kernel_time_check(trials))):
            if check is not None:
                entry["cross_check"] = dict(entry["cross_check"] or {"do_bench_ms": None, "agrees": None,
                                                                     "reason": "do_bench not run"})
                entry["cross_check"][key] = check
    return entry


def trial_figures(trials: list[dict]) -> str:
    """Each trial's device figure (in place): stats.trial_figure of its kernel-time samples (the
    kernels' own time per call, CUPTI), where the entry has them; in results measured before, of
    the event pairs around each call. A trial without kernel samples in an entry that has them (its
    trace could not be read, the note says why) has no device figure: one figure is never a mix of
    two quantities. Trials recorded before any samples were kept carry the figure and keep it.
    Returns the samples' key the figure is read from."""
    key = "kernel_samples_ms" if any(t.get("kernel_samples_ms") for t in trials) else "device_samples_ms"
    for trial in trials:
        if trial.get(key):
            trial["device_ms"] = stats.trial_figure(trial[key])
        elif key == "kernel_samples_ms":
            trial["device_ms"] = None
        cycles = clocked_samples(trial) if key == "kernel_samples_ms" else None
        if cycles is not None or "device_kcycles" in trial:
            trial["device_kcycles"] = stats.trial_figure(cycles) if cycles else None
    return key


def analyse_measured(entry: dict, job) -> dict:
    """An entry measured outside a job's result (one backend alone, a sweep's candidate), derived
    with the job's settings as a result of that job would record them (in place; returned)."""
    timing = job.timing  # a fabench.measure.spec.Measurement
    return analyse_entry(entry, {"platform": job.platform, "flops": job.flops,
                                 "method": {"stable_spread": timing.stable_spread,
                                            "cross_check": {"tolerance": timing.cross_check_tolerance}}})


def analyse_result(result: dict) -> dict:
    """Every backend entry of one job's result derived from its raw data (in place; returned)."""
    for entry in backend_dicts(result).values():
        analyse_entry(entry, result)
    return result


# ---------------------------------------------------------------- independent checks

def cross_checks(trials: list[dict], device_median: float | None, tolerance: float, observed: dict) -> dict | None:
    """do_bench's verdict (the top-level keys, as since schema 2) and the profiler's (`profiler`)."""
    do_bench = [t["do_bench_ms"] for t in trials if t.get("do_bench_ms") is not None]
    if not do_bench and "recorded_cross_check" in observed:
        check = dict(observed["recorded_cross_check"] or {}) or None  # schema 2: values not recorded
    else:
        host = [t["host_call_ms"] for t in trials if t.get("host_call_ms") is not None]
        check = do_bench_check(do_bench, device_median, tolerance, observed.get("do_bench_reason"), host, trials)
    # Since the time line was recorded: each profiled call's span (profiler_calls_ms); before, one
    # figure per trial, the kernels' durations summed (profiler_ms).
    profiled = [t["profiler_ms"] for t in trials if t.get("profiler_ms") is not None]
    profiled += [span for t in trials for span in t.get("profiler_calls_ms") or ()]
    if profiled:
        check = dict(check or {"do_bench_ms": None, "agrees": None, "reason": "do_bench not run"})
        check["profiler"] = profiler_check(profiled, device_median, tolerance, trials)
    return check


def period_check(trials: list[dict], stream_doubts: dict[str, list[str]] | None = None) -> dict | None:
    """The second method: the per-call period of the profiled back-to-back stream (the one the
    kernels' own time is read from) by CUPTI's timestamps against the same stream's period by the
    CUDA/HIP events recorded around its calls. The same quantity of the same stream by two clocks:
    they agree when the CUPTI timeline the kernels' own time is read from has every kernel of every
    call in it and runs at the events' pace. The kernels' own time itself has no second clock
    (events cannot time a call without the gaps around its kernels); the period's agreement is what
    vouches for its timeline. Beside it, `profiler_overhead`: the profiled stream's period by events
    against the device loop's (no profiler), what CUPTI's tracing adds per call between kernels
    (measured on an H100: 0.3-1.6% of a 0.11 ms period, about 0.6 us per kernel).

    Results recorded before the profiled stream's events were kept compare CUPTI with the device
    loop's events instead (two streams: the profiler's overhead then counts against them).

    Tolerance, from the measured noise of both: the half-range of each method's trial medians
    (their own repeatability across trials and processes) summed, plus the events' resolution
    relative to the period. None where either side was not measured.

    A stream the GPU caught up with has the host's waits in its period, by either clock: such a
    stream (a trial's `unfed_streams`, or a note of it in `stream_doubts`, sort_notes) leaves the
    check unable to judge (agrees null, "could not judge: ..."). It says nothing of the kernels'
    own durations, so it is no doubt on the cell's figure. Streams taken again until fed
    (`profiled_restreams`) are a fact of the measurement, not a doubt."""
    profiled, _ = trial_medians(trials, "period_profiled_events_ms")
    loop, _ = trial_medians(trials, "period_events_ms")
    cupti, _ = trial_medians(trials, "period_cupti_ms")
    events = profiled or loop
    if not events or not cupti:
        return None
    by_events, by_cupti = stats.median(events), stats.median(cupti)
    noise = {"events": stats.spread(events) / 2, "cupti": stats.spread(cupti) / 2,
             "resolution": EVENT_RESOLUTION_MS / by_events}
    tolerance = sum(noise.values())
    off = stats.relative_difference(by_events, by_cupti)
    out = {"events_ms": by_events, "cupti_ms": by_cupti, "difference": off, "tolerance": tolerance,
           "tolerance_parts": noise, "agrees": off <= tolerance, "reason": None,
           "stream": "the profiled stream" if profiled else "the device loop's stream (events) and the profiled one",
           "profiler_overhead": (stats.median(profiled) / stats.median(loop) - 1) if profiled and loop else None}
    # CUPTI reads the profiled stream; the events read it too, or (older results) the device loop's.
    read = ("profiled",) if profiled else ("profiled", "loop")
    unjudged = unfed(trials, [note for stream in read for note in (stream_doubts or {}).get(stream, [])])
    if unjudged:
        out.update(agrees=None, reason=f"{COULD_NOT_JUDGE}{unjudged}")
    elif off > tolerance:
        out["reason"] = (f"per-call period by events {by_events:.4f} ms, by CUPTI {by_cupti:.4f} ms: {off:.1%} apart, "
                         f"tolerance {tolerance:.1%} (half-ranges {noise['events']:.1%} + {noise['cupti']:.1%}, "
                         f"resolution {noise['resolution']:.1%})")
    return out


COULD_NOT_JUDGE = "could not judge: "


def unfed(trials: list[dict], notes: list[str]) -> str | None:
    """Why a stream's period cannot be judged (None when it can): the GPU caught up with the host
    in a stream that was kept, by the trials' `unfed_streams` or by older results' notes."""
    kept = sum(t.get("unfed_streams") or 0 for t in trials)
    if kept:
        return (f"{kept} profiled stream(s) kept although the GPU caught up with the host, so both clocks "
                f"read its waits in the period")
    if notes:
        return "the GPU caught up with the host in a stream the check reads (" + "; ".join(notes) + ")"
    return None


def unjudged_peer(check: dict | None, notes: list[str]) -> None:
    """do_bench's verdict (in place) where its peer, the device loop's event pairs, waited for the
    host: could not judge, its figures kept."""
    if check and check.get("agrees") is not None and notes:
        check.update(agrees=None, reason=f"{COULD_NOT_JUDGE}the GPU caught up with the host in the event pairs "
                                         f"do_bench is compared with ({'; '.join(notes)})")


def profiler_check(values: list[float], device_median: float | None, tolerance: float, trials: list[dict]) -> dict:
    """The profiled calls' figures (torch.profiler: each call's span from its first kernel's start
    to its last one's end, behind an L2 clear; in older results the kernels' durations summed)
    against our device median: no host in the figure, so it judges short kernels that do_bench
    cannot."""
    value = stats.median(values)
    if device_median is None:
        return {"ms": value, "agrees": None, "reason": "no device figure to compare"}
    off = stats.relative_difference(device_median, value)
    if off <= tolerance:
        return {"ms": value, "agrees": True, "reason": None}
    differs = (f"device median {device_median:.4f} ms differs from the profiled kernels' {value:.4f} ms by "
               f"{off:.1%} (tolerance {tolerance:.0%})")
    capped = power_capped(trials, tolerance)
    if capped:
        return {"ms": value, "agrees": None, "reason": f"GPU power-capped: {differs}; {capped}"}
    return {"ms": value, "agrees": False, "reason": differs}


def power_capped(trials: list[dict], tolerance: float) -> str | None:
    """Why no two measurements of this cell can be held to `tolerance`, when the GPU reported its
    clocks held down (power cap, thermal) and the SM clock, read right after each trial's device
    loop and right after its do_bench call, moved by more than the tolerance: the kernel's time
    then depends on when in the cap's control cycle it is taken, by any method (on an H200, cuDNN
    at (4,4096,8,256) read 0.46-0.55 ms between consecutive takes of one process, by do_bench and
    by our timer alike, at 1545-1980 MHz)."""
    held = sorted({t["clock_slowdown"] for t in trials if t.get("clock_slowdown")})
    clocks = [clock for t in trials for clock in _sm_clocks(t.get("gpu_state") or {}) if clock]
    if not held or len(clocks) < 2 or stats.spread(clocks) <= tolerance:
        return None
    return (f"clocks held down ({', '.join(held)}): SM clock {min(clocks)}-{max(clocks)} MHz across the trials' "
            f"device loops and do_bench calls (spread {stats.spread(clocks):.1%} > {tolerance:.0%}), so figures "
            f"taken at different moments differ by more than the tolerance whichever method takes them")


def _sm_clocks(state: dict) -> tuple:
    """The SM clock after the device loop and after do_bench (the trial's end)."""
    return state.get("device_loop_sm_clock_mhz"), (state.get("end") or {}).get("sm_clock_mhz")


def do_bench_check(values: list[float], device_median: float | None, tolerance: float, why_not: str | None = None,
                   host_call_ms: list[float] = (), trials: list[dict] = ()) -> dict | None:
    """Our device median against triton.testing.do_bench's median (one value per trial).

    do_bench times each call with its own events, after clearing the L2; when the host needs
    longer to queue a call than the call's kernels take, those events time the host, and when its
    values spread more than the tolerance it disagrees with itself. In both cases `agrees` is
    null and the reason says why. Otherwise it is whether the medians are within the tolerance,
    but for medians further apart on a GPU whose clocks were held down and moved more than the
    tolerance (power_capped): null again, with the difference and the clocks.
    """
    host = stats.median(list(host_call_ms)) if host_call_ms else None
    if not values and not why_not and host is not None:  # not run: the host took the kernels' time to queue a call
        why_not = (f"do_bench host-bound, not run: a call takes {host:.4f} ms to queue on the host, at least its kernels' "
                   "time in the trial before, so do_bench's per-call events would time the host")
    if not values:
        return {"do_bench_ms": None, "agrees": None, "reason": why_not} if why_not else None
    value = stats.median(values)
    if len(values) > 1 and stats.spread(values) > tolerance:
        listed = ", ".join(f"{v:.4f}" for v in values)
        return {"do_bench_ms": value, "agrees": None,
                "reason": f"do_bench itself unstable: {listed} ms (spread {stats.spread(values):.1%} "
                          f"> {tolerance:.0%})"}
    if device_median is None:
        return {"do_bench_ms": value, "agrees": None, "reason": "no device figure to compare"}
    if host is not None and host >= device_median:
        return {"do_bench_ms": value, "agrees": None,
                "reason": f"do_bench host-bound: a call takes {host:.4f} ms to queue on the host, its kernels "
                          f"{device_median:.4f} ms, so do_bench's per-call events time the host"}
    off = stats.relative_difference(device_median, value)
    if off <= tolerance:
        return {"do_bench_ms": value, "agrees": True, "reason": None}
    differs = (f"device median {device_median:.4f} ms differs from do_bench's {value:.4f} ms by {off:.1%} "
               f"(tolerance {tolerance:.0%})")
    capped = power_capped(list(trials), tolerance)
    if capped:
        return {"do_bench_ms": value, "agrees": None, "reason": f"GPU power-capped: {differs}; {capped}"}
    return {"do_bench_ms": value, "agrees": False, "reason": differs}
