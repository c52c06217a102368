"""Two runs of a cell: changed, same, or cannot tell; and steps in a series of runs.

A cell's change is d = log(new median / old median). Its noise is the two runs' pooled noise
(fabench.analysis.noise): sd = sqrt(sigma_old^2 / P_old + sigma_new^2 / P_new). The verdict:
  changed      |d| > t(1 - ALPHA/2, df) * sd (and beyond the optional minimum change): at most
               ALPHA of the cells of two runs of the same experiment are flagged by chance;
  same         not changed, and a change of SAME_MARGIN would have been detected;
  cannot tell  not changed but the noise hides changes up to SAME_MARGIN, or a run is unstable,
               has no interval, or ran on other hardware.
A change in device time that is none in clock cycles (time x the SM clock each trial read) is the
clock's, not the software's (a power cap, another card): cannot tell, flag `clock`.
The smallest detectable change is the change detected with POWER probability:
(t(1 - ALPHA/2) + t(POWER)) * sd. Hardware is part of what is compared: runs on different GPU
models (platform, device name, architecture) are never judged against each other; the verdict
names the hardware change instead.
"""

from __future__ import annotations

import math

from fabench.analysis import stats
from fabench.analysis.figures import METRICS, cell_metric

ALPHA = 0.005
POWER = 0.8
SAME_MARGIN = 0.05
VERDICTS = ("changed", "same", "cannot tell")


# ---------------------------------------------------------------- hardware

def hardware_identity(results: list[dict]) -> dict:
    """What ran the results: platform, device model and architecture (the series key), and the
    cards (GPU UUIDs) as the results record them."""
    first = results[0]["provenance"] if results else {}
    gpu = first.get("gpu") or {}
    cards = sorted({(r["provenance"].get("gpu") or {}).get("uuid") for r in results} - {None})
    return {"platform": results[0]["platform"] if results else None,
            "device": gpu.get("name") or first.get("device"), "arch": first.get("arch"), "cards": cards}


def hardware_key(identity: dict) -> tuple:
    return identity.get("platform"), identity.get("device"), identity.get("arch")


def hardware_text(identity: dict) -> str:
    return " ".join(str(v) for v in hardware_key(identity) if v)


def same_hardware_model(a: dict, b: dict) -> bool:
    return hardware_key(a) == hardware_key(b)


# ---------------------------------------------------------------- one cell, two runs

def _noise(figure: dict) -> tuple[float, int, int] | None:
    noise = figure.get("noise")
    if not noise:
        return None
    return noise["sigma"], noise["df"], noise["replicates"]


def change_noise(old: dict, new: dict) -> tuple[float, int] | None:
    """(sd of the log change, degrees of freedom) from both runs' pooled noise."""
    a, b = _noise(old), _noise(new)
    if a is None or b is None:
        return None
    return math.sqrt(a[0] ** 2 / a[2] + b[0] ** 2 / b[2]), min(a[1], b[1])


def detection(sd: float, df: int, minimum: float = 0.0) -> tuple[float, float]:
    """(threshold on |log change|, smallest detectable relative change) for this noise."""
    threshold = max(stats.t_quantile(stats.two_sided(1 - ALPHA), df) * sd, math.log1p(minimum))
    detectable = threshold + stats.t_quantile(POWER, df) * sd
    return threshold, math.expm1(detectable)


def not_ok_text(entry: dict) -> str:
    kind = f" ({entry['failure_kind']})" if entry.get("failure_kind") else ""
    return f"{entry['status']}{kind}: {entry.get('reason') or 'no reason recorded'}"


def _verdict(verdict: str, flag: str, why: str, **values) -> dict:
    return {"verdict": verdict, "flag": flag, "why": why, "metric": None, "ratio": None, "detectable": None,
            **values}


