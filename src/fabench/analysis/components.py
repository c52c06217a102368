"""The noise model's components, each estimated from data (relative: standard deviations of log time).

A cell's figure in a run is the median over its processes of each process's median over its trials.
Model, in log space, of one process's median of one cell:
    true time + the run's effect on this cell + its card's effect on this cell + process effect
                + the mean of its trials' noise
  within_process   the spread of a process's trials about their median (timer, launch jitter; it
                   reaches a run's figure only through the process medians);
  between_process  the spread of a run's process medians about the run's figure: what `repeats`
                   measure and the run's own intervals carry (fabench.analysis.noise, pooled over
                   the cells nearest in duration);
  unseen           what two runs of one experiment differ by in a cell beyond both runs' process
                   noise: the run's state (clocks, power, compiled code) and, across cards, the
                   card's effect on that kernel. It is per cell, not one shift per run or card: on
                   two H200 cards FlashAttention-4 at seq 512 read +1.8% while SDPA read -0.9%.
                   No run sees it by itself; its size depends on the kind of pair
                   (identity.PairType: the same card, another card of the host, another host, a run
                   over several cards of one host or of two), and cells held at a power cap
                   (stats.capped) have their own.
Two runs' change d = log(new / old) then has variance
    scale * (sigma_old^2 / P_old + sigma_new^2 / P_new) + unseen(pair type, class)
(fabench.analysis.policy.change_noise). `fit` estimates unseen per pair type and class from repeats
of one experiment on one GPU model: the mean over their cells of d^2 less the process part (method
of moments), with the uncertainty of that mean from a bootstrap over RUNS (the unit whose state is
shared by all of a run's cells and pairs), turned into degrees of freedom (chi-square: df = 2 U^2 /
se(U)^2) that the verdicts carry (stats.welch_df), so a component fitted on few runs widens what it
judges; where the process part over-explains the changes, `scale` narrows it instead.
"""

from __future__ import annotations

import math
import statistics
from itertools import combinations

from fabench.analysis import stats
from fabench.analysis.figures import compared_metric
from fabench.analysis.result_types import (backend_dicts, cell_stats, figure_record, method_of, provenance_of,
                                           recorded_trials)
from fabench.analysis.identity import (PairType, code_differences, experiment_differences, hardware_identity,
                                       hosts_of, pair_type)

def process_cards(result: dict) -> dict[int, str | None]:
    """process index -> the card (GPU UUID) it ran on, from its recorded exit (older results: the
    run's card)."""
    exits = method_of(result).get("process_exits") or []
    card = (provenance_of(result).get("gpu") or {}).get("uuid")
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
    return {(r["variant"], r["shape_id"], name): (entry, r) for r in results for name, entry in backend_dicts(r).items()
            if entry["status"] == "ok"}


def run_components(results: list[dict]) -> dict:
    """One analysed run's own components: within_process and between_process (sd, median over its
    stable cells), and between cards inside the run where its processes ran on several
    (between_card_in_run: the median |log| gap between the cards' process medians of a cell, and
    the same gap between two processes on one card, for scale)."""
    within, between, card_gaps, same_gaps = [], [], [], []
    for entry, result in _ok_cells(results).values():
        summary = cell_stats(entry)
        metric = summary.get("judged")
        figure = summary.metric(metric) if metric else None
        if not metric or not summary.stable or not figure or not figure.noise:
            continue
        variance, df = within_process(recorded_trials(entry) or [], metric)
        if df:
            within.append(math.sqrt(variance))
        between.append(figure.noise.sigma)
        cards = process_cards(result)
        medians = {}
        for t in recorded_trials(entry) or []:
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


CLASSES = ("steady", "capped")
BOOTSTRAP_DRAWS = 400
BOOTSTRAP_SEED = 20261128
# Degrees of freedom are capped here: past it the t quantile no longer moves.
MAX_DF = 1000
# A pair type is fitted from at least this many runs: a bootstrap over fewer cannot see how much
# one pair's shift weighs (two runs make one pair, resampled into itself).
MIN_RUNS = 3
# ... and from at least this many sets of cards (the cards of a pair's two runs): across cards, the
# noise a type adds is the cards' effects on each kernel, and one pair of cards is one draw of them
# however many runs it holds (two H200 hosts' pairs of cards differed several-fold:
# examples/h200-x2-acceptance-2026-11-28).
MIN_CARD_SETS = 3
MARGIN_STEP = 0.0005
# The least share of the process part a fit may keep: below it the runs' own noise estimate would
# be said to be four times too wide, which no fit of a few runs can tell from chance.
MIN_SCALE = 0.25
DEFAULT_ANSWERED = 0.85  # a fit's answered_target names its own per pair type (calibrations.yaml)


