"""The verdicts on two cells of one run, the report's claims within a run: two backends of one job
(interleaved trial by trial in its processes) by a paired test at the process unit, and two cells of
other jobs told apart by their process medians though one is unstable. The same two tests as
between runs (fabench.analysis.policy.two_tests), the same codes."""

from __future__ import annotations

import math
import statistics

from fabench.analysis import pairs, stats
from fabench.analysis.figures import trial_values
from fabench.analysis.policy import two_tests, verdict_of
from fabench.analysis.identity import PairType
from fabench.analysis.result_types import cell_stats, recorded_trials
from fabench.analysis.rule import Code, Rule


def paired(a: dict, b: dict, metric: str, rule: Rule, pooled: "pairs.PairNoise | None",
           names: tuple[str, str] = ("a", "b"), between_runs: float = 0.0) -> dict:
    """The verdict on two backends of one job (interleaved in its processes), as judge's on two
    runs reads it (b the new, a the old: ratio b / a): a paired test at the process unit.

    Each process gives the mean of its paired trials' log ratios (fabench.analysis.pairs); their
    mean d over the P processes is the run's change, with standard error sqrt(s^2 / P), s^2 the
    pair's own variance over processes moderated by the run's pairs of its duration (`pooled`,
    pairs.PairNoise.moderated: Smyth's moderated t, df the prior's degrees of freedom plus P - 1),
    never below what its trials inside each process put into a process mean
    (pairs.Pair.within_mean_variance). Then the rule's tests as judge applies them: beyond the
    noise |d| > t(1 - alpha/2, df) * se (the two-sided p is stated: Student's t, valid where the
    process effects on a ratio are normal), faster where also beyond the margin; same within the
    margin by the equivalence interval; else cannot tell. `ran_first`: in how many partner trials
    each ran first (None for trials that did not record their place). `between_runs`: the
    standard deviation (log) of a
    cell's own shift from run to run on this hardware, where a calibration knows it; each cell has
    its own, so 2 * between_runs^2 joins the variance and the claim holds for another run too;
    without it (0) the claim is about this run's processes, and the words say so. One process per job gives no variance between
    processes: no test and no p, `one_process`, with the paired trials' count and range in `paired`
    for the words. A cell doubted beyond spread (pairs.doubted) is `unstable`."""
    pair = pairs.Pair.of(b, a, metric)  # log(b / a): the new over the old, as judge reads a change
    if pair is None:
        return verdict_of(Code.NO_FIGURE, names)
    d = pair.mean
    trials = {"trials": len(pair.ratios), "processes": pair.processes,
              "consistent": sum(1 for r in pair.ratios if r * d > 0), "test": "paired",
              "ran_first": dict(zip(names[::-1], pair.ran_first)) if pair.ran_first else None,
              "least": math.exp(min(abs(r) for r in pair.ratios)) if all(r * d > 0 for r in pair.ratios) else None}
    base = {"metric": metric, "ratio": math.exp(d)}
    doubts = {i: cell_stats(e).unstable_reason for i, e in zip(names, (a, b)) if pairs.doubted(e)}
    if doubts:
        return verdict_of(Code.UNSTABLE, names, **base, values={"unstable": doubts, "paired": trials, "unstable_codes": {
            i: cell_stats(e).unstable_codes for i, e in zip(names, (a, b)) if i in doubts}})
    if pair.processes < 2:
        return verdict_of(Code.ONE_PROCESS, names, **base, values={"one_process": list(names), "paired": trials})
    variance, df = (pooled.moderated(pair) if pooled else
                    (max(pair.variance, pair.within_mean_variance), pair.processes - 1))
    sd = math.sqrt(variance / pair.processes + 2 * between_runs ** 2)
    t = abs(d) / sd if sd else math.inf
    trials.update(p=stats.t_two_sided_p(t, df), df=df, pooled_pairs=pooled.pairs if pooled else None,
                  between_runs=between_runs)
    # Under a power cap the clock a trial ran at depends on what ran before it: a capped cell is
    # told from its partner only beyond the capped cells' margin (the same card's, calibrations.yaml).
    capped = any(s.capped for s in map(cell_stats, (a, b)) if s)
    margin = rule.for_pair(PairType.SAME_CARD).capped.margin if capped else None
    return two_tests(d, sd, df, rule, names, base, {"paired": trials, "capped": capped}, margin=margin)


def processes_apart(a: dict, b: dict, metric: str, rule: Rule) -> dict | None:
    """Whether two cells of one run measured in different jobs (no partners trial by trial) are
    told apart although one is unstable (the claims' exception to `unstable`,
    fabench.analysis.claims): at the process unit, the unit that carries the noise. Every process
    median of the slower lies beyond every one of the faster by more than the rule's margin, and
    Welch's t on the log process medians puts the difference beyond chance at the rule's alpha
    (valid where process effects are normal; the trials of one process are one observation).
    Two processes a cell leave Welch about 2 degrees of freedom: only a gap far beyond the
    processes' own spread passes (cuDNN at (4,4096,8,256) on an H100, 7% spread, against aiter's
    kernel 2x slower). A cell of one process never is told apart.

    Returns {faster ("a" or "b"), processes ([a's, b's]), gap (the least relative gap between
    process medians), p, df}, or None; the caller writes the words."""
    logs = []
    for entry in (a, b):
        values, processes = trial_values(recorded_trials(entry) or [], metric)
        medians = stats.process_medians(values, processes) if values else []
        if len(medians) < 2 or min(medians) <= 0:
            return None
        logs.append([math.log(m) for m in medians])
    la, lb = logs
    faster = "a" if max(la) < min(lb) else "b" if max(lb) < min(la) else None
    if faster is None:
        return None
    fast, slow = (la, lb) if faster == "a" else (lb, la)
    gap = math.exp(min(slow) - max(fast)) - 1
    va, vb = (stats.log_variance([math.exp(x) for x in side]) / len(side) for side in (la, lb))
    se = math.sqrt(va + vb)
    # Welch-Satterthwaite degrees of freedom (the processes of each cell, their variances unequal).
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1)) if va + vb else math.inf
    t = abs(statistics.fmean(lb) - statistics.fmean(la)) / se if se else math.inf
    p = stats.t_two_sided_p(t, df)
    if p > rule.alpha or gap <= rule.within_run_margin():
        return None
    return {"faster": faster, "processes": [len(la), len(lb)], "gap": gap, "p": p, "df": df}