def compare_cell(old: dict, new: dict, old_id: str = "old", new_id: str = "new", minimum: float = 0.0,
                 hardware: tuple[dict, dict] | None = None) -> dict:
    """The verdict on one cell (two analysed backend entries), with its reason.

    flag: regression / improvement (changed), unchanged (same), and for cannot tell: unstable,
    noisy, hardware, not comparable; `not measured` when it ran in neither."""
    old_ok, new_ok = old["status"] == "ok", new["status"] == "ok"
    if old_ok != new_ok and hardware and not same_hardware_model(*hardware):
        # A backend that needs CUDA is unavailable on a CPU: another machine, not a software change.
        return _verdict("cannot tell", "hardware", f"{'ok' if old_ok else old['status']} -> "
                                                  f"{'ok' if new_ok else new['status']}, but the hardware changed "
                                                  f"({hardware_text(hardware[0])} -> {hardware_text(hardware[1])})")
    if old_ok and not new_ok:
        return _verdict("changed", "regression", f"was ok in {old_id}, now {not_ok_text(new)}")
    if not old_ok and new_ok:
        return _verdict("changed", "improvement", f"runs again (was {not_ok_text(old)} in {old_id})")
    if not old_ok:
        return _verdict("cannot tell", "not measured", f"{new['status']} in both")
    metric = cell_metric(old, new)
    if metric is None:
        return _verdict("cannot tell", "not comparable", "no median recorded in both")
    a, b = old["stats"][metric], new["stats"][metric]
    ratio = b["median"] / a["median"]
    change = f"{ratio - 1:+.2%} {METRICS[metric]}"
    base = {"metric": metric, "ratio": ratio}
    if hardware and not same_hardware_model(*hardware):
        return _verdict("cannot tell", "hardware", f"{change}, but the hardware changed ({hardware_text(hardware[0])} "
                                                  f"-> {hardware_text(hardware[1])}): not a software change", **base)
    unstable = [f"{i}: {e['stats'].get('unstable_reason') or 'unstable'}" for i, e in ((old_id, old), (new_id, new))
                if not e["stats"].get("stable", True)]
    if unstable:
        return _verdict("cannot tell", "unstable", f"{change}; trials unstable in " + "; ".join(unstable), **base)
    noise = change_noise(a, b)
    if noise is None:
        return _verdict("cannot tell", "not comparable", f"{change}; no noise estimate in both runs", **base)
    threshold, detectable = detection(*noise, minimum)
    base["detectable"] = detectable
    limit = f"beyond the noise (changes above {math.expm1(threshold):.2%} are flagged at most {ALPHA:.1%} of the time by chance)"
    if abs(math.log(ratio)) > threshold:
        moved = clock_explains(old, new, metric, threshold)
        if moved:
            return _verdict("cannot tell", "clock", f"{change}, {moved}", **base)
        return _verdict("changed", "regression" if ratio > 1 else "improvement", f"{change}: {limit}", **base)
    if detectable <= SAME_MARGIN:
        return _verdict("same", "unchanged", f"{change}: within the noise; a change of {detectable:.1%} "
                                             f"would have been detected", **base)
    return _verdict("cannot tell", "noisy", f"{change}: within the noise, but only changes above "
                                            f"{detectable:.1%} could have been detected", **base)


def clock_explains(old: dict, new: dict, metric: str, threshold: float) -> str | None:
    """Why a change in device time is the clock's, when it is none in cycles (time x SM clock, as
    nvbench confirms a change): a power cap, or another card of the model, held the clock at
    another speed. None when the cycles moved too, or a run read no clock."""
    cycles = [(e["stats"].get("device_cycles") or {}) for e in (old, new)]
    if metric != "device_ms" or not all(c.get("median") for c in cycles):
        return None
    ratio = cycles[1]["median"] / cycles[0]["median"]
    if abs(math.log(ratio)) > threshold:
        return None
    return (f"but {ratio - 1:+.2%} in cycles (time x SM clock, {cycles[0]['clock_mhz']:.0f} -> "
            f"{cycles[1]['clock_mhz']:.0f} MHz): the clock moved, not the kernel's work")


# ---------------------------------------------------------------- a series of runs

def find_step(points: list[tuple[str, dict]]) -> dict | None:
    """The step in a series of one cell's analysed figures ([(entry id, figure)] in time order,
    same hardware): the split whose before and after means differ most in units of their noise,
    when that difference is beyond it (the same ALPHA as a pair); None without one. Needs 3 runs."""
    usable = [(entry, f) for entry, f in points if f and f.get("noise") and f.get("median")]
    if len(usable) < 3:
        return None
    best = None
    for split in range(1, len(usable)):
        before, after = usable[:split], usable[split:]
        mean = lambda part: sum(math.log(f["median"]) for _, f in part) / len(part)  # noqa: E731
        var = lambda part: sum(f["noise"]["sigma"] ** 2 / f["noise"]["replicates"] for _, f in part) / len(part) ** 2  # noqa: E731
        sd = math.sqrt(var(before) + var(after))
        df = min(f["noise"]["df"] for _, f in usable)
        score = abs(mean(after) - mean(before)) / sd if sd else 0.0
        if score > stats.t_quantile(stats.two_sided(1 - ALPHA), df) and (best is None or score > best["score"]):
            best = {"score": score, "after": usable[split][0], "before": usable[split - 1][0],
                    "ratio": math.exp(mean(after) - mean(before)), "runs": len(usable)}
    return best
