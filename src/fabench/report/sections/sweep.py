"""Tuning sweep: the benchmark's figures of the variants side by side (Before / After / Swept),
the sweep's winner and the best candidate per shape, the memory model against the device, and
every candidate per shape with its time and interval, or why it was dropped.

The sweep's record is results/<run>/tune/sweep.json (fabench.tune.pick); the section appears
when the run measured the sweep's variant."""

from __future__ import annotations

import math

from fabench.report.format import FAILURE_WORDS, fmt_ms, fmt_times, md_code, md_text, shape_text, value_text
from fabench.report.model import Run, role_backend
from fabench.analysis.figures import run_metric, shown_figure
from fabench.shapes import parse_shape_id


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def interval_text(ms: float | None, ci: list | None) -> str:
    return "n/a" if ms is None else f"{fmt_ms(ms)} [{fmt_ms(ci[0])}, {fmt_ms(ci[1])}]" if ci else fmt_ms(ms)


def triton_figure(run: Run, variant: str, shape: dict, device: bool) -> dict | None:
    """The Triton role's median and 95% CI in the benchmark's result, None where it did not run."""
    result = run.find(variant, shape)
    backend = role_backend(result, "triton") if result else None
    if backend is None or backend["status"] != "ok":
        return None
    stats = shown_figure(backend, "device_ms" if device else "wall_mean_ms")
    return {"ms": stats.get("median"), "ci": stats.get("ci95")} if stats.get("median") else None


def side_by_side(run: Run, reference: str, swept: str) -> dict:
    """Every variant's Triton time per main shape, the swept variant's speedup over the reference,
    and whether it is faster by more than the intervals allow (its interval wholly below)."""
    device = run_metric(run.results) == "device_ms"
    shapes = [r["shape"] for r in run.of(run.variants[0]) if r["shape"]["head_dim"] == run.main_head_dim]
    rows, pairs = [], []
    for shape in shapes:
        figures = {v: triton_figure(run, v, shape, device) for v in run.variants}
        ref, mine = figures.get(reference), figures.get(swept)
        row = [shape_text(shape)] + [interval_text(f["ms"], f["ci"]) if f else "n/a" for f in figures.values()]
        if ref and mine:
            pairs.append((ref, mine))
            row.append(f"{fmt_times(ref['ms'] / mine['ms'])}{beyond(ref, mine)}")
        else:
            row.append("n/a")
        rows.append(row)
    return {"figure": "device time" if device else "wall-clock time", "rows": rows,
            "variants": [md_text(run.variant_label(v)) for v in run.variants],
            "reference": md_text(run.variant_label(reference)), "swept": md_text(run.variant_label(swept)),
            "geomean": overall(pairs)}


def beyond(ref: dict, mine: dict) -> str:
    """' (beyond the intervals)' where the swept interval lies wholly below the reference's."""
    return " (beyond the intervals)" if ref["ci"] and mine["ci"] and mine["ci"][1] < ref["ci"][0] else ""


def overall(pairs: list[tuple[dict, dict]]) -> dict | None:
    """Geometric means over the shapes: of the medians, and of the interval ends that decide
    whether the swept variant is faster by more than the intervals allow."""
    if not pairs:
        return None
    ref = geomean([r["ms"] for r, _ in pairs])
    mine = geomean([m["ms"] for _, m in pairs])
    decided = all(r["ci"] and m["ci"] for r, m in pairs)
    return {"reference_ms": fmt_ms(ref), "swept_ms": fmt_ms(mine), "speedup": fmt_times(ref / mine),
            "beyond": decided and geomean([m["ci"][1] for _, m in pairs]) < geomean([r["ci"][0] for r, _ in pairs]),
            "shapes": len(pairs)}


def config_text(values: dict) -> str:
    return md_code(", ".join(f"{key}={value_text(value)}" for key, value in values.items()))


