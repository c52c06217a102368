"""How good is the change detector on real runs: its sensitivity, its false alarms, how often it
answers, and the calibration of the prediction interval, measured on archived runs of one
experiment with exactly the comparison policy (fabench.analysis.policy) `snakemake compare`
applies with the user's config.

For every pair of runs on the same hardware model (platform, GPU model, architecture), each pair
once (the older run as old):
- false alarms: the cells the policy calls changed between two runs of the same experiment,
  split by whether the two ran on the same card (a CPU: the same host) or on two cards of the model;
- answers: the share of stable cells the policy calls same or changed (not "cannot tell");
- calibration: the cells whose median in one run lies outside the other run's 95% prediction
  interval (each way), against the binomial bound for the nominal 5%;
- sensitivity: each run of the pair in turn with a known change injected (every trial's figures
  scaled, then the run analysed again, so its pooled noise is re-estimated too), and the share of
  stable cells the policy flags as a regression.
asv's rule and nvbench's robust compare (fabench.analysis.peers) judge the same pairs, from the
same trials. Cells that ran other code in the two runs (policy.same_code) are no repeat of each
other: they are counted apart, not judged. `done_when` holds the acceptance figures of issue 23.
"""

from __future__ import annotations

import copy
from itertools import combinations

from fabench.analysis import peers, policy, stats
from fabench.analysis.figures import cell_metric, trial_values
from fabench.analysis.noise import LEVEL, analyse_run
from fabench.analysis.policy import Code, Rule

INJECTED = (0.02, 0.05)
# What a trial records that a slower kernel would move with it (the analysis derives the rest).
SCALED_KEYS = ("device_ms", "wall_mean_ms", "do_bench_ms", "profiler_ms")
NOMINAL_MISS = 1 - LEVEL
RULES = ("ours", "asv", "nvbench")
ANSWERS = ("same", "changed")
# The acceptance figures: at least this share answered, at most so many false alarms per 100 cells,
# at least this share of stable cells flagged for each injected change.
DONE_WHEN = {"answered": 0.90, "false_alarms_same_card": 1.0, "false_alarms_other_card": 2.0,
             "+2%": 0.90, "+5%": 1.0}

def cells_of(results: list[dict]) -> dict[tuple, dict]:
    """(variant, shape_id, backend) -> analysed backend entry, for every ok backend."""
    return {(r["variant"], r["shape_id"], name): entry for r in results for name, entry in r["backends"].items()
            if entry["status"] == "ok"}


def injected(results: list[dict], factor: float) -> list[dict]:
    """The run with every trial's time figures scaled by `factor`, analysed again."""
    out = copy.deepcopy(results)
    for result in out:
        for entry in result["backends"].values():
            for trial in entry.get("trials") or []:
                for key in SCALED_KEYS:
                    if trial.get(key) is not None:
                        trial[key] *= factor
                for key in ("profiler_calls_ms", "device_samples_ms", "kernel_samples_ms", "period_events_ms", "period_profiled_events_ms",
                            "period_cupti_ms"):
                    if trial.get(key):
                        trial[key] = [v * factor for v in trial[key]]
                graph = trial.get("kernel_time_graph") or {}
                if graph.get("per_call_ms"):  # the kernels' own time by graphs moves with them
                    trial["kernel_time_graph"] = {**graph, "per_call_ms": [v * factor for v in graph["per_call_ms"]]}
    return analyse_run({"results": out})["results"]


def binomial_bound(n: int, rate: float = NOMINAL_MISS, level: float = 0.95) -> int:
    """The most misses among n cells a calibrated interval (miss rate `rate`) is expected to
    show: the smallest k with P(Bin(n, rate) > k) <= 1 - level (5 for 50 cells at 5%)."""
    k = 0
    while k < n and stats.binomial_tail(k + 1, n, rate) > 1 - level:
        k += 1
    return k


