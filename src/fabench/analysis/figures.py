"""Which figure a cell is judged on, and the figures derived from a time.

Device time where the job timed on the device (it is the kernel's time), else the published
method's wall-clock figure (a CPU, or a GPU backend without a device timer). This is the only
place that chooses; the report, the comparison and the plots ask here.
"""

from __future__ import annotations

from fabench.analysis.result_types import Method, backend_dicts, cell_stats, figure_record, metric_median

METRICS = {"device_ms": "device time", "wall_mean_ms": "wall-clock time",
           "device_kcycles": "device time in SM clock cycles"}


def trial_values(trials: list[dict], metric: str) -> tuple[list[float], list[int]]:
    """The trials' values of one metric (those that have it) and each one's process."""
    kept = [t for t in trials if t.get(metric) is not None]
    return [t[metric] for t in kept], [t.get("process", 0) for t in kept]


def judged_metric(trials: list[dict]) -> str:
    """device_ms when any trial timed on the device, else wall_mean_ms."""
    return "device_ms" if any(t.get("device_ms") is not None for t in trials) else "wall_mean_ms"


def cell_metric(*entries: dict) -> str | None:
    """The metric every given analysed entry has a median for: device first, then wall (the
    figure a cell shows; a comparison of runs judges by compared_metric)."""
    for metric in ("device_ms", "wall_mean_ms"):
        if all(metric_median(e, metric) is not None for e in entries):
            return metric
    return None


def compared_metric(*entries: dict) -> str | None:
    """The figure two runs' cells are judged by: the clock-normalised device time (SM kilocycles)
    where either cell ran held at a power cap (stats.capped) and every entry has that figure, else
    cell_metric's. A capped kernel's time follows the clock the cap holds it to, which moves with the
    card's heat and power from trial to trial and run to run (cuDNN at (4,4096,8,256) on an H200:
    trials 3-5% apart, runs 1.5% beyond their processes' noise); its cycles at the clock it ran at
    do not follow the clock. A steady cell keeps its time: its clock does not move, and a cycles
    figure would only add the clock's reading to it."""
    metric = cell_metric(*entries)
    capped = any(stats.capped for stats in map(cell_stats, entries) if stats)
    if metric == "device_ms" and capped and all(metric_median(e, "device_kcycles") is not None for e in entries):
        return "device_kcycles"
    return metric


def tflops(flops: float | None, ms: float | None) -> float | None:
    if not flops or not ms or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def run_metric(results: list[dict]) -> str:
    """The figure a run's tables show: device time where any job timed on the device (a GPU run),
    else the published method's wall-clock figure (a CPU run)."""
    timed = any(Method.of(r).get("device_timer") for r in results) or any(
        metric_median(b, "device_ms") is not None or
        (b.get("device_ms") or {}).get("median") is not None for r in results for b in backend_dicts(r).values())
    return "device_ms" if timed else "wall_mean_ms"


def shown_figure(entry: dict, metric: str) -> dict:
    """The analysed summary of `metric` for one backend, the wall figure where it has no device
    figure (a GPU backend without a device timer); {} when it has neither."""
    return (figure_record(entry, metric) if metric == "device_ms" else None) or figure_record(
        entry, "wall_mean_ms") or {}


def clocked_samples(trial: dict) -> list[float] | None:
    """The trial's kernel-time samples in SM kilocycles (ms x MHz), each at the clock its chunk's
    sleep read after it (sleep_clock_mhz, chunk_calls: fabench.measure.device.kernels.stream_figures);
    None where the trial has no such clocks, or they do not cover its samples one for one."""
    samples, clocks, calls = (trial.get(k) for k in ("kernel_samples_ms", "sleep_clock_mhz", "chunk_calls"))
    if not samples or not clocks or not calls or len(clocks) != len(calls) or sum(calls) != len(samples):
        return None
    per_sample = [clock for clock, count in zip(clocks, calls) for _ in range(count)]
    return [ms * clock for ms, clock in zip(samples, per_sample)]
