"""The comparison policy: the one rule by which every part of the tool calls two figures the same,
changed, or undecided, and the identities (code, hardware, experiment) that say which figures may
be compared at all. compare, step detection, the report's claims, published vs reproduced,
detector-check, the merge and tools/ all ask here.

A cell's change is d = log(new median / old median). Its noise is the two runs' own (their pooled
process noise, fabench.analysis.noise) and what no run sees by itself, which depends on what the
two runs are to each other (identity.PairType: the same card, another card of the host, another
host, a run over several cards of one host or of two) and on whether the cell was held at a power cap
(fabench.analysis.components): sd = sqrt(sigma_old^2 / P_old + sigma_new^2 / P_new + unseen), with
the degrees of freedom of that sum (stats.welch_df: the unseen part counts the fit's, from a
bootstrap over its runs). Each pair type has its margin, fitted with its noise (calibrations.yaml):
the smallest change the rule calls a change between such runs, which every verdict states. Two
tests on d, as asv and nvbench do (docs/archive.md compares them):
  beyond the noise   |d| > t(1 - alpha/2, df) * sd: at most `alpha` of the cells of two runs of one
                     experiment are beyond the noise by chance;
  within the margin  the change's (1 - 2 * equivalence_alpha) interval, d +- t(1 - equivalence_alpha,
                     df) * sd, lies inside +-log(1 + margin) (two one-sided tests: a change beyond
                     the margin is called same at most `equivalence_alpha` of the time).
The verdict, with its reason code (Code):
  changed (regression | improvement)  beyond the noise and |ratio - 1| > margin;
  same, `small_change`                beyond the noise but within the margin: real, too small to matter;
  same, `same`                        within the noise and within the margin;
  cannot tell                         neither (`noisy`: the noise hides changes past the margin), or a
                                      run is unstable, has no interval, ran on other hardware, other
                                      code (where the caller expects the same), another experiment,
                                      or the change is the SM clock's (`clock`).
Two cells of one run (the report's claims) are judged by the same two tests in
fabench.analysis.within_run (a paired test at the process unit, or process medians told apart);
the rule's parameters and the codes live in fabench.analysis.rule.
The policy returns codes and values, never sentences: its callers write the words
(fabench.analysis.verdict_text), so a rewording changes no decision and no test of one.
"""

from __future__ import annotations

import math
import statistics

from fabench.analysis import calibration, stats
from fabench.analysis.figures import compared_metric
from fabench.analysis.result_types import BackendEntry, MetricStats
# The identities are part of the policy's interface: callers may ask either module.
from fabench.analysis.identity import (  # noqa: F401
    PairType, code_differences, code_identity, experiment_differences, experiment_identity, hardware_identity,
    hardware_key, hardware_text, hosts_of, launched_kernels, matches_published_hardware, pair_type, same_card,
    same_code, same_hardware)
# The rule and its codes are part of the policy's interface: callers may ask either module.
from fabench.analysis.rule import (  # noqa: F401
    CONFIG_KEY, RETIRED_KEYS, VERDICT, ClassRule, Code, PairRule, Rule, RuleError, refuse_retired)


# ---------------------------------------------------------------- one cell, two runs

def _noise(figure: dict) -> tuple[float, int, int] | None:
    noise = figure.get("noise")
    if not noise:
        return None
    return noise["sigma"], noise["df"], noise["replicates"]


def change_noise(old: dict, new: dict, judged_by: ClassRule | None = None) -> tuple[float, float] | None:
    """(sd of the log change, degrees of freedom): both runs' process noise (times the fit's scale)
    and the unseen noise no run sees by itself (`judged_by`: the pair type's ClassRule; none: the
    process noise alone), with the degrees of freedom of the sum (stats.welch_df)."""
    a, b = _noise(old), _noise(new)
    if a is None or b is None:
        return None
    scale, variance, df = (judged_by.scale, judged_by.variance, judged_by.df) if judged_by else (1.0, 0.0, None)
    process = scale * (a[0] ** 2 / a[2] + b[0] ** 2 / b[2])
    return math.sqrt(process + variance), stats.welch_df([(process, min(a[1], b[1])),
                                                          (variance, math.inf if df is None else df)])