def pair_check(old_id: str, old: list[dict], new_id: str, new: list[dict], hardware: tuple[dict, dict],
               injected_runs: dict, rule: Rule) -> dict:
    a, b = cells_of(old), cells_of(new)
    shared = sorted(set(a) & set(b))
    other_code = [k for k in shared if not policy.same_code(a[k], b[k])]
    repeats = [k for k in shared if k not in other_code]
    judged, stable, answered, outside, pi_checks = 0, 0, 0, 0, 0
    alarms = dict.fromkeys(RULES, 0)
    for key in repeats:
        metric = cell_metric(a[key], b[key])
        if metric is None:
            continue
        judged += 1
        for one, other in ((a[key], b[key]), (b[key], a[key])):
            miss = outside_pi(one, other, metric)
            pi_checks += miss is not None
            outside += bool(miss)
        verdict = policy.judge(a[key], b[key], rule, (old_id, new_id), hardware, expect_same_code=True)
        alarms["ours"] += verdict["verdict"] == "changed"
        if verdict["code"] != Code.UNSTABLE:
            stable += 1
            answered += verdict["verdict"] in ANSWERS
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(b[key]["trials"], metric)[0]
        alarms["asv"] += peers.asv_changed(x, y)
        alarms["nvbench"] += peers.nvbench_verdict(x, y) in ("SLOW", "FAST")
    sensitivity = []
    for factor in INJECTED:
        into_new = flagged(a, cells_of(injected_runs[(new_id, factor)]), repeats, hardware, rule)
        into_old = flagged(b, cells_of(injected_runs[(old_id, factor)]), repeats, hardware[::-1], rule)
        sensitivity.append({"change": factor, "stable_cells": into_new["stable_cells"] + into_old["stable_cells"],
                            "flagged": {r: into_new["flagged"][r] + into_old["flagged"][r] for r in RULES}})
    return {"old": old_id, "new": new_id, "same_card": policy.same_card(*hardware), "cells": judged,
            "stable_cells": stable, "answered": answered,
            "other_code": [" ".join(k) + ": " + ", ".join(policy.code_differences(a[k], b[k])) for k in other_code],
            "pi_checks": pi_checks, "pi_outside": outside, "pi_bound": binomial_bound(pi_checks),
            "false_alarms": alarms,
            "sensitivity": sensitivity}


def outside_pi(a: dict, b: dict, metric: str) -> bool | None:
    """Whether b's median lies outside a's 95% prediction interval; None where a has none (one
    process per job): no check, rather than a check that cannot miss."""
    pi = a["stats"][metric].get("pi95")
    return None if not pi else not pi[0] <= b["stats"][metric]["median"] <= pi[1]


def flagged(a: dict, slower: dict, keys: list, hardware: tuple[dict, dict], rule: Rule) -> dict:
    """How many stable cells of `a` each rule flags as slower in `slower` (the other run, made slower)."""
    stable = [k for k in keys if k in slower and a[k]["stats"].get("stable", True)
              and slower[k]["stats"].get("stable", True) and cell_metric(a[k], slower[k])]
    counts = dict.fromkeys(RULES, 0)
    for key in stable:
        metric = cell_metric(a[key], slower[key])
        counts["ours"] += policy.judge(a[key], slower[key], rule, hardware=hardware)["code"] == Code.REGRESSION
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(slower[key]["trials"], metric)[0]
        counts["asv"] += peers.asv_changed(x, y) and stats.median(y) > stats.median(x)
        counts["nvbench"] += peers.nvbench_verdict(x, y) == "SLOW"
    return {"stable_cells": len(stable), "flagged": counts}


