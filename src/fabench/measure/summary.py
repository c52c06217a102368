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
                why_not: str | None = None) -> dict | None:
    """Our device median against triton.testing.do_bench's median (one value per process).

    With several processes, do_bench's own values must agree within the tolerance before its
    verdict counts; otherwise `agrees` is null and the reason says do_bench was unstable.
    """
    if not do_bench_values:
        return {"do_bench_ms": None, "agrees": None, "reason": why_not} if why_not else None
    value = stats.summary(do_bench_values)["median"]
    if len(do_bench_values) > 1 and stats.spread(do_bench_values) > tolerance:
        listed = ", ".join(f"{v:.4f}" for v in do_bench_values)
        return {"do_bench_ms": value, "agrees": None,
                "reason": f"do_bench itself unstable: {listed} ms in the job's processes "
                          f"(spread {stats.spread(do_bench_values):.1%} > {tolerance:.0%})"}
    if device_median is None:
        return {"do_bench_ms": value, "agrees": None, "reason": "no device figure to compare"}
    off = stats.relative_difference(device_median, value)
    return {"do_bench_ms": value, "agrees": off <= tolerance,
            "reason": None if off <= tolerance else
            f"device median {device_median:.4f} ms differs from do_bench's {value:.4f} ms by {off:.1%} "
            f"(tolerance {tolerance:.0%})"}
