"""Which figure a cell is judged on, and the figures derived from a time.

Device time where the job timed on the device (it is the kernel's time), else the published
method's wall-clock figure (a CPU, or a GPU backend without a device timer). This is the only
place that chooses; the report, the comparison and the plots ask here.
"""

from __future__ import annotations

METRICS = {"device_ms": "device time", "wall_mean_ms": "wall-clock time"}


def trial_values(trials: list[dict], metric: str) -> tuple[list[float], list[int]]:
    """The trials' values of one metric (those that have it) and each one's process."""
    kept = [t for t in trials if t.get(metric) is not None]
    return [t[metric] for t in kept], [t.get("process", 0) for t in kept]


def judged_metric(trials: list[dict]) -> str:
    """device_ms when any trial timed on the device, else wall_mean_ms."""
    return "device_ms" if any(t.get("device_ms") is not None for t in trials) else "wall_mean_ms"


def cell_metric(*entries: dict) -> str | None:
    """The metric every given analysed entry has a median for: device first, then wall."""
    for metric in METRICS:
        if all(((e.get("stats") or {}).get(metric) or {}).get("median") is not None for e in entries):
            return metric
    return None


def tflops(flops: float | None, ms: float | None) -> float | None:
    if not flops or not ms or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def run_metric(results: list[dict]) -> str:
    """The figure a run's tables show: device time where any job timed on the device (a GPU run),
    else the published method's wall-clock figure (a CPU run)."""
    timed = any(r["method"].get("device_timer") for r in results) or any(
        ((b.get("stats") or {}).get("device_ms") or {}).get("median") is not None or
        (b.get("device_ms") or {}).get("median") is not None for r in results for b in r["backends"].values())
    return "device_ms" if timed else "wall_mean_ms"


def shown_figure(entry: dict, metric: str) -> dict:
    """The analysed summary of `metric` for one backend, the wall figure where it has no device
    figure (a GPU backend without a device timer); {} when it has neither."""
    stats = entry.get("stats") or {}
    return (stats.get(metric) if metric == "device_ms" else None) or stats.get("wall_mean_ms") or {}
