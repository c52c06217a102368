"""How close to the hardware's limit: per cell, the achieved TFLOP/s as a percent of the GPU's dense
fp16/bf16 tensor peak (with its 95% interval) and the bytes it must move per second as a percent of
the GPU's memory bandwidth (fabench.analysis.roofline), next to the published table; the roofline
figure draws the same cells. Left out on a CPU run (no device time, no peak) and for the
publication's numbers recast as a run; a GPU model without a known peak is named, without percentages.
"""

from __future__ import annotations

from fabench.analysis import roofline
from fabench.analysis.figures import run_metric
from fabench.analysis.result_types import backend_dicts, metric_median
from fabench.report.format import backend_name, fmt, md_text
from fabench.report.model import Run
from fabench.results.contract import FLOP_CONVENTION


def percent_text(limits: dict | None) -> str:
    """"61.9% [61.5-62.3] · 8.8%": compute percent with its 95% interval, then bandwidth percent."""
    if limits is None:
        return "n/a"
    low, high = limits["compute_pct_ci95"]
    # An unstable cell's interval is not shown: its trials disagree beyond what the interval assumes.
    spread = "(unstable)" if limits["unstable"] else f"[{low:.1f}-{high:.1f}]"
    return f"{limits['compute_pct']:.1f}% {spread} · {limits['bandwidth_pct']:.1f}%"


def measured_backends(run: Run) -> list[str]:
    """The backends with a device time in some cell, in the results' order."""
    return list(dict.fromkeys(name for result, name, entry in run.backends()
                              if entry["status"] == "ok" and metric_median(entry, "device_ms")))


def variant_table(run: Run, variant: str, names: list[str], peak: dict) -> dict:
    """One variant's table: a row per shape, a column per backend."""
    rows = []
    for result in run.of(variant):
        cells = [percent_text(roofline.cell_limits(result, backend_dicts(result)[n], peak)
                              if n in backend_dicts(result) else None) for n in names]
        rows.append([md_text(run.shape_name(result["shape"])), fmt(roofline.intensity(result), ".0f"), *cells])
    return {"title": md_text(run.title(variant)), "rows": rows}


def context(run: Run, published: dict | None) -> dict | None:
    if run.published or run_metric(run.results) != "device_ms":
        return None  # the publication's numbers, or a CPU run: no device time to hold against a peak
    peak, why = roofline.run_peak(run.results)
    devices = [roofline.result_device(r) for r in run.results]
    found = {"device": md_text(", ".join(dict.fromkeys(d for d in devices if d)) or "unknown"),
             "why": md_text(why) if why else None, "peak": None}
    if peak is None:
        return found
    names = measured_backends(run)
    first = {name: next(e for _, n, e in run.backends() if n == name) for name in names}
    return {**found,
            # The peaks as the vendors print them (989.4, 4.8), the ridge to the FLOP/byte.
            "peak": {"model": md_text(peak["model"]), "tflops": f"{peak['tflops']:g}", "memory": md_text(peak["memory"]),
                     "tb_s": f"{peak['tb_s']:g}", "source": md_text(peak["source"]),
                     "ridge": fmt(peak["tflops"] / peak["tb_s"], ".0f")},
            "columns": ["Shape", "FLOP/byte"] + [backend_name(name, first[name]) for name in names],
            "tables": [variant_table(run, variant, names, peak) for variant in run.variants],
            "flop_convention": md_text(FLOP_CONVENTION)}