def cell_class(*entries: dict) -> str:
    """"capped" where either run's cell was held at a power cap (entry.stability), else "steady"."""
    return "capped" if any(s.capped for s in map(cell_stats, entries) if s) else "steady"


def cell_excess(a: list[dict], b: list[dict]) -> dict[tuple, tuple[float, str, tuple[float, int]]]:
    """Per cell ok and stable in both runs, of the same code and with a noise estimate in both:
    (d^2 less its process part, its class, the process part (variance, degrees of freedom))."""
    x, y = _ok_cells(a), _ok_cells(b)
    found = {}
    for key in sorted(set(x) & set(y)):
        (old, _), (new, _) = x[key], y[key]
        if code_differences(old, new) or not (cell_stats(old).stable and cell_stats(new).stable):
            continue
        metric = compared_metric(old, new)
        fa, fb = (figure_record(old, metric) or {}, figure_record(new, metric) or {}) if metric else ({}, {})
        if not (fa.get("noise") and fb.get("noise")):
            continue
        d = math.log(fb["median"] / fa["median"])
        process = sum(f["noise"]["sigma"] ** 2 / f["noise"]["replicates"] for f in (fa, fb))
        klass = cell_class(old, new) if metric == "device_ms" else "steady"  # cycles: the cap's clock taken out
        found[key] = (d * d - process, klass, (process, min(fa["noise"]["df"], fb["noise"]["df"])))
    return found


def comparable_pairs(runs: list[tuple[str, list[dict]]]) -> list[dict]:
    """Every pair of the runs of one GPU model and one experiment: {old, new, type, cards (both runs'
    cards), cells: {cell: (excess, class)}}; the pair types told with the hosts of all the runs
    given (identity.hosts_of)."""
    identity = {run_id: hardware_identity(results) for run_id, results in runs}
    hosts = hosts_of(list(identity.values()))
    found = []
    for (i, a), (j, b) in combinations(runs, 2):
        kind = pair_type(identity[i], identity[j], hosts)
        if kind is None or experiment_differences(a, b):
            continue
        found.append({"old": i, "new": j, "type": kind, "cards": frozenset(identity[i]["cards"] + identity[j]["cards"]),
                      "cells": cell_excess(a, b)})
    return found


def _means(pairs: list[dict], weights: dict[str, int], kind: str, klass: str) -> tuple[float, float, int]:
    """(the weighted mean excess of the type's and class's cells, their mean process part, cells
    counted); each pair weighted by the product of its runs' weights (a bootstrap draw's
    multiplicities; 1 for the data)."""
    excess = process = count = 0.0
    for pair in pairs:
        weight = weights.get(pair["old"], 0) * weights.get(pair["new"], 0)
        if pair["type"] != kind or not weight:
            continue
        chosen = [(e, part[0]) for e, c, part in pair["cells"].values() if c == klass]
        excess += weight * sum(e for e, _ in chosen)
        process += weight * sum(p for _, p in chosen)
        count += weight * len(chosen)
    return (excess / count, process / count, int(count)) if count else (math.nan, math.nan, 0)


