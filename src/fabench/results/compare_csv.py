"""A comparison (fabench.results.compare) as CSV: one row per cell and entry, for pandas.

Each row is one archived entry's figure of one (variant, shape, backend) cell and its verdicts
against the previous entry and the baseline, as the Markdown shows them; every value is the
analysis stage's, none is computed here."""

from __future__ import annotations

import csv
import io

COLUMNS = ("entry", "variant", "shape_id", "batch", "seq", "heads", "head_dim", "backend", "label", "status",
           "metric", "median_ms", "ci95_low_ms", "ci95_high_ms", "pi95_low_ms", "pi95_high_ms", "stable",
           "against_previous", "previous_verdict", "previous_code", "previous_ratio", "previous_detectable",
           "against_baseline", "baseline_verdict", "baseline_code", "baseline_ratio", "baseline_detectable",
           "why")


def cell_rows(row: dict) -> list[dict]:
    out = []
    for cell in row["cells"]:
        if cell["status"] is None:
            continue
        previous, base = cell.get("vs_previous") or {}, cell.get("vs_baseline") or {}
        metric = previous.get("metric") or base.get("metric") or ("device_ms" if cell.get("device_ms") else
                                                                 "wall_mean_ms" if cell.get("wall_mean_ms") else None)
        figure = (cell.get(metric) or {}) if metric else {}
        ci, pi = figure.get("ci95") or (None, None), figure.get("pi95") or (None, None)
        out.append({
            "entry": cell["entry"], "variant": row["variant"], "shape_id": row["shape_id"], **row["shape"],
            "backend": row["backend"], "label": row["label"], "status": cell["status"], "metric": metric,
            "median_ms": figure.get("median"), "ci95_low_ms": ci[0], "ci95_high_ms": ci[1],
            "pi95_low_ms": pi[0], "pi95_high_ms": pi[1], "stable": cell.get("stable"),
            "against_previous": previous.get("entry"), "previous_verdict": previous.get("verdict"),
            "previous_code": previous.get("code"), "previous_ratio": previous.get("ratio"),
            "previous_detectable": previous.get("detectable"),
            "against_baseline": base.get("entry"), "baseline_verdict": base.get("verdict"),
            "baseline_code": base.get("code"), "baseline_ratio": base.get("ratio"),
            "baseline_detectable": base.get("detectable"),
            "why": "; ".join(v["why"] for v in (previous, base) if v.get("why")) or cell.get("reason"),
        })
    return out


def comparison_csv(comparison: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in comparison["rows"]:
        writer.writerows(cell_rows(row))
    return buffer.getvalue()
