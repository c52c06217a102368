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
other: they are counted apart, not judged.

A run some calibration fit was made on (calibrations.yaml `runs`) is in-sample; the acceptance
(`done_when`, issue 36's figures) is measured on the pairs of runs no fit was made on, and on all
pairs (said so) only where there are none. The noise components (fabench.analysis.components) are
estimated from the checked runs and stated beside the rule's; `trade_off` judges the same pairs by
other designs of the rule (margins, with and without the between-run and between-card noise).
"""

from __future__ import annotations

import copy
from itertools import combinations

from fabench.analysis import calibration, components, peers, policy, stats
from fabench.analysis.figures import cell_metric, trial_values
from fabench.analysis.noise import LEVEL, analyse_run
from fabench.analysis.policy import Code, Rule

INJECTED = (0.02, 0.05)
# What a trial records that a slower kernel would move with it (the analysis derives the rest).
SCALED_KEYS = ("device_ms", "wall_mean_ms", "do_bench_ms", "profiler_ms")
NOMINAL_MISS = 1 - LEVEL
RULES = ("ours", "asv", "nvbench")
ANSWERS = ("same", "changed")
# The acceptance figures of issue 36, on pairs of runs of one experiment on one hardware key:
# answered, flagged and injected changes counted among ALL ok cells judged (an unstable cell counts
# as not answered, not flagged); +5% also in every cell stable in both runs; the unstable share of
# each run; the prediction interval's misses within the binomial bound.
DONE_WHEN = {"answered": (">=", 0.90), "flagged": ("<=", 0), "unstable_per_run": ("<=", 0.05),
             "+2%": (">=", 0.90), "+5%": (">=", 0.95), "+5% stable": (">=", 1.0), "pi_misses": ("<=", None)}
# Designs of the rule the trade-off judges the same pairs by: margins, with and without the noise
# a run cannot see by itself (the fit's between-run and between-card components).
TRADE_OFF_MARGINS = (0.015, 0.0175, 0.02)


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
        answered += verdict["verdict"] in ANSWERS
        stable += verdict["code"] != Code.UNSTABLE
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(b[key]["trials"], metric)[0]
        alarms["asv"] += peers.asv_changed(x, y)
        alarms["nvbench"] += peers.nvbench_verdict(x, y) in ("SLOW", "FAST")
    sensitivity = []
    for factor in INJECTED:
        into_new = flagged(a, cells_of(injected_runs[(new_id, factor)]), repeats, hardware, rule)
        into_old = flagged(b, cells_of(injected_runs[(old_id, factor)]), repeats, hardware[::-1], rule)
        sensitivity.append({"change": factor, **{key: into_new[key] + into_old[key] for key in ("cells", "stable_cells")},
                            "flagged": {r: into_new["flagged"][r] + into_old["flagged"][r] for r in RULES},
                            "flagged_stable": into_new["flagged_stable"] + into_old["flagged_stable"]})
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
    """How many ok cells of `a` each rule flags as slower in `slower` (the other run, made slower):
    among all (`cells`; an unstable cell is never flagged by ours) and among those stable in both
    (`stable_cells`, `flagged_stable`: ours)."""
    judged = [k for k in keys if k in slower and cell_metric(a[k], slower[k])]
    stable = {k for k in judged if a[k]["stats"].get("stable", True) and slower[k]["stats"].get("stable", True)}
    counts, in_stable = dict.fromkeys(RULES, 0), 0
    for key in judged:
        metric = cell_metric(a[key], slower[key])
        ours = policy.judge(a[key], slower[key], rule, hardware=hardware)["code"] == Code.REGRESSION
        counts["ours"] += ours
        in_stable += ours and key in stable
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(slower[key]["trials"], metric)[0]
        counts["asv"] += peers.asv_changed(x, y) and stats.median(y) > stats.median(x)
        counts["nvbench"] += peers.nvbench_verdict(x, y) == "SLOW"
    return {"cells": len(judged), "stable_cells": len(stable), "flagged": counts, "flagged_stable": in_stable}


def unstable_share(results: list[dict]) -> float | None:
    """The share of a run's ok cells marked unstable."""
    cells = cells_of(results)
    return sum(not e["stats"].get("stable", True) for e in cells.values()) / len(cells) if cells else None


def _scope(run_id: str) -> str:
    """"fitted" for a run some calibration fit was made on, else "held out" (named as such or not)."""
    return "fitted" if calibration.held_out_runs().get(run_id.split("/")[-1]) == "fitted" else "held out"


def _prepare(runs: list[tuple[str, list[dict]]]) -> dict:
    """The runs analysed, their hardware, the same-hardware same-experiment pairs and each paired
    run with every injected change (analysed again): what every design of the rule is judged on."""
    analysed = [(run_id, analyse_run({"results": copy.deepcopy(results)})["results"]) for run_id, results in runs]
    identity = {run_id: policy.hardware_identity(results) for run_id, results in analysed}
    pairs_of = [((i, x), (j, y)) for (i, x), (j, y) in combinations(analysed, 2)
                if policy.same_hardware(identity[i], identity[j]) and not policy.experiment_differences(x, y)]
    paired = {run_id for pair in pairs_of for run_id, _ in pair}
    injected_runs = {(run_id, factor): injected(results, 1 + factor) for run_id, results in runs
                     if run_id in paired for factor in INJECTED}
    return {"analysed": analysed, "identity": identity, "pairs_of": pairs_of, "injected": injected_runs}


def _judge_pairs(prepared: dict, rule: Rule) -> dict:
    """Every pair judged by `rule`, the totals and the acceptance, over the held-out pairs (both
    runs held out of every fit) where there are any, else over all (`acceptance_on` says which)."""
    identity = prepared["identity"]
    pairs = [{**pair_check(i, x, j, y, (identity[i], identity[j]), prepared["injected"], rule),
              "scope": "held out" if _scope(i) == _scope(j) == "held out" else "in-sample"}
             for (i, x), (j, y) in prepared["pairs_of"]]
    held = [p for p in pairs if p["scope"] == "held out"]
    accepted_on = held or pairs
    runs = {run_id for p in accepted_on for run_id in (p["old"], p["new"])}
    unstable = {run_id: unstable_share(results) for run_id, results in prepared["analysed"] if run_id in runs}
    totals = summary(accepted_on)
    return {"pairs": pairs, "summary": totals, "acceptance_on": "held out" if held else "in-sample",
            "done_when": done_when(accepted_on, totals, unstable)}


def detector_check(runs: list[tuple[str, list[dict]]], rule: Rule, trade_off: bool = False) -> dict:
    """Every same-hardware pair of the given runs ([(entry id, results)], oldest first), checked;
    with `trade_off`, also judged by each design of trade_off_rules."""
    prepared = _prepare(runs)
    judged = _judge_pairs(prepared, rule)
    analysed, identity = prepared["analysed"], prepared["identity"]
    check = {"runs": [{"id": run_id, "hardware": policy.hardware_text(identity[run_id]),
                       "cards": identity[run_id]["cards"], "scope": _scope(run_id),
                       "unstable_share": unstable_share(results), **components.run_components(results)}
                      for run_id, results in analysed],
             "rule": {**rule.values(), "text": rule.text()}, "injected": list(INJECTED), "level": LEVEL,
             "components": _components(analysed, identity), **judged}
    if trade_off:
        check["trade_off"] = [{"design": name, **design_row(_judge_pairs(prepared, design))}
                              for name, design in trade_off_rules(rule)]
    return check


def _components(analysed: list[tuple[str, list[dict]]], identity: dict) -> list[dict]:
    """The between-run and between-card components per hardware key, from the checked runs."""
    keys = sorted({policy.hardware_key(identity[run_id]) for run_id, _ in analysed}, key=str)
    out = []
    for key in keys:
        runs = [(run_id, results) for run_id, results in analysed if policy.hardware_key(identity[run_id]) == key]
        found = components.between_runs(runs)
        out.append({"hardware": " ".join(str(k) for k in key if k), "runs": [run_id for run_id, _ in runs],
                    **{k: v for k, v in found.items() if k != "per_cell"},
                    "per_cell": len(found["per_cell"])})
    return out


def trade_off_rules(rule: Rule) -> list[tuple[str, Rule]]:
    """The designs the trade-off tries: each margin of TRADE_OFF_MARGINS and the rule's own, with the
    rule's between-run and between-card noise and without (both 0: the run's process noise only)."""
    margins = sorted({rule.margin, *TRADE_OFF_MARGINS})
    designs = []
    for margin in margins:
        for unseen in (False, True):
            config = {**rule.as_dict(), "margin": margin, **({} if unseen else {"between_run": 0.0, "between_card": 0.0})}
            name = f"margin {margin:.2%}, " + ("with the between-run and between-card noise" if unseen
                                               else "process noise only")
            designs.append((name, Rule.of({"comparison": config})))
    return designs


def design_row(judged: dict) -> dict:
    """One design's row of the trade-off: its acceptance figures by name, and whether all hold."""
    figures = {item["name"]: item["value"] for item in judged["done_when"]}
    return {"figures": figures, "holds": all(item["holds"] is not False for item in judged["done_when"])}


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
        cells = sum(p["sensitivity"][index]["cells"] for p in pairs)
        stable = sum(p["sensitivity"][index]["stable_cells"] for p in pairs)
        out[f"+{change:.0%}"] = {"cells": cells, "stable_cells": stable, "flagged_share": {
            rule: (sum(p["sensitivity"][index]["flagged"][rule] for p in pairs) / cells if cells else None)
            for rule in RULES}, "flagged_stable_share": (
                sum(p["sensitivity"][index]["flagged_stable"] for p in pairs) / stable if stable else None)}
    return out


def done_when(pairs: list[dict], totals: dict, unstable: dict[str, float | None]) -> list[dict]:
    """Issue 36's acceptance figures for our rule: each {name, value, limit, holds}; value None
    where no pair gives it. Shares are of all ok cells judged (each pair's cells; each injected
    change into both runs of a pair in turn)."""
    cells = sum(p["cells"] for p in pairs)
    checks = sum(p["pi_checks"] for p in pairs)
    bound = binomial_bound(checks)
    def injected_share(change: str, key: str = "flagged_share"):
        found = (totals.get(change) or {}).get(key)
        return found.get("ours") if isinstance(found, dict) else found

    shares = [v for v in unstable.values() if v is not None]
    figures = {"answered": sum(p["answered"] for p in pairs) / cells if cells else None,
               "flagged": sum(p["false_alarms"]["ours"] for p in pairs) if pairs else None,
               "unstable_per_run": max(shares) if shares else None,
               "+2%": injected_share("+2%"), "+5%": injected_share("+5%"),
               "+5% stable": injected_share("+5%", "flagged_stable_share"),
               "pi_misses": sum(p["pi_outside"] for p in pairs) if checks else None}
    out = []
    for name, (sense, limit) in DONE_WHEN.items():
        limit = bound if name == "pi_misses" else limit
        value = figures[name]
        out.append({"name": name, "value": value, "limit": limit, "holds": None if value is None else (
            value >= limit if sense == ">=" else value <= limit)})
    return out
