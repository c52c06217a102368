"""The noise model's components, each estimated from data (relative: standard deviations of log time).

A cell's figure in a run is the median over its processes of each process's median over its trials.
Model, in log space, of one process's median of one cell:
    true time + card effect + run effect + process effect + the mean of its trials' noise
  within_process   the spread of a process's trials about their median (timer, launch jitter; it
                   reaches a run's figure only through the process medians);
  between_process  the spread of a run's process medians about the run's figure: what `repeats`
                   measure and the run's own intervals carry (fabench.analysis.noise, pooled over
                   the cells nearest in duration);
  between_run      a shift of a whole run on one card, the same in each of its processes: its
                   clocks, thermal and power state, compiled code. A run cannot see it by itself;
                   it is what two runs of one experiment on one card differ by beyond their
                   process noise;
  between_card     a shift of one card of the model against another (the card identity is recorded
                   per process: method.process_exits[].gpu_uuid): what two runs on other cards
                   differ by beyond the between-run part.
Two runs' change d = log(new / old) then has variance
    sigma_old^2 / P_old + sigma_new^2 / P_new + 2 between_run^2 [+ 2 between_card^2 when their cards differ]
(fabench.analysis.policy.change_noise). between_run and between_card come from repeats of one
experiment on one hardware key: pooled over the cells of those pairs (method of moments: the mean
excess of d^2 over the process part), because two or three runs give a cell one or two degrees of
freedom of its own; `per_cell` gives the cells' own estimates beside it, with their pairs.
"""

from __future__ import annotations

import math
from itertools import combinations

from fabench.analysis import stats
from fabench.analysis.figures import cell_metric
from fabench.analysis.identity import (code_differences, experiment_differences, hardware_identity, same_card,
                                       same_hardware)

# A cell's own between-run estimate is shown from this many repeat pairs of it.
OWN_PAIRS = 2


def process_cards(result: dict) -> dict[int, str | None]:
    """process index -> the card (GPU UUID) it ran on, from its recorded exit (older results: the
    run's card)."""
    exits = (result.get("method") or {}).get("process_exits") or []
    card = ((result.get("provenance") or {}).get("gpu") or {}).get("uuid")
    return {e.get("index", i): e.get("gpu_uuid") or card for i, e in enumerate(exits)}


def within_process(trials: list[dict], metric: str) -> tuple[float, int]:
    """(log variance of the trials about their process's mean, degrees of freedom), pooled over processes."""
    by_process: dict = {}
    for t in trials:
        if t.get(metric):
            by_process.setdefault(t.get("process", 0), []).append(math.log(t[metric]))
    groups = [v for v in by_process.values() if len(v) > 1]
    df = sum(len(v) - 1 for v in groups)
    if not df:
        return math.nan, 0
    return sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in groups) / df, df


def _ok_cells(results: list[dict]) -> dict[tuple, tuple[dict, dict]]:
    return {(r["variant"], r["shape_id"], name): (entry, r) for r in results for name, entry in r["backends"].items()
            if entry["status"] == "ok"}


def run_components(results: list[dict]) -> dict:
    """One analysed run's own components: within_process and between_process (sd, median over its
    stable cells), and between cards inside the run where its processes ran on several
    (between_card_in_run: the median |log| gap between the cards' process medians of a cell, and
    the same gap between two processes on one card, for scale)."""
    within, between, card_gaps, same_gaps = [], [], [], []
    for entry, result in _ok_cells(results).values():
        metric = entry["stats"].get("judged")
        figure = entry["stats"].get(metric) or {}
        if not metric or not entry["stats"].get("stable", True) or not figure.get("noise"):
            continue
        variance, df = within_process(entry.get("trials") or [], metric)
        if df:
            within.append(math.sqrt(variance))
        between.append(figure["noise"]["sigma"])
        cards = process_cards(result)
        medians = {}
        for t in entry.get("trials") or []:
            if t.get(metric):
                medians.setdefault(t.get("process", 0), []).append(t[metric])
        medians = {p: stats.median(v) for p, v in medians.items()}
        for p, q in combinations(sorted(medians), 2):
            gap = abs(math.log(medians[q] / medians[p]))
            (same_gaps if cards.get(p) == cards.get(q) else card_gaps).append(gap)
    def med(values):
        return stats.median(values) if values else None
    return {"within_process": med(within), "between_process": med(between), "cells": len(between),
            "between_card_in_run": med(card_gaps), "card_pairs": len(card_gaps),
            "same_card_process_gap": med(same_gaps)}


def _excess(a: list[dict], b: list[dict]) -> dict[tuple, float]:
    """Per cell stable in both runs and of the same code, d^2 minus its process part."""
    x, y = _ok_cells(a), _ok_cells(b)
    found = {}
    for key in sorted(set(x) & set(y)):
        (old, _), (new, _) = x[key], y[key]
        if code_differences(old, new) or not (old["stats"].get("stable", True) and new["stats"].get("stable", True)):
            continue
        metric = cell_metric(old, new)
        fa, fb = (old["stats"].get(metric) or {}, new["stats"].get(metric) or {}) if metric else ({}, {})
        if not (fa.get("noise") and fb.get("noise")):
            continue
        d = math.log(fb["median"] / fa["median"])
        found[key] = d * d - sum(f["noise"]["sigma"] ** 2 / f["noise"]["replicates"] for f in (fa, fb))
    return found


def _sd(excess: list[float]) -> float | None:
    """The component's sd from the excesses of d^2 (each 2 component^2 in expectation), 0 where
    the process part explains them all."""
    return math.sqrt(max(sum(excess) / len(excess) / 2, 0.0)) if excess else None


def between_runs(runs: list[tuple[str, list[dict]]]) -> dict:
    """between_run (pairs on one card) and between_card (pairs on other cards, less the between-run
    part) from every pair of analysed runs of one experiment on one hardware key, pooled over their
    cells; with the pairs and cells they rest on, and per cell (`per_cell`: "variant shape backend"
    -> {sd, pairs}) each cell's own estimate where it has OWN_PAIRS pairs or more of one kind."""
    identity = {run_id: hardware_identity(results) for run_id, results in runs}
    same, other, per_cell = [], [], {}
    pairs = {"same card": 0, "other card": 0}
    for (i, a), (j, b) in combinations(runs, 2):
        if not same_hardware(identity[i], identity[j]) or experiment_differences(a, b):
            continue
        one_card = same_card(identity[i], identity[j])
        pairs["same card" if one_card else "other card"] += 1
        for key, value in _excess(a, b).items():
            (same if one_card else other).append(value)
            per_cell.setdefault((" ".join(key), one_card), []).append(value)
    run_sd = _sd(same)
    other_sd = _sd(other)
    card_sd = None if other_sd is None else math.sqrt(max(other_sd ** 2 - (run_sd or 0.0) ** 2, 0.0))
    own = {cell: {"sd": _sd(values), "pairs": len(values), "cards": "same" if one_card else "other"}
           for (cell, one_card), values in per_cell.items() if len(values) >= OWN_PAIRS}
    return {"between_run": run_sd, "between_card": card_sd, "pairs": pairs,
            "cells": {"same card": len(same), "other card": len(other)}, "per_cell": own}
