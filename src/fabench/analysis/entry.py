"""One backend of one job: its figures, stability and independent cross-checks, derived from
the trials and observations its processes recorded.

The run-level intervals (a CI of each median and a prediction interval for another run) need
the noise of many cells and come from fabench.analysis.noise.
"""

from __future__ import annotations

from fabench.analysis import legacy, stats
from fabench.analysis.figures import judged_metric, tflops, trial_values

DEFAULT_STABLE_SPREAD = 0.03
DEFAULT_TOLERANCE = 0.03


def metric_summary(values: list[float], processes: list[int]) -> dict:
    """{median, spread, n, process_medians} of one metric over the trials; intervals come later."""
    return {"median": stats.median(values), "ci95": None, "pi95": None, "spread": stats.spread(values),
            "n": len(values), "process_medians": stats.process_medians(values, processes)}


def stability(figure: dict, stable_spread: float, notes: list[str]) -> tuple[bool, str | None]:
    """Stable when the judged figure's trials lie within `stable_spread` of each other and no
    note (warm-up that never settled, a GPU that caught up with the host, kernels that differ
    between processes) casts doubt on them. The reason names every problem found."""
    reasons = list(notes)
    if figure["spread"] > stable_spread:
        reasons.insert(0, f"{legacy.SPREAD_REASON}{figure['spread']:.1%} (max/min - 1 over {figure['n']} trials) "
                          f"exceeds {stable_spread:.1%}")
    return (not reasons), ("; ".join(reasons) or None)


def trial_stats(trials: list[dict], stable_spread: float, notes: list[str]) -> dict:
    wall = metric_summary(*trial_values(trials, "wall_mean_ms"))
    device_values = trial_values(trials, "device_ms")
    device = metric_summary(*device_values) if device_values[0] else None
    stable, reason = stability(device or wall, stable_spread, notes)
    return {"wall_mean_ms": wall, "device_ms": device, "judged": judged_metric(trials), "ci_method": None,
            "stable": stable, "unstable_reason": reason, "device_cycles": device_cycles(trials)}


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
    trials = entry.get("trials")
    if not trials:
        if trials is not None:  # measured nothing: no figure; schema 1 (no trials key) keeps its own
            entry.update(stats=None, host_overhead_ms=None)
        return entry
    method = result.get("method") or {}
    trial_figures(trials)
    observed = legacy.observations(entry)
    entry["stats"] = trial_stats(trials, method.get("stable_spread", DEFAULT_STABLE_SPREAD), observed["notes"])
    entry["wall_mean_ms"] = entry["stats"]["wall_mean_ms"]["median"]
    device = trial_values(trials, "device_ms")[0]
    entry["device_ms"] = stats.describe(device) if device else None
    device_median = entry["device_ms"]["median"] if device else None
    entry["tflops"] = {"wall": tflops(result.get("flops"), entry["wall_mean_ms"]),
                       "device_median": tflops(result.get("flops"), device_median)}
    # The published method's figure minus the kernel's: what launching from Python adds per call.
    entry["host_overhead_ms"] = None if device_median is None else entry["wall_mean_ms"] - device_median
    if result.get("platform") != "cpu":
        tolerance = (method.get("cross_check") or {}).get("tolerance", DEFAULT_TOLERANCE)
        entry["cross_check"] = cross_checks(trials, device_median, tolerance, observed)
    return entry


def trial_figures(trials: list[dict]) -> None:
    """Each trial's device figure, the median of its per-iteration samples (in place). Trials
    recorded before the samples were kept carry the figure itself and keep it."""
    for trial in trials:
        if trial.get("device_samples_ms"):
            trial["device_ms"] = stats.median(trial["device_samples_ms"])


def analyse_measured(entry: dict, job: dict) -> dict:
    """An entry measured outside a job's result (one backend alone, a sweep's candidate), derived
    with the job's settings as a result of that job would record them (in place; returned)."""
    timing = job["timing"]
    return analyse_entry(entry, {"platform": job["platform"], "flops": job["flops"],
                                 "method": {"stable_spread": timing["stable_spread"],
                                            "cross_check": {"tolerance": timing["cross_check_tolerance"]}}})


def analyse_result(result: dict) -> dict:
    """Every backend entry of one job's result derived from its raw data (in place; returned)."""
    for entry in result["backends"].values():
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


def judged(check: dict | None) -> dict | None:
    """The independent check that judged the cell: do_bench where it could, else the profiler."""
    if not check:
        return None
    if check.get("agrees") is not None:
        return {"by": "do_bench", "agrees": check["agrees"], "reason": check.get("reason")}
    profiler = check.get("profiler") or {}
    if profiler.get("agrees") is not None:
        return {"by": "profiler", "agrees": profiler["agrees"], "reason": profiler.get("reason")}
    return None


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
    host = stats.median(list(host_call_ms)) if host_call_ms else None
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
