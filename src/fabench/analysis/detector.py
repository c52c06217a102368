"""How good is the change detector on real runs: its sensitivity, its false alarms and the
calibration of the prediction interval, measured on archived runs of one experiment.

For every ordered pair of runs on the same hardware model (platform, GPU model, architecture):
- false alarms: the cells the verdict calls changed between two runs of the same experiment,
  split by whether the two ran on the same card or on two cards of the model;
- calibration: the cells whose other run's median lies outside this run's 95% prediction
  interval, against the binomial bound for the nominal 5%;
- sensitivity: the second run with a known change injected (every trial's figures scaled, then
  the run analysed again, so its pooled noise is re-estimated too), and the share of stable cells
  the verdict flags.
asv's rule and nvbench's robust compare (fabench.analysis.peers) judge the same pairs, from the
same trials. Cells whose implementation differs between the two runs (another kernel, another
package version in the column) are no repeat of each other: they are counted apart, not judged.
"""

from __future__ import annotations

import copy
from itertools import permutations

from fabench.analysis import peers, stats
from fabench.analysis.claims import same_code
from fabench.analysis.figures import cell_metric, trial_values
from fabench.analysis.noise import LEVEL, analyse_run
from fabench.analysis.verdict import compare_cell, hardware_identity, hardware_key, hardware_text

INJECTED = (0.02, 0.05)
# What a trial records that a slower kernel would move with it (the analysis derives the rest).
SCALED_KEYS = ("device_ms", "wall_mean_ms", "do_bench_ms", "profiler_ms")
NOMINAL_MISS = 1 - LEVEL


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
                for key in ("profiler_calls_ms", "device_samples_ms", "kernel_samples_ms", "period_events_ms",
                            "period_cupti_ms"):
                    if trial.get(key):
                        trial[key] = [v * factor for v in trial[key]]
    return analyse_run({"results": out})["results"]


def binomial_bound(n: int, rate: float = NOMINAL_MISS, level: float = 0.95) -> int:
    """The most misses among n cells a calibrated interval (miss rate `rate`) is expected to
    show: the smallest k with P(Bin(n, rate) > k) <= 1 - level (5 for 50 cells at 5%)."""
    k = 0
    while k < n and stats.binomial_tail(k + 1, n, rate) > 1 - level:
        k += 1
    return k


def pair_check(old_id: str, old: list[dict], new_id: str, new: list[dict], hardware: tuple[dict, dict]) -> dict:
    a, b = cells_of(old), cells_of(new)
    shared = sorted(set(a) & set(b))
    other_code = [k for k in shared if not same_code(a[k], b[k])]
    repeats = [k for k in shared if k not in other_code]
    judged, outside, ours, asv, nvbench = 0, 0, 0, 0, 0
    for key in repeats:
        metric = cell_metric(a[key], b[key])
        if metric is None:
            continue
        judged += 1
        pi = a[key]["stats"][metric].get("pi95")
        median = b[key]["stats"][metric]["median"]
        outside += bool(pi) and not pi[0] <= median <= pi[1]
        ours += compare_cell(a[key], b[key], old_id, new_id, hardware=hardware)["verdict"] == "changed"
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(b[key]["trials"], metric)[0]
        asv += peers.asv_changed(x, y)
        nvbench += peers.nvbench_verdict(x, y) in ("SLOW", "FAST")
    same_card = bool(hardware[0]["cards"]) and hardware[0]["cards"] == hardware[1]["cards"]
    return {"old": old_id, "new": new_id, "same_card": same_card, "cells": judged,
            "other_code": [" ".join(k) for k in other_code], "pi_outside": outside,
            "pi_bound": binomial_bound(judged), "false_alarms": {"ours": ours, "asv": asv, "nvbench": nvbench},
            "sensitivity": [sensitivity(a, old_id, new, new_id, repeats, factor, hardware) for factor in INJECTED]}


def sensitivity(a: dict, old_id: str, new: list[dict], new_id: str, keys: list, change: float,
                hardware: tuple[dict, dict]) -> dict:
    """The share of stable cells flagged as slower when `new` is made slower by `change`."""
    b = cells_of(injected(new, 1 + change))
    stable = [k for k in keys if k in b and a[k]["stats"].get("stable", True) and b[k]["stats"].get("stable", True)
              and cell_metric(a[k], b[k])]
    ours = asv = nvbench = 0
    for key in stable:
        metric = cell_metric(a[key], b[key])
        ours += compare_cell(a[key], b[key], old_id, new_id, hardware=hardware)["flag"] == "regression"
        x, y = trial_values(a[key]["trials"], metric)[0], trial_values(b[key]["trials"], metric)[0]
        asv += peers.asv_changed(x, y) and stats.median(y) > stats.median(x)
        nvbench += peers.nvbench_verdict(x, y) == "SLOW"
    return {"change": change, "stable_cells": len(stable), "flagged": {"ours": ours, "asv": asv, "nvbench": nvbench}}


def detector_check(runs: list[tuple[str, list[dict]]]) -> dict:
    """Every same-hardware ordered pair of the given runs ([(entry id, results)]), checked."""
    analysed = [(run_id, analyse_run({"results": copy.deepcopy(results)})["results"]) for run_id, results in runs]
    identity = {run_id: hardware_identity(results) for run_id, results in analysed}
    pairs = [pair_check(i, x, j, y, (identity[i], identity[j]))
             for (i, x), (j, y) in permutations(analysed, 2) if hardware_key(identity[i]) == hardware_key(identity[j])]
    return {"runs": [{"id": run_id, "hardware": hardware_text(identity[run_id]), "cards": identity[run_id]["cards"]}
                     for run_id, _ in analysed],
            "injected": list(INJECTED), "level": LEVEL, "pairs": pairs, "summary": summary(pairs)}


def summary(pairs: list[dict]) -> dict:
    """Totals over the pairs: false alarms per 100 cells (same card, other card), calibration,
    sensitivity per injected change."""
    out = {}
    for name, chosen in (("same card", [p for p in pairs if p["same_card"]]),
                         ("other card", [p for p in pairs if not p["same_card"]])):
        cells = sum(p["cells"] for p in chosen)
        if not cells:
            continue
        out[name] = {"pairs": len(chosen), "cells": cells,
                     "false_alarms_per_100": {rule: 100 * sum(p["false_alarms"][rule] for p in chosen) / cells
                                              for rule in ("ours", "asv", "nvbench")},
                     "pi_outside": sum(p["pi_outside"] for p in chosen),
                     "pi_outside_share": sum(p["pi_outside"] for p in chosen) / cells,
                     "pi_within_bound": all(p["pi_outside"] <= p["pi_bound"] for p in chosen)}
    for index, change in enumerate(INJECTED):
        stable = sum(p["sensitivity"][index]["stable_cells"] for p in pairs)
        out[f"+{change:.0%}"] = {"stable_cells": stable, "flagged_share": {
            rule: (sum(p["sensitivity"][index]["flagged"][rule] for p in pairs) / stable if stable else None)
            for rule in ("ours", "asv", "nvbench")}}
    return out
