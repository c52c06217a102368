"""How precise is this run: the noise floor the run measured on itself (the spread of its trials),
the cells whose trials disagreed, and how the device figures compare with the peer method.
Everything comes from the trials each result recorded; nothing is estimated here."""

from __future__ import annotations

from fabench.analysis.result_types import Method, cell_stats
from fabench.report.format import backend_name, md_text, shape_text
from fabench.report.model import Run
from fabench.analysis import stats
from fabench.analysis.figures import run_metric, shown_figure
from fabench.report.sections.timing import interval_names
from fabench.analysis.components import run_components
from fabench.analysis.identity import PairType, hardware_identity


def measured_cells(run: Run):
    """(result, name, backend) for every backend that ran cleanly and recorded trials."""
    for result, name, backend in run.ran_backends():
        if backend["status"] == "ok" and cell_stats(backend):
            yield result, name, backend


def cell_text(run: Run, result: dict, name: str, backend: dict) -> str:
    return f"{md_text(run.variant_label(result['variant']))}, {shape_text(result['shape'])}, {backend_name(name, backend)}"


def noise_floor(run: Run, device: bool) -> dict | None:
    """Median and worst spread (max/min - 1) of the trials over every measured cell."""
    spreads = [(shown_figure(b, "device_ms" if device else "wall_mean_ms").get("spread"), r, n, b) for r, n, b in measured_cells(run)]
    spreads = [s for s in spreads if s[0] is not None]
    if not spreads:
        return None
    worst = max(spreads, key=lambda s: s[0])
    return {"cells": len(spreads), "median": f"{stats.median([s[0] for s in spreads]) * 100:.2f}%",
            "worst": f"{worst[0] * 100:.2f}%", "worst_cell": cell_text(run, *worst[1:])}


def unstable_cells(run: Run) -> list[dict]:
    return [{"cell": cell_text(run, r, n, b), "why": md_text(cell_stats(b).unstable_reason or "no reason given")}
            for r, n, b in measured_cells(run) if not cell_stats(b).stable]


def cross_checks(run: Run) -> dict | None:
    """How many device figures do_bench confirmed, and the cells it did not (or could not judge)."""
    checks = [(r, n, b, b.get("cross_check") or {}) for r, n, b in measured_cells(run) if b.get("cross_check")]
    if not checks:
        return None
    agreeing = sum(1 for *_, c in checks if c.get("agrees") is True)
    others = [{"cell": cell_text(run, r, n, b), "verdict": "differs" if c.get("agrees") is False else "not judged",
               "why": md_text(c.get("reason") or "")} for r, n, b, c in checks if c.get("agrees") is not True]
    return {"total": len(checks), "agreeing": agreeing, "others": others}


def trial_counts(run: Run) -> dict:
    methods = [Method.of(r) for r in run.results]
    ci_methods = (cell_stats(b).raw.get("ci_method") for *_, b in measured_cells(run))
    return {"trials": sorted({m.trials for m in methods if m.trials}),
            "repeats": sorted({m.repeats for m in methods if m.repeats}),
            "ci_methods": list(dict.fromkeys(m for m in ci_methods if m))}


def one_process_cells(run: Run, device: bool) -> int:
    """How many cells' noise comes from the trials of one process (no second process per job):
    their run cannot estimate the noise between processes, so it has no prediction interval."""
    metric = "device_ms" if device else "wall_mean_ms"
    return sum(1 for *_, b in measured_cells(run)
               if (shown_figure(b, metric).get("noise") or {}).get("between") == "trials")


def noise_components(run: Run) -> dict:
    """The noise model's components as this run states them (fabench.analysis.components): its own
    within a process, between processes and between its cards, and from the calibration, per kind of
    pair, the smallest change a comparison with another run can see (the pair type's margin)."""
    own = run_components(run.results)
    identity = hardware_identity(run.results)

    def pct(value):
        return None if value is None else f"{value:.2%}"
    # One process a job has no second process to spread from: the components' figure there is the
    # trials' own spread again, not one between processes.
    one_process = all((Method.of(r).repeats or 1) == 1 for r in run.results)
    return {"within": pct(own["within_process"]), "between": None if one_process else pct(own["between_process"]),
            "cards": pct(own["between_card_in_run"]),
            "margins": ", ".join(f"{kind} {pct(margin)}" for kind, margin in run.rule.margins().items()),
            "fit": run.rule.fit,
            "calibrated": run.rule.calibrated_on(identity)}


def context(run: Run, published: dict | None) -> dict | None:
    if not any(True for _ in measured_cells(run)):
        return None  # nothing recorded trials (e.g. published numbers recast as a run)
    device = run_metric(run.results) == "device_ms"
    return {"figure": "device time" if device else "wall-clock time", "floor": noise_floor(run, device),
            "one_process": one_process_cells(run, device),
            "margin": f"{run.rule.for_pair(PairType.SAME_CARD).margin:.2%} (another run on the same card)",
            "intervals": [md_text(n) for n in interval_names(run, device)],
            "unstable": unstable_cells(run), "cross_check": cross_checks(run), "components": noise_components(run),
            **trial_counts(run)}