def fit(runs: list[tuple[str, list[dict]]], equivalence_alpha: float = 0.05,
        answered_target: dict[str, float] | None = None) -> dict:
    """The noise two runs of each pair type differ by beyond their own, from every comparable pair of
    the runs: {type: {class: {noise (sd, log), df, scale, pairs, runs, cells}, margin per class}}.

    Where the runs' process part explains more than the changes seen (the mean excess below zero:
    the pooled process noise is an upper estimate, its floor and the order-statistic bound widen it),
    the unseen noise is 0 and `scale` (below 1, at least MIN_SCALE) is the share of the process part
    the changes show: the prediction is made that much narrower, so it is right both ways; else
    `scale` is 1. A type is absent where fewer than MIN_RUNS runs give it (too few to resample), or,
    across cards, fewer than MIN_CARD_SETS sets of cards (its verdicts take a wider type's values,
    calibration.FALLS_BACK); a class is absent where no cell gives it.
    The degrees of freedom of the unseen noise from a seeded bootstrap over runs (BOOTSTRAP_DRAWS
    draws): the runs resampled with replacement, each pair of two distinct runs weighted by their
    multiplicities. Each class's margin: fitted_margin on its cells, for the pair type's share of
    them to be answered (`answered_target`, per pair type; DEFAULT_ANSWERED where it names none)."""
    pairs = comparable_pairs(runs)
    run_ids = [run_id for run_id, _ in runs]
    draws = stats.run_draws(run_ids, BOOTSTRAP_DRAWS, BOOTSTRAP_SEED)
    out: dict = {}
    for kind in PairType:
        of_kind = [p for p in pairs if p["type"] == kind]
        if len({r for p in of_kind for r in (p["old"], p["new"])}) < MIN_RUNS or (
                kind != PairType.SAME_CARD and len({p["cards"] for p in of_kind}) < MIN_CARD_SETS):
            continue
        target = (answered_target or {}).get(str(kind), DEFAULT_ANSWERED)
        for klass in CLASSES:
            found = _fit_class(pairs, draws, kind, klass, equivalence_alpha, target)
            if found is not None:
                out.setdefault(str(kind), {})[klass] = found
    return out


def _fit_class(pairs: list[dict], draws: list[dict[str, int]], kind: PairType, klass: str,
               equivalence_alpha: float, answered_target: float) -> dict | None:
    """One pair type's and class's fitted values (see fit); None where no cell gives them."""
    ones = dict.fromkeys({r for p in pairs for r in (p["old"], p["new"])}, 1)
    excess, process, cells = _means(pairs, ones, kind, klass)
    if not cells:
        return None
    of_kind = [p for p in pairs if p["type"] == kind and any(c == klass for _, c, _ in p["cells"].values())]
    again = [m for m in (_means(pairs, w, kind, klass)[0] for w in draws) if not math.isnan(m)]
    found = {**_unseen(excess, process, statistics.pstdev(again) if len(again) > 1 else math.inf),
             "pairs": len(of_kind), "runs": len({r for p in of_kind for r in (p["old"], p["new"])}), "cells": cells}
    chosen = [cell for p in of_kind for _, c, cell in p["cells"].values() if c == klass]
    found["margin"] = fitted_margin(chosen, found, equivalence_alpha, answered_target)
    return found


def _unseen(excess: float, process: float, se: float) -> dict:
    """{noise, df, scale} from a mean excess, the mean process part and the excess's standard error
    over bootstrap draws of the runs (chi-square degrees of freedom: 2 U^2 / se^2)."""
    unseen = max(excess, 0.0)
    scale = 1.0 if excess >= 0 else max(MIN_SCALE, (excess + process) / process)
    df = min(MAX_DF, 2 * unseen ** 2 / se ** 2) if unseen and se else (MAX_DF if unseen else 0.0)
    return {"noise": math.sqrt(unseen), "df": round(max(df, 1.0), 1) if unseen else None, "scale": round(scale, 3)}


def fitted_margin(cells: list[tuple[float, int]], fitted: dict, equivalence_alpha: float,
                  answered_target: float) -> float:
    """The smallest margin (a step of MARGIN_STEP) at which the rule's equivalence test is expected to
    call `answered_target` of these unchanged cells the same: each cell's change d ~ N(0, sd) with
    sd^2 its process part (times the fit's scale) plus the unseen noise, and same when |d| +
    t(1 - equivalence_alpha, df) sd lies within log(1 + margin). Fitted on the model, not on the
    cells' observed changes, so the runs a fit was made on do not choose it by their own draws."""
    unseen, unseen_df = fitted["noise"] ** 2, fitted["df"]

    def expected_same(margin: float) -> float:
        bound, total = math.log1p(margin), 0.0
        for process, df in cells:
            sd = math.sqrt(fitted["scale"] * process + unseen)
            both = stats.welch_df([(fitted["scale"] * process, df),
                                   (unseen, math.inf if unseen_df is None else unseen_df)])
            room = bound / sd - stats.t_quantile(1 - equivalence_alpha, both)
            total += max(0.0, 2 * statistics.NormalDist().cdf(room) - 1)
        return total / len(cells)

    steps = 1
    while expected_same(steps * MARGIN_STEP) < answered_target and steps * MARGIN_STEP < 0.5:
        steps += 1
    return round(steps * MARGIN_STEP, 6)
