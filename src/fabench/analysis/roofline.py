"""How close a cell comes to the hardware's limits: its achieved TFLOP/s against the GPU's dense
fp16/bf16 tensor peak, and the bytes it must move against the GPU's memory bandwidth (a roofline).

The peaks are data (peaks.yaml: per GPU model, with each figure's public source). A cell's FLOPs are
the job's own count (the result's `flops`, fabench.measure.metrics.attention_flops: the causal half
of 4*B*H*S^2*D); the bytes it must move are Q, K and V read once and O written once
(`attention_bytes`). Both are held against the cell's device time (the kernels' own time), with
its 95% interval carried through; a run without device time (a CPU) has no limits here, and a GPU
without a known peak is named as such.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files

from fabench.analysis.figures import tflops
from fabench.analysis.result_types import MetricStats, cell_stats, provenance_of
from fabench.config import shipped_yaml
from fabench.platforms import PlatformName

PEAKS = files("fabench").joinpath("analysis", "peaks.yaml")
PEAK_KEYS = ("model", "platform", "device_names", "tensor_tflops", "memory", "memory_tb_s", "source")
BYTES_PER_ELEMENT = {"float16": 2, "bfloat16": 2, "float32": 4}
# The tensors a forward pass must move at least once: Q, K, V read, O written.
TENSORS_MOVED = 4


class PeakError(ValueError):
    """peaks.yaml is not what this module reads: the message names the entry and the key."""


@lru_cache(maxsize=None)
def peaks() -> tuple[dict, ...]:
    """Every GPU model's limits, checked: each key present, numbers positive, names listed."""
    data = shipped_yaml(PEAKS) or {}
    found = []
    for i, item in enumerate(data.get("peaks") or []):
        missing = [key for key in PEAK_KEYS if not (item or {}).get(key)]
        if missing:
            raise PeakError(f"peaks.yaml: peaks[{i}]: {missing[0]} missing; expected {', '.join(PEAK_KEYS)}")
        numbers = [item["memory_tb_s"], *item["tensor_tflops"].values()]
        if not all(isinstance(n, (int, float)) and n > 0 for n in numbers):
            raise PeakError(f"peaks.yaml: peaks[{i}] ({item['model']}): tensor_tflops and memory_tb_s must be positive numbers")
        found.append(item)
    return tuple(found)


def result_device(result: dict) -> str | None:
    """The device name a result records: the GPU's own name, else the platform's device name."""
    provenance = provenance_of(result)
    return (provenance.get("gpu") or {}).get("name") or provenance.get("device")


def peak_for(result: dict) -> tuple[dict | None, str | None]:
    """(the GPU model's limits for this result's dtype, None) or (None, why it has none), in words."""
    platform = result.get("platform")
    if platform not in (PlatformName.CUDA, PlatformName.ROCM):
        where = "a CPU" if platform == PlatformName.CPU else f"platform {platform or 'unknown'}"
        return None, f"it ran on {where}, which has no tensor peak to hold it against"
    device = result_device(result)
    for item in peaks():
        if item["platform"] == platform and device in item["device_names"]:
            peak = item["tensor_tflops"].get(result.get("dtype"))
            if peak is None:
                return None, f"no {result.get('dtype')} peak is known for the {item['model']}"
            return {"model": item["model"], "tflops": peak, "memory": item["memory"],
                    "tb_s": item["memory_tb_s"], "source": item["source"]}, None
    return None, f"no peak is known for the {device or 'unnamed GPU'} (fabench/analysis/peaks.yaml lists " \
                 f"{', '.join(n for item in peaks() for n in item['device_names'])})"


def attention_bytes(shape: dict, dtype: str) -> int:
    """The bytes a cell must move at least: Q, K and V read once and O written once, each
    batch x seq x heads x head_dim elements of the job's dtype."""
    elements = shape["batch"] * shape["seq"] * shape["heads"] * shape["head_dim"]
    return TENSORS_MOVED * elements * BYTES_PER_ELEMENT[dtype]


def intensity(result: dict) -> float | None:
    """FLOPs per byte moved: where the cell sits on the roofline's x axis."""
    flops, moved = result.get("flops"), attention_bytes(result["shape"], result["dtype"])
    return flops / moved if flops and moved else None


def cell_limits(result: dict, entry: dict, peak: dict) -> dict | None:
    """One cell against its GPU's limits, from its device time (the kernels' own): achieved TFLOP/s
    and TB/s with their 95% intervals (the time's interval, inverted), and each as a percent of the
    peak. None for a cell that did not run cleanly or has no device time."""
    stats = cell_stats(entry)
    device = (stats.metric("device_ms") if stats else None) or MetricStats(None, None, {})
    median = device.median
    if entry.get("status") != "ok" or not median:
        return None
    low_ms, high_ms = device.get("ci95") or (median, median)
    flops, moved = result.get("flops"), attention_bytes(result["shape"], result["dtype"])
    achieved = [tflops(flops, ms) for ms in (median, high_ms, low_ms)]  # the slower end is the lower rate
    if achieved[0] is None:
        return None
    rate = [moved / (ms * 1e-3) / 1e12 for ms in (median, high_ms, low_ms)]
    return {"tflops": achieved[0], "tflops_ci95": achieved[1:], "compute_pct": 100 * achieved[0] / peak["tflops"],
            "compute_pct_ci95": [100 * a / peak["tflops"] for a in achieved[1:]],
            "tb_s": rate[0], "tb_s_ci95": rate[1:], "bandwidth_pct": 100 * rate[0] / peak["tb_s"],
            "intensity": flops / moved, "unstable": stats is not None and stats.stable is False}


def run_peak(results: list[dict]) -> tuple[dict | None, str | None]:
    """The run's limits: the one GPU model all its results ran on; (None, why) when it has none or
    its results ran on models with different limits."""
    found = [peak_for(r) for r in results]
    models = {(p or {}).get("model") for p, _ in found}
    if len(models) > 1:
        return None, "its results ran on different GPU models (" + ", ".join(sorted(m or "unknown" for m in models)) + ")"
    return found[0] if found else (None, "it has no results")
