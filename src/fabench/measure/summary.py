"""A backend entry's figures from its trials: the summary keys every reader uses.

Torch-free, so one process's entry and the merge of several processes' entries
(fabench.measure.repeats) are summarized by the same code.
"""

from __future__ import annotations

from fabench.measure import stats


def tflops(flops: float | None, ms: float | None) -> float | None:
    if not flops or not ms or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def complete_entry(entry: dict, flops: float | None, stable_spread: float, notes: list[str]) -> dict:
    """Fill wall_mean_ms, device_ms, tflops, host_overhead_ms and stats from entry["trials"].

    wall_mean_ms is the median over trials of the published method's figure, so the original
    tables keep their meaning; device_ms describes the trials' device figures (median, p10, p90,
    mean, n over trials). An entry without trials keeps its null figures.
    """
    trials = entry["trials"]
    entry["stats"] = stats.trial_stats(trials, stable_spread, notes)
    if not trials:
        return entry
    entry["wall_mean_ms"] = entry["stats"]["wall_mean_ms"]["median"]
    device = [t["device_ms"] for t in trials if t["device_ms"] is not None]
    entry["device_ms"] = stats.describe(device) if device else None
    device_median = entry["device_ms"]["median"] if device else None
    entry["tflops"] = {"wall": tflops(flops, entry["wall_mean_ms"]), "device_median": tflops(flops, device_median)}
    # The published method's figure minus the kernel's: what launching from Python adds per call.
    entry["host_overhead_ms"] = None if device_median is None else entry["wall_mean_ms"] - device_median
    return entry


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
    """The SM clock after the device loop (recorded since this rule) and after do_bench (the end)."""
    return state.get("device_loop_sm_clock_mhz"), (state.get("end") or {}).get("sm_clock_mhz")


def cross_check(do_bench_values: list[float], device_median: float | None, tolerance: float,
                why_not: str | None = None, host_call_ms: list[float] = (), trials: list[dict] = ()) -> dict | None:
    """Our device median against triton.testing.do_bench's median (one value per trial).

    do_bench times each call with its own events, after clearing the L2; when the host needs
    longer to queue a call than the call's kernels take, those events time the host, and when its
    values spread more than the tolerance it disagrees with itself. In both cases `agrees` is
    null and the reason says why. Otherwise it is whether the medians are within the tolerance,
    but for medians further apart on a GPU whose clocks were held down and moved more than the
    tolerance across the trials' device loops and do_bench calls (power_capped): null again, with
    the difference and the clocks.
    """
    if not do_bench_values:
        return {"do_bench_ms": None, "agrees": None, "reason": why_not} if why_not else None
    value = stats.summary(do_bench_values)["median"]
    if len(do_bench_values) > 1 and stats.spread(do_bench_values) > tolerance:
        listed = ", ".join(f"{v:.4f}" for v in do_bench_values)
        return {"do_bench_ms": value, "agrees": None,
                "reason": f"do_bench itself unstable: {listed} ms (spread {stats.spread(do_bench_values):.1%} "
                          f"> {tolerance:.0%})"}
    if device_median is None:
        return {"do_bench_ms": value, "agrees": None, "reason": "no device figure to compare"}
    host = stats.summary(list(host_call_ms))["median"] if host_call_ms else None
    if host is not None and host >= device_median:
        return {"do_bench_ms": value, "agrees": None,
                "reason": f"do_bench host-bound: a call takes {host:.4f} ms to queue on the host, its kernels "
                          f"{device_median:.4f} ms, so do_bench's per-call events time the host"}
    off = stats.relative_difference(device_median, value)
    if off <= tolerance:
        return {"do_bench_ms": value, "agrees": True, "reason": None}
    differs = (f"device median {device_median:.4f} ms differs from do_bench's {value:.4f} ms by {off:.1%} "
               f"(tolerance {tolerance:.0%})")
    # Both figures are the kernel's, but taken at different clocks: the difference is the cap's.
    capped = power_capped(list(trials), tolerance)
    if capped:
        return {"do_bench_ms": value, "agrees": None, "reason": f"GPU power-capped: {differs}; {capped}"}
    return {"do_bench_ms": value, "agrees": False, "reason": differs}