def noise_limit(sd: float, df: int, rule: Rule) -> float:
    """The |log change| beyond which a change is more than the noise (at the rule's alpha)."""
    return stats.t_quantile(stats.two_sided(1 - rule.alpha), df) * sd


def detectable(sd: float, df: float, rule: Rule, margin: float | None = None) -> float:
    """The smallest relative change called changed with the rule's power, for this noise and margin."""
    margin = rule.within_run_margin() if margin is None else margin
    limit = max(noise_limit(sd, df, rule), math.log1p(margin))
    return math.expm1(limit + stats.t_quantile(rule.power, df) * sd)


def status_of(entry: dict) -> dict:
    """A backend entry's status as a verdict's values carry it (for the words: status (kind): reason)."""
    return BackendEntry.of(entry).status_record()


def verdict_of(code: Code, names: tuple[str, str], **fields) -> dict:
    """A verdict: its code (and the verdict word it implies), the figure judged, the change (ratio
    new / old) and its interval, the smallest change detectable at this noise, and `values`: what a
    caller needs to say why (the runs' names first)."""
    values = {"runs": list(names), **fields.pop("values", {})}
    return {"verdict": VERDICT.get(code, "cannot tell"), "code": code, "metric": None, "ratio": None,
            "interval": None, "detectable": None, **fields, "values": values}


def judge(old: dict, new: dict, rule: Rule, names: tuple[str, str] = ("old", "new"),
          hardware: tuple[dict, dict] | None = None, experiment: list[str] | None = None,
          expect_same_code: bool = False, kind: str | None = None) -> dict:
    """The verdict on one cell: two analysed backend entries (old, new) of two runs.

    Returns {verdict, code, metric, ratio, interval (of the ratio), detectable, values}: verdict is
    changed / same / cannot tell, implied by the code (Code); values hold what the code's words
    need (the runs' `names`, statuses, hardware, differences, clock, the pair type and its margin).
    `hardware` holds both runs' hardware identities, `kind` the pair type they make (where the
    caller knows more runs of their hosts: identity.pair_type; else told from the two),
    `experiment` the differences between the runs' experiments (experiment_differences), and
    `expect_same_code` says that the two are repeats (detector-check), so other code is no repeat."""
    if experiment:
        return verdict_of(Code.OTHER_EXPERIMENT, names, values={"differences": list(experiment)})
    entries = BackendEntry.of(old), BackendEntry.of(new)
    moved = _status_change(*entries, names, hardware)
    if moved:
        return moved
    if not entries[0].ok:
        return verdict_of(Code.NOT_OK, names, values={"old": entries[0].status_record(),
                                                      "new": entries[1].status_record()})
    if expect_same_code and not same_code(old, new):
        return verdict_of(Code.OTHER_CODE, names, values={"differences": code_differences(old, new)})
    metric = compared_metric(old, new)
    if metric is None:
        return verdict_of(Code.NO_FIGURE, names)
    return _judge_figures(entries, metric, rule, names, hardware, kind)


def _judge_figures(entries: tuple[BackendEntry, BackendEntry], metric: str, rule: Rule, names: tuple[str, str],
                   hardware: tuple[dict, dict] | None, kind: str | None) -> dict:
    """judge's verdict on two ok entries that both have `metric`'s figure."""
    a, b = (e.stats.metric(metric) for e in entries)
    base = {"metric": metric, "ratio": b.median / a.median}
    if hardware and not same_hardware(*hardware):
        return verdict_of(Code.OTHER_HARDWARE, names, **base, values={"hardware": [hardware_text(h) for h in hardware]})
    doubt = _doubt(entries, (a, b), names)
    if doubt:
        return verdict_of(doubt[0], names, **base, values=doubt[1])
    rule = rule.on(hardware[0] if hardware else None)  # the fitted values of the hardware judged
    pair = rule.for_pair(kind or (pair_type(*hardware) if hardware else PairType.SAME_CARD))
    capped = any(e.stats.capped for e in entries) and metric == "device_ms"
    judged_by = pair.of(capped)
    noise = change_noise(a.raw, b.raw, judged_by)
    if noise is None:
        return verdict_of(Code.NO_INTERVAL, names, **base)
    # Whether the rule is the calibration of this hardware (fabench.analysis.calibration).
    calibrated = rule.calibrated_on(hardware[0]) if hardware else None
    sd, df = noise
    pair_values = {"pair": {"kind": pair.kind, "fitted_as": pair.fitted_as, "capped": capped}}
    old, new = (e.raw for e in entries)
    verdict = two_tests(math.log(base["ratio"]), sd, df, rule, names, base, pair_values,
                        lambda limit: clock_explains(old, new, metric, limit), margin=judged_by.margin)
    return calibration.mark(verdict, hardware, calibrated)


