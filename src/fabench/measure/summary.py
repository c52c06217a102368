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


def cross_check(do_bench_values: list[float], device_median: float | None, tolerance: float,
                why_not: str | None = None, host_call_ms: list[float] = ()) -> dict | None:
    """Our device median against triton.testing.do_bench's median (one value per trial).

    do_bench times each call with its own events, after clearing the L2; when the host needs
    longer to queue a call than the call's kernels take, those events time the host, and when its
    values spread more than the tolerance it disagrees with itself. In both cases `agrees` is
    null and the reason says why; otherwise it is whether the medians are within the tolerance.
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
    return {"do_bench_ms": value, "agrees": off <= tolerance,
            "reason": None if off <= tolerance else
            f"device median {device_median:.4f} ms differs from do_bench's {value:.4f} ms by {off:.1%} "
            f"(tolerance {tolerance:.0%})"}
