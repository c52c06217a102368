"""A run's and a comparison's findings as data: results.json's `summary` and compare.json's
`summary`, for scripts and notebooks that would otherwise parse the pages' prose. Their JSON
Schemas: fabench/schemas/run_summary.schema.json and compare_summary.schema.json.

Each value is the one the page's summary states (fabench.report.sections.summary), on the same
policy verdicts, in plain values (backend names as the results key them, shape ids, codes):

    run          per (variant, shape) shown in the report's tables, the fastest backend by the judged
                 figure, whether the policy names the leaders faster than the next (`faster`) or
                 cannot tell (`cannot tell`, with its reason codes), the next's figure over the
                 fastest's in the figure the table shows
                 (`statistic`) and the variant whose jobs measured the cells; per shape, the Triton
                 role's last variant against its first; the published claims' verdicts; how many of
                 the summary's questions the run decided
    compare      the newest judged pair's verdict counts (by kind, and by reason where it cannot
                 tell), the largest change, the answered share and the flagged cells
"""

from __future__ import annotations

from fabench.analysis.figures import run_metric
from fabench.analysis.result_types import backend_dicts
from fabench.report.model import Run
from fabench.report.sections import compare_summary as compared, published_claims, results, summary

FORMAT = 1
# The figure each judged metric is shown as in the report's tables (summary.TABLE_FIGURES), as a key.
STATISTICS = {"device_ms": "device_ms.median", "wall_mean_ms": "wall_mean_ms"}
# What a flagged cell keeps in the summary (compare.json's `flags` holds each in full, with its words).
FLAG_KEYS = ("code", "variant", "shape_id", "backend", "entry", "against", "against_kind", "ratio")


def shape_finding(run: Run, result: dict, metric: str) -> dict:
    """The fastest backend of one (variant, shape) and what the policy says of its lead."""
    ranked = summary.ranked_backends(result, metric)
    leaders = summary.shape_leaders(run, result, metric)
    found = {"variant": result["variant"], "shape_id": result["shape_id"], "judged_on": metric,
             "statistic": STATISTICS[metric], "fastest": ranked[0][0] if ranked else None,
             "leaders": [ranked[0][0]] if ranked else [], "verdict": "one backend" if len(ranked) == 1 else "none ran",
             "next": None, "ratio": None, "reasons": [], "measured_in": {}}
    if leaders is None:
        return found
    verdict = "faster" if leaders["beaten"] else "cannot tell"
    slower = leaders["beaten"] or ranked[1][0]  # untold: the next by the judged figure, not named slower
    ratio = leaders["ratio"]
    if ratio is None:
        ratio = summary.table_ratio(backend_dicts(result)[slower], backend_dicts(result)[ranked[0][0]], metric)
    return {**found, "leaders": leaders["leaders"], "verdict": verdict, "next": slower, "ratio": ratio,
            "reasons": list(dict.fromkeys(leaders["untold"])), "measured_in": leaders["measured_in"]}


def tuning_findings(run: Run) -> dict | None:
    """The Triton role's last variant against its first, per shape: the ratio of the table's figure
    (first over last: above 1 a gain) and the policy's claim. None with one variant."""
    if len(run.variants) < 2:
        return None
    first, last = run.variants[0], run.variants[-1]
    found = {"first": first, "last": last, "backend": run.first["roles"]["triton"],
             "same_code": results.same_code_variants(run), "shapes": []}
    for shape, before, after in results.triton_pairs(run):
        claim = run.claim(before, after, names=(first, last))
        metric = claim["metric"]
        found["shapes"].append({
            "shape_id": run.find(last, shape)["shape_id"], "judged_on": metric,
            "statistic": STATISTICS.get(metric), "claim": claim["claim"], "code": claim["code"] and str(claim["code"]),
            "faster": {"a": first, "b": last}.get(claim["faster"]),
            "ratio": summary.table_ratio(before, after, metric) if metric in STATISTICS else None})
    return found


def claim_findings(run: Run, published: dict | None) -> list[dict] | None:
    """Each published claim re-tested: its id, the published statement, holds / fails / cannot tell
    and why it cannot be told."""
    section = published_claims.context(run, published)
    if section is None:
        return None
    return [{"id": claim["id"], "published": claim["published"], "outcome": row["outcome"], "cause": row["cause"]}
            for claim, row in zip(published["claims"], section["rows"])]


def run_summary(collected: dict, config: dict, published: dict | None = None) -> dict | None:
    """results.json's `summary`: the run's findings (module docstring); None for a publication's
    numbers recast as a run."""
    run = Run(collected, config)
    if run.published:
        return None
    metric = run_metric(run.results)
    page = summary.context(run, published)
    return {"format": FORMAT, "judged_on": metric, "statistic": STATISTICS[metric],
            "fastest": [shape_finding(run, result, metric) for result in run.results],
            "tuning": tuning_findings(run), "claims": claim_findings(run, published),
            "decided": {k: page["decided"][k] for k in ("asked", "answered")}}


def compare_summary(comparison: dict) -> dict:
    """compare.json's `summary`: the newest judged pair's verdicts (None with one run), the answered
    share and the flagged cells."""
    pair = None
    if len(comparison["entries"]) >= 2:
        old, new, passed_over = compared.judged_pair(comparison)
        verdicts = compared.pair_verdicts(comparison, old, new)
        counts, untold = compared.verdict_counts(verdicts)
        largest = compared.largest_change(verdicts)
        pair = {"old": old, "new": new, "cells": len(verdicts), "counts": counts, "untold": untold,
                "passed_over": passed_over,
                "largest": largest and {"variant": largest[0]["variant"], "shape_id": largest[0]["shape_id"],
                                        "backend": largest[0]["backend"], "ratio": largest[1]["ratio"],
                                        "code": str(largest[1]["code"])}}
    return {"format": FORMAT, "pair": pair, "answers": comparison.get("answers"),
            "flagged": [{k: flag.get(k) for k in FLAG_KEYS} for flag in comparison["flags"]]}