def _doubt(entries: tuple[BackendEntry, BackendEntry], figures: tuple[MetricStats, MetricStats],
           names: tuple[str, str]) -> tuple[Code, dict] | None:
    """Why two ok entries' figures cannot be judged by the two tests: an unstable entry, or a run of
    one process (no noise between processes); None when they can."""
    unstable = {i: e.stats.unstable_reason for i, e in zip(names, entries) if not e.stats.stable}
    if unstable:
        return Code.UNSTABLE, {"unstable": unstable, "unstable_codes": {
            i: e.stats.unstable_codes for i, e in zip(names, entries) if i in unstable}}
    one_process = [i for i, f in zip(names, figures) if f.noise and f.noise.between == "trials"]
    if one_process:
        return Code.ONE_PROCESS, {"one_process": one_process}
    return None


def two_tests(d: float, sd: float, df: float, rule: Rule, names: tuple[str, str], base: dict, values: dict,
           clock=None, margin: float | None = None) -> dict:
    """The rule's two tests on a log change d with standard error sd (df degrees of freedom), the
    verdict judge and paired share: changed beyond the noise and the margin (unless `clock(limit)`
    finds the clock's change), small_change beyond the noise only, same within the margin by the
    equivalence interval, else noisy. `margin`: the pair type's (judge), else the rule's own, else
    the same card's. Fills base's interval and detectable (in place)."""
    margin = margin if margin is not None else rule.within_run_margin()
    limit = noise_limit(sd, df, rule)
    reach = stats.t_quantile(1 - rule.equivalence_alpha, df) * sd
    base.update(interval=[math.exp(d - reach), math.exp(d + reach)], detectable=detectable(sd, df, rule, margin))
    bound = math.log1p(margin)
    # p: the change's two-sided p at its noise; answerable: the chance an unchanged cell at this noise
    # is called same (what a gate over many cells expects of unchanged software).
    values = {"margin": margin, "level": 1 - 2 * rule.equivalence_alpha, "sd": sd, "df": df,
              "p": stats.t_two_sided_p(abs(d) / sd, df) if sd else 0.0,
              "answerable": max(0.0, 2 * statistics.NormalDist().cdf(bound / sd - reach / sd) - 1) if sd else 1.0,
              **values}
    beyond_noise = abs(d) > limit
    if beyond_noise and abs(d) > bound:
        explained = clock(limit) if clock else None
        if explained:
            return verdict_of(Code.CLOCK, names, **base, values={**values, **explained})
        return verdict_of(Code.REGRESSION if d > 0 else Code.IMPROVEMENT, names, **base, values=values)
    if beyond_noise:
        return verdict_of(Code.SMALL_CHANGE, names, **base, values=values)
    if abs(d) + reach <= bound:
        return verdict_of(Code.SAME, names, **base, values=values)
    return verdict_of(Code.NOISY, names, **base, values={**values, "hides": math.expm1(abs(d) + reach)})


def _status_change(old: BackendEntry, new: BackendEntry, names: tuple[str, str],
                   hardware: tuple[dict, dict] | None) -> dict | None:
    """The verdict when the backend ran in one run only, None when its status did not change."""
    if old.ok == new.ok:
        return None
    values = {"old": old.status_record(), "new": new.status_record()}
    if hardware and not same_hardware(*hardware):
        # A backend that needs CUDA is unavailable on a CPU: another machine, not a software change.
        return verdict_of(Code.OTHER_HARDWARE, names, values={**values, "hardware": [hardware_text(h) for h in hardware]})
    if old.ok:
        return verdict_of(Code.REGRESSION, names, values=values)
    # Newly installed or supported: news, but no performance change to speak of.
    return verdict_of(Code.NOW_AVAILABLE if old.status == "unavailable" else Code.IMPROVEMENT, names, values=values)


