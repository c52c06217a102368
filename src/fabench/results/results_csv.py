"""A collected run as CSV: one row per (variant, shape, backend) cell the report's tables show, for
pandas and notebooks.

Every figure is the analysis stage's, as results.json holds it; the interval columns say what the
interval is (fabench.analysis.noise.interval_name), since a CPU run's is not one over processes. A
backend measured once per shape (fabench.results.shared) has a row in every variant, as the
report's tables show it; `measured_in` names the variant whose jobs measured it (empty where the
row's own variant did), so that counting each measurement once is `df[df.measured_in.isna()]`."""

from __future__ import annotations

import csv
import io

from fabench.analysis.figures import cell_metric
from fabench.analysis.noise import interval_name
from fabench.analysis.result_types import backend_dicts, cell_stats, provenance_of
from fabench.results.bounds import bounds_problem
from fabench.results.shared import shown

COLUMNS = ("run", "variant", "shape_id", "batch", "seq", "heads", "head_dim", "backend", "label", "role", "platform",
           "status", "failure_kind", "reason", "metric", "median_ms", "ci95_low_ms", "ci95_high_ms", "pi95_low_ms",
           "pi95_high_ms", "interval", "wall_mean_ms", "device_median_ms", "spread", "stable", "unstable_reason",
           "tflops_device", "tflops_wall", "max_abs_err", "cosine", "gpu_uuid", "device", "measured_in")


def cell_row(result: dict, name: str, entry: dict) -> dict:
    stats = cell_stats(entry)
    metric = cell_metric(entry) if stats else None
    found = stats.metric(metric) if metric else None
    figure = found.raw if found else {}
    ci, pi = figure.get("ci95") or (None, None), figure.get("pi95") or (None, None)
    roles = [role for role, backend in result["roles"].items() if backend == name]
    correctness, tflops = entry.get("correctness") or {}, entry.get("tflops") or {}
    return {"run": result["run"], "variant": result["variant"], "shape_id": result["shape_id"], **result["shape"],
            "backend": name, "label": entry["label"], "role": " ".join(roles), "platform": result["platform"],
            "status": entry["status"], "failure_kind": entry.get("failure_kind"), "reason": entry.get("reason"),
            "metric": metric, "median_ms": figure.get("median"), "ci95_low_ms": ci[0], "ci95_high_ms": ci[1],
            "pi95_low_ms": pi[0], "pi95_high_ms": pi[1], "interval": interval_name(figure) if figure else None,
            "wall_mean_ms": entry.get("wall_mean_ms"), "device_median_ms": (entry.get("device_ms") or {}).get("median"),
            "spread": figure.get("spread"), "stable": stats.stable if stats else None,
            "unstable_reason": stats.unstable_reason if stats else None, "tflops_device": tflops.get("device_median"),
            "tflops_wall": tflops.get("wall"), "max_abs_err": correctness.get("max_abs_err"),
            "cosine": correctness.get("cosine"), "gpu_uuid": (provenance_of(result).get("gpu") or {}).get("uuid"),
            "device": provenance_of(result).get("device"), "measured_in": entry.get("measured_in")}


def results_csv(collected: dict) -> str:
    """The CSV of a collected run; ValueError (one line naming the field) for a number no
    measurement can be, which would reach the CSV as `inf` or hundreds of digits."""
    problem = bounds_problem(collected)
    if problem:
        raise ValueError(f"results.json: {problem}")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for result in shown(collected)["results"]:
        writer.writerows(cell_row(result, name, entry) for name, entry in backend_dicts(result).items())
    return buffer.getvalue()