def dropped_text(record: dict) -> str:
    """Why a candidate has no time at a shape, in a few words."""
    if record["status"] == "pruned":
        check = record["pruned_check"]
        text = f"pruned: model {record['memory']['bytes']:,} B > {record['memory']['limit']:,} B"
        if check:
            text += "; compiled anyway" if check["compiled"] else f"; compile refused ({required_text(check)})"
        return text
    if record["status"] == "unavailable":
        return f"unavailable: {md_text(record['reason'])}"
    kind = record["failure_kind"]
    if kind == "out_of_resources":
        return f"out of resources ({required_text(record)}, model {record['memory']['bytes']:,} B)"
    words = FAILURE_WORDS.get(kind, "error")
    if kind == "correctness":
        err = (record.get("correctness") or {}).get("max_abs_err")
        return f"{words} (max abs err {err:.3g})" if err is not None else words
    return f"{words}: {md_text((record['reason'] or '')[:120])}"


def required_text(record: dict) -> str:
    required = record.get("required_bytes")
    return f"required {required:,} B" if required else md_text((record.get("reason") or "")[:80])


def cell_text(record: dict) -> str:
    if record["status"] == "ok":
        return interval_text(record["ms"], record["ci95"]) + ("" if record["stable"] in (True, None) else " (unstable)")
    return dropped_text(record)


def stage_table(stage: dict) -> dict:
    rows = []
    for entry in stage["ranking"]:
        records = stage["records"][entry["id"]]
        name = md_code(entry["id"]) + (" (reference)" if entry["reference"] else "")
        score = fmt_times(entry["score"]) if entry["score"] is not None else "dropped"
        rows.append([name, score] + [cell_text(records[s]) for s in stage["shapes"]])
    elapsed = sum(stage["elapsed_s"].values())
    return {"stage": stage["stage"], "shapes": [shape_text(parse_shape_id(s)) for s in stage["shapes"]],
            "rows": rows, "count": len(rows), "elapsed_s": f"{elapsed:.0f}"}


def per_shape_rows(sweep: dict) -> list[list[str]]:
    winner = sweep["winner"]
    return [[shape_text(parse_shape_id(s)), md_code(best["id"]), interval_text(best["ms"], best["ci95"]),
             fmt_times(best["speedup"]), fmt_times(winner["speedups"].get(s))]
            for s, best in sweep["per_shape_best"].items()]


def model_rows(rows: list[dict]) -> list[str]:
    return [f"{md_code(r['id'])} at {shape_text(parse_shape_id(r['shape_id']))}: model {r['model_bytes']:,} B"
            + (f", required {r['required_bytes']:,} B" if r.get("required_bytes") else "")
            + (f" ({md_text(r['reason'][:120])})" if r.get("reason") else "") for r in rows]


def model_check(check: dict) -> dict:
    ratio = check["kernel_over_model"]
    return {"limit": f"{check['limit']:,}" if check["limit"] else None, "pruned": check["pruned"],
            "checked": check["checked"], "confirmed": check["confirmed"],
            "compiled_anyway": model_rows(check["compiled_anyway"]),
            "failed_otherwise": model_rows(check["failed_otherwise"]),
            "refused_within_model": model_rows(check["refused_within_model"]),
            "ran_over_model": model_rows(check["ran_over_model"]),
            "kernels": check["kernels_measured"],
            "ratio": f"{ratio[0]:.2f} to {ratio[1]:.2f}" if ratio else None}


def context(run: Run, published: dict | None) -> dict | None:
    sweep = run.sweep
    if not sweep:
        return None
    name, reference = sweep["variant"]["name"], sweep["reference_variant"]
    winner = sweep["winner"]
    return {
        "title": md_text(sweep["variant"]["title"]), "device": md_text(sweep["device"]),
        "platform": sweep["platform"], "strategy": sweep["strategy"], "objective": sweep["objective"],
        "reference": md_text(reference), "space": config_text({k: v for k, v in sweep["space"].items()}),
        "not_applied": [f"{md_code(k)}: {md_text(why)}" for k, why in sweep["not_applied"].items()],
        "timing": sweep["timing"], "elapsed_s": f"{sweep['elapsed_s']:.0f}",
        "winner": {"id": md_code(winner["id"]), "config": config_text(winner["overrides"]),
                   "score": fmt_times(winner["score"]), "is_reference": winner["reference"]},
        "measured": name in run.variants and reference in run.variants,
        "side_by_side": side_by_side(run, reference, name) if name in run.variants else None,
        "per_shape": per_shape_rows(sweep), "model": model_check(sweep["model_check"]),
        "stages": [stage_table(stage) for stage in sweep["stages"]],
    }