def clock_explains(old: dict, new: dict, metric: str, limit: float) -> dict | None:
    """When a change in device time is the clock's, being none in cycles (time x SM clock, as
    nvbench confirms a change: a power cap, or another card of the model, held the clock at another
    speed): {cycles_ratio, clock_mhz: [old, new]}. None when the cycles moved too, or a run read no clock."""
    cycles = [BackendEntry.of(e).stats.metric("device_cycles") for e in (old, new)]
    if metric != "device_ms" or not all(c and c.median for c in cycles):
        return None
    ratio = cycles[1].median / cycles[0].median
    if abs(math.log(ratio)) > limit:
        return None
    return {"cycles_ratio": ratio, "clock_mhz": [cycles[0].get("clock_mhz"), cycles[1].get("clock_mhz")]}


# ---------------------------------------------------------------- a series of runs

def find_step(points: list[tuple[str, dict]], rule: Rule) -> dict | None:
    """The step in a series of one cell's analysed figures ([(entry id, figure)] in time order,
    same hardware; the rule resolved for it, Rule.on): the split whose before and after means differ
    most in units of their noise, when that difference is beyond the noise (the rule's alpha) and
    the margin of runs on other hosts (a series spans cards and days); None without one. Needs 3 runs."""
    usable = [(entry, f) for entry, f in points if f and f.get("noise") and f.get("median")]
    if len(usable) < 3:
        return None
    pair = rule.for_pair(PairType.OTHER_HOST)
    df = min(f["noise"]["df"] for _, f in usable)
    best = None
    for split in range(1, len(usable)):
        before, after = usable[:split], usable[split:]
        shift = _log_mean(after) - _log_mean(before)
        sd = math.sqrt(_mean_variance(before, pair) + _mean_variance(after, pair))
        score = abs(shift) / sd if sd else 0.0
        if (score > stats.t_quantile(stats.two_sided(1 - rule.alpha), df) and abs(shift) > math.log1p(pair.margin)
                and (best is None or score > best["score"])):
            best = {"score": score, "after": usable[split][0], "before": usable[split - 1][0],
                    "ratio": math.exp(shift), "runs": len(usable)}
    return best


def _log_mean(part: list) -> float:
    return sum(math.log(f["median"]) for _, f in part) / len(part)


def _mean_variance(part: list, pair: PairRule) -> float:
    # Each run's figure carries its process noise and its own share of the unseen noise (half of
    # what two runs differ by).
    steady = pair.steady
    return sum(steady.scale * f["noise"]["sigma"] ** 2 / f["noise"]["replicates"] + steady.variance / 2
               for _, f in part) / len(part) ** 2


# ---------------------------------------------------------------- a figure against a published number

def judge_published(figure: dict, published_ms: float, rule: Rule) -> dict:
    """A reproduced figure (median with a prediction interval) against a published number that
    carries no interval: slower/faster when it differs by more than the rule's published margin
    AND the published number lies outside where another run of ours would read (pi95); matches
    otherwise. {flag, ratio, interval (ours, where another run would read), inside (the published
    number within it), why (its words, for the published-numbers section)}."""
    ratio = figure["median"] / published_ms
    interval = figure.get("pi95") or figure.get("ci95")
    inside = bool(interval) and interval[0] <= published_ms <= interval[1]
    fields = {"ratio": ratio, "interval": interval, "inside": inside}
    if abs(ratio - 1) > rule.published_margin and not inside:
        where = (f"outside our 95% prediction interval [{interval[0]:.4g}, {interval[1]:.4g}]" if interval
                 else "and ours has no interval")
        return {"flag": "slower" if ratio > 1 else "faster", **fields,
                "why": f"{ratio - 1:+.1%}, beyond the {rule.published_margin:.0%} margin; published "
                       f"{published_ms:g} ms {where}"}
    return {"flag": "matches", **fields, "why": f"{ratio - 1:+.1%}" + (
        ": published value inside our 95% prediction interval" if inside else
        f": within the {rule.published_margin:.0%} margin")}