def detector_check(runs: list[tuple[str, list[dict]]], rule: Rule) -> dict:
    """Every same-hardware pair of the given runs ([(entry id, results)], oldest first), checked."""
    analysed = [(run_id, analyse_run({"results": copy.deepcopy(results)})["results"]) for run_id, results in runs]
    identity = {run_id: policy.hardware_identity(results) for run_id, results in analysed}
    pairs_of = [((i, x), (j, y)) for (i, x), (j, y) in combinations(analysed, 2)
                if policy.same_hardware(identity[i], identity[j]) and not policy.experiment_differences(x, y)]
    paired = {run_id for pair in pairs_of for run_id, _ in pair}
    injected_runs = {(run_id, factor): injected(results, 1 + factor) for run_id, results in runs
                     if run_id in paired for factor in INJECTED}
    pairs = [pair_check(i, x, j, y, (identity[i], identity[j]), injected_runs, rule) for (i, x), (j, y) in pairs_of]
    totals = summary(pairs)
    return {"runs": [{"id": run_id, "hardware": policy.hardware_text(identity[run_id]),
                      "cards": identity[run_id]["cards"]} for run_id, _ in analysed],
            "rule": {**rule.as_dict(), "text": rule.text()}, "injected": list(INJECTED), "level": LEVEL,
            "pairs": pairs, "summary": totals, "done_when": done_when(pairs, totals)}


def summary(pairs: list[dict]) -> dict:
    """Totals over the pairs: false alarms per 100 cells and answers (same card, other card),
    calibration, sensitivity per injected change."""
    out = {}
    for name, chosen in (("same card", [p for p in pairs if p["same_card"]]),
                         ("other card", [p for p in pairs if not p["same_card"]])):
        cells = sum(p["cells"] for p in chosen)
        if not cells:
            continue
        stable = sum(p["stable_cells"] for p in chosen)
        checks = sum(p["pi_checks"] for p in chosen)
        out[name] = {"pairs": len(chosen), "cells": cells, "stable_cells": stable,
                     "answered": sum(p["answered"] for p in chosen),
                     "false_alarms_per_100": {rule: 100 * sum(p["false_alarms"][rule] for p in chosen) / cells
                                              for rule in RULES},
                     # None where no run of these pairs has a prediction interval (one process per job)
                     "pi_checks": checks,
                     "pi_outside": sum(p["pi_outside"] for p in chosen),
                     "pi_outside_share": sum(p["pi_outside"] for p in chosen) / checks if checks else None,
                     "pi_within_bound": (sum(p["pi_outside"] for p in chosen) <= binomial_bound(checks)
                                         if checks else None),
                     "pi_every_pair_within_bound": (all(p["pi_outside"] <= p["pi_bound"] for p in chosen if p["pi_checks"])
                                                    if checks else None)}
    for index, change in enumerate(INJECTED):
        stable = sum(p["sensitivity"][index]["stable_cells"] for p in pairs)
        out[f"+{change:.0%}"] = {"stable_cells": stable, "flagged_share": {
            rule: (sum(p["sensitivity"][index]["flagged"][rule] for p in pairs) / stable if stable else None)
            for rule in RULES}}
    return out


def done_when(pairs: list[dict], totals: dict) -> list[dict]:
    """Issue 23's acceptance figures for our rule: each {name, value, limit, holds}; value None
    where no pair gives it (no two runs on one card, say)."""
    stable = sum(p["stable_cells"] for p in pairs)
    def ours(key: str, figure: str):
        return (totals.get(key) or {}).get(figure, {}).get("ours")

    figures = [("answered", sum(p["answered"] for p in pairs) / stable if stable else None, ">="),
               ("false_alarms_same_card", ours("same card", "false_alarms_per_100"), "<="),
               ("false_alarms_other_card", ours("other card", "false_alarms_per_100"), "<=")]
    figures += [(f"+{c:.0%}", ours(f"+{c:.0%}", "flagged_share"), ">=") for c in INJECTED]
    return [{"name": name, "value": value, "limit": DONE_WHEN[name],
             "holds": None if value is None else (value >= DONE_WHEN[name] if sense == ">=" else value <= DONE_WHEN[name])}
            for name, value, sense in figures]
