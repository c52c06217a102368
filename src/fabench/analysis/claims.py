"""What a report may say about two cells of one run: which is faster, or that they tie within
the noise; and which cells of two variants ran the same code.

A cell is faster than another only when the difference is beyond both cells' noise: their 95%
intervals (fabench.analysis.noise) do not overlap. Otherwise the two tie within the noise, and
a cell whose trials were unstable supports no claim at all. Figures that carry no noise estimate
(the published numbers, results archived before trials) are compared as they were published,
and the claim says so.

Two variants' cells ran the same code when the comparison policy's code identity agrees
(fabench.analysis.policy.same_code: implementation, config values read, launched kernels): then
any difference between them is run-to-run noise, and no claim that one variant is faster is made.
"""

from __future__ import annotations

from fabench.analysis import policy
from fabench.analysis.figures import METRICS

CLAIMS = ("faster", "tie", "unstable", "as published", "not measured")


def figure(entry: dict | None, metric: str) -> dict | None:
    """The entry's analysed figure for `metric` (median and intervals), None when it has none."""
    if entry is None or entry.get("status") != "ok":
        return None
    stats = entry.get("stats") or {}
    found = stats.get(metric)
    if isinstance(found, dict) and found.get("median") is not None:
        return found
    value = entry.get(metric)  # results recorded before trials: the figure alone
    return {"median": value} if isinstance(value, (int, float)) else None


def compare(a: dict | None, b: dict | None, metric: str = "wall_mean_ms", names: tuple[str, str] = ("a", "b")) -> dict:
    """Which of two analysed backend entries is faster on `metric`, if the data can say so.

    Returns {claim, faster ("a", "b" or None), ratio (slower over faster), why}: claim is one of
    CLAIMS; `faster` is set for "faster" and "as published" only. `names` name the cells in `why`."""
    fa, fb = figure(a, metric), figure(b, metric)
    if fa is None or fb is None:
        return {"claim": "not measured", "faster": None, "ratio": None, "why": "not measured in both"}
    first = "a" if fa["median"] <= fb["median"] else "b"
    low, high = sorted((fa["median"], fb["median"]))
    ratio = high / low if low > 0 else None
    unstable = [who for who, e in zip(names, (a, b)) if not (e.get("stats") or {}).get("stable", True)]
    if unstable:
        return {"claim": "unstable", "faster": None, "ratio": ratio,
                "why": "trials unstable in " + " and ".join(unstable)}
    ia, ib = fa.get("ci95"), fb.get("ci95")
    if not ia and not ib:
        return {"claim": "as published", "faster": first, "ratio": ratio,
                "why": "no noise estimate (published figures): compared as published"}
    if not ia or not ib:
        return {"claim": "tie", "faster": None, "ratio": ratio, "why": "one figure has no interval"}
    slow_low = (ib if first == "a" else ia)[0]
    fast_high = (ia if first == "a" else ib)[1]
    if fast_high < slow_low:
        return {"claim": "faster", "faster": first, "ratio": ratio,
                "why": f"{METRICS[metric]}: the 95% intervals do not overlap"}
    return {"claim": "tie", "faster": None, "ratio": ratio,
            "why": f"{METRICS[metric]}: the 95% intervals overlap (a tie within the noise)"}


# Which cells ran the same code is the comparison policy's question (one code identity).
code_facts = policy.code_identity
same_code = policy.same_code
