"""The comparison policy: the one rule by which every part of the tool calls two figures the same,
changed, or undecided, and the identities (code, hardware, experiment) that say which figures may
be compared at all. compare, step detection, the report's claims, published vs reproduced,
detector-check, the merge and tools/ all ask here.

A cell's change is d = log(new median / old median). Its noise is the two runs' own (their pooled
process noise, fabench.analysis.noise) and what no run sees by itself, which depends on what the
two runs are to each other (identity.PairType: the same card, another card of the host, another
host, a run over several cards) and on whether the cell was held at a power cap
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
Two backends of one job (the report's claims within a run) are interleaved trial by trial in
each process: `paired` applies the same two tests to the mean of their paired log ratios over the
processes, the process the unit (fabench.analysis.pairs). `processes_apart` tells two unstable
cells of different jobs apart by their process medians.
The policy returns codes and values, never sentences: its callers write the words
(fabench.analysis.verdict_text), so a rewording changes no decision and no test of one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields
from enum import StrEnum

from fabench.analysis import calibration, pairs, stats
from fabench.analysis.figures import cell_metric, trial_values
# The identities are part of the policy's interface: callers may ask either module.
from fabench.analysis.identity import (  # noqa: F401
    PairType, code_differences, code_identity, experiment_differences, experiment_identity, hardware_identity,
    hardware_key, hardware_text, hosts_of, launched_kernels, matches_published_hardware, pair_type, same_card,
    same_code, same_hardware)

CONFIG_KEY = "comparison"
RETIRED_KEYS = {("archive", "threshold"): "comparison.margin", ("archive", "tolerance"): "comparison.published_margin",
                (CONFIG_KEY, "between_run"): "the noise between runs is fitted per kind of pair "
                                             "(src/fabench/analysis/calibrations.yaml, pair_types): remove it",
                (CONFIG_KEY, "between_card"): "the noise between cards is fitted per kind of pair "
                                              "(src/fabench/analysis/calibrations.yaml, pair_types): remove it"}


class RuleError(ValueError):
    """A comparison setting that cannot be used: the message names the key and what is expected."""


@dataclass(frozen=True)
class ClassRule:
    """What a pair type's cells of one class (steady, or held at a power cap) are judged by: the
    margin, the share of the runs' process noise the fit kept (`scale`, at most 1) and the unseen
    noise as a variance with its degrees of freedom (None: known exactly, as zero is)."""

    margin: float
    scale: float
    variance: float
    df: float | None

    @classmethod
    def of(cls, values: dict, margin: float | None, unseen_noise: bool) -> "ClassRule":
        if not unseen_noise:
            return cls(margin if margin is not None else values["margin"], 1.0, 0.0, None)
        return cls(margin if margin is not None else values["margin"], values["scale"], values["noise"] ** 2,
                   values["df"])


@dataclass(frozen=True)
class PairRule:
    """What the rule judges one kind of pair by, per class of cell, and the pair type whose fitted
    values these are (`fitted_as`: the pair's own, or the wider one it falls back to)."""

    kind: str
    steady: ClassRule
    capped: ClassRule
    fitted_as: str

    def of(self, capped: bool) -> ClassRule:
        return self.capped if capped else self.steady

    @property
    def margin(self) -> float:
        """The smallest change such a pair can see in a steady cell (a capped cell's is wider)."""
        return self.steady.margin


@dataclass(frozen=True)
class Rule:
    """The comparison rule's parameters (config key `comparison`). The fitted ones (each pair type's
    margin and noise) come from the calibration of the hardware judged (calibrations.yaml, read by
    Rule.of and Rule.on); a `margin` the config sets replaces every pair type's fitted margin
    (`chosen` then names it), `fit` names the fit the others came from. `unseen_noise` false judges by
    the runs' own noise alone (detector-check's trade-off shows what that costs)."""

    margin: float | None = None  # the smallest change called a change, for every pair type; None: fitted per type
    alpha: float = 0.02  # chance that one cell of two runs of one experiment is beyond the noise by chance
    equivalence_alpha: float = 0.05  # chance that a change beyond the margin is called same
    power: float = 0.8  # for the smallest detectable change, stated beside "cannot tell"
    published_margin: float = 0.05  # published (no interval) vs reproduced: a difference beyond this
    unseen_noise: bool = True  # add what no run sees by itself (the fit's, per pair type)
    chosen: tuple = ()  # the fitted values the config set (not taken from the calibration)
    fit: str | None = None  # the calibration fit the other fitted values came from
    hardware_key: tuple | None = None  # the hardware whose fit (or the fallback) filled them; None: the fallback

    def __post_init__(self):
        if self.fit is None:  # built from settings (Rule.of), not a copy of a resolved rule
            fitted = calibration.fit_for(dict(zip(calibration.HARDWARE_KEYS, self.hardware_key))
                                         if self.hardware_key else None)
            object.__setattr__(self, "chosen", tuple(sorted(({"margin"} if self.margin is not None else set())
                                                            | set(self.chosen))))
            object.__setattr__(self, "fit", fitted["name"])
        for name in ("alpha", "equivalence_alpha", "published_margin") + (("margin",) if self.margin is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise RuleError(f"{CONFIG_KEY}.{name}: {value!r}; expected a fraction between 0 and 1 (0.015 for 1.5%)")
        if not isinstance(self.unseen_noise, bool):
            raise RuleError(f"{CONFIG_KEY}.unseen_noise: {self.unseen_noise!r}; expected true or false")
        if isinstance(self.power, bool) or not isinstance(self.power, (int, float)) or not 0.5 <= self.power < 1:
            raise RuleError(f"{CONFIG_KEY}.power: {self.power!r}; expected a probability in [0.5, 1)")

    @classmethod
    def of(cls, config: dict | None, hardware: dict | None = None) -> "Rule":
        """The rule of a workflow config: its `comparison` key; what it leaves out, the fitted values
        of `hardware`'s calibration (else the fallback fit's, calibrations.yaml) and the policy's
        defaults. The one way to build a rule from settings, so every consumer reads the same key.
        Only `comparison` is read: an archived run's config may still hold retired keys, which a
        config about to be used is refused for (refuse_retired); here they are left out."""
        given = (config or {}).get(CONFIG_KEY)
        given = {} if given is None else given
        if not isinstance(given, dict):
            raise RuleError(f"{CONFIG_KEY}: {given!r}; expected a mapping of {', '.join(cls.keys())}")
        given = {k: v for k, v in given.items() if (CONFIG_KEY, k) not in RETIRED_KEYS}
        unknown = sorted(set(given) - set(cls.keys()))
        if unknown:
            raise RuleError(f"{CONFIG_KEY}.{unknown[0]}: unknown key; expected one of {', '.join(cls.keys())}")
        return cls(**{k: v for k, v in given.items() if v is not None},
                   hardware_key=calibration.hardware_key(hardware) if hardware else None)

    def on(self, hardware: dict | None) -> "Rule":
        """This rule for a verdict on `hardware`: the values the config set kept, the others from
        that hardware's fit (the fallback's where it has none)."""
        key = calibration.hardware_key(hardware) if hardware else None
        if key == self.hardware_key or key is None:
            return self
        return Rule.of({CONFIG_KEY: self.as_dict()}, hardware)

    def _fit(self) -> dict:
        return calibration.fit_for(dict(zip(calibration.HARDWARE_KEYS, self.hardware_key)) if self.hardware_key else None)

    def for_pair(self, kind: str) -> PairRule:
        """What this rule judges a pair of `kind` (identity.PairType) by."""
        values = calibration.pair_values(self._fit(), str(kind))
        return PairRule(str(kind), ClassRule.of(values["steady"], self.margin, self.unseen_noise),
                        ClassRule.of(values["capped"], self.margin, self.unseen_noise), values["fitted_as"])

    def within_run_margin(self) -> float:
        """The margin of claims on two cells of one run (paired or told apart): the config's, else
        the same card's, the pair whose noise is nearest a run's own."""
        return self.margin if self.margin is not None else self.for_pair(PairType.SAME_CARD).margin

    def margins(self) -> dict[str, float]:
        """Each pair type's margin under this rule (its fitted one, or the config's for all)."""
        return {str(kind): self.for_pair(kind).margin for kind in PairType}

    def calibrated_on(self, hardware: dict | None) -> bool:
        """Whether this rule is the calibration of `hardware`: it has a fit, its fitted values are
        that fit's (a margin set by hand, even on calibrated hardware, is not) and it adds them."""
        fit = calibration.calibration_for(hardware)
        return fit is not None and fit["name"] == self.fit and not self.chosen and self.unseen_noise

    @staticmethod
    def keys() -> list[str]:
        return [f.name for f in fields(Rule) if f.name not in ("chosen", "fit", "hardware_key")]

    def as_dict(self) -> dict:
        """The rule as a `comparison` config: the values the config set and the policy's own
        parameters (the calibration fills the rest again where it is read: Rule.of)."""
        return {k: getattr(self, k) for k in self.keys() if k != "margin" or "margin" in self.chosen}

    def values(self) -> dict:
        """Every parameter the rule judges by, each pair type's margin included, and where those came from."""
        return {**{k: getattr(self, k) for k in self.keys()}, "margins": self.margins(), "fit": self.fit,
                "chosen": list(self.chosen)}

    def text(self) -> str:
        margins = ", ".join(f"{kind} {margin:.2%}" for kind, margin in self.margins().items())
        return (f"changed (a regression or an improvement) when the median moved beyond the two runs' noise "
                f"(between their processes and, by the kind of pair, what no run sees by itself: at most "
                f"{self.alpha:.1%} of the cells of two runs of one experiment lie beyond it by chance) AND by more "
                f"than the pair type's margin ({margins}); same when the change's "
                f"{1 - 2 * self.equivalence_alpha:.0%} interval lies within that margin (a change beyond the "
                f"noise but within the margin is named `small_change`); "
                f"otherwise cannot tell, saying why (noise, unstable trials, no interval, other hardware, other "
                f"experiment)")


def refuse_retired(config: dict | None) -> None:
    """RuleError naming the successor when a config about to be used sets a retired key
    (`archive.threshold`, `archive.tolerance`, `comparison.between_run`, `comparison.between_card`):
    the workflow and the CLI ask before any job."""
    for (section, key), successor in RETIRED_KEYS.items():
        if key in ((config or {}).get(section) or {}):
            if section == CONFIG_KEY:
                raise RuleError(f"{section}.{key} is no longer read: {successor}")
            default = getattr(Rule(), successor.split(".")[1])
            raise RuleError(f"{section}.{key} is no longer read: set {successor} instead (default "
                            f"{'fitted per kind of pair, calibrations.yaml' if default is None else default})")


class Code(StrEnum):
    """Why a verdict is what it is: the one set of reason codes every caller branches on and
    writes its words by (a str, so it is JSON as it stands)."""

    REGRESSION = "regression"  # changed: slower beyond the noise and the margin, or ok before and not now
    IMPROVEMENT = "improvement"  # changed: faster beyond both, or runs again after failing
    NOW_AVAILABLE = "now_available"  # changed: unavailable before, runs now (news, not a speed-up)
    SAME = "same"  # same: within the noise and the margin
    SMALL_CHANGE = "small_change"  # same: beyond the noise, within the margin
    NOISY = "noisy"  # cannot tell: the noise hides changes past the margin
    UNSTABLE = "unstable"  # cannot tell: a run's trials are unstable
    NO_INTERVAL = "no_interval"  # cannot tell: a run has no noise estimate
    NO_FIGURE = "no_figure"  # cannot tell: no median both runs recorded
    ONE_PROCESS = "one_process"  # cannot tell: one process per job, no noise between processes
    OTHER_HARDWARE = "other_hardware"  # cannot tell: another platform, GPU model or architecture
    OTHER_CODE = "other_code"  # cannot tell: other code where the caller expects repeats
    OTHER_EXPERIMENT = "other_experiment"  # cannot tell: settings that change what is measured differ
    CLOCK = "clock"  # cannot tell: a change in time that is none in clock cycles
    NOT_OK = "not_ok"  # cannot tell: measured in neither run (same failing status in both)
    MISSING = "missing"  # cannot tell: a cell absent from a run (callers that look cells up)


VERDICT = {Code.REGRESSION: "changed", Code.IMPROVEMENT: "changed", Code.NOW_AVAILABLE: "changed",
           Code.SAME: "same", Code.SMALL_CHANGE: "same"}  # every other code: "cannot tell"


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
    return {"status": entry["status"], "failure_kind": entry.get("failure_kind"), "reason": entry.get("reason")}


def _verdict(code: Code, names: tuple[str, str], **fields) -> dict:
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
        return _verdict(Code.OTHER_EXPERIMENT, names, values={"differences": list(experiment)})
    moved = _status_change(old, new, names, hardware)
    if moved:
        return moved
    if old["status"] != "ok":
        return _verdict(Code.NOT_OK, names, values={"old": status_of(old), "new": status_of(new)})
    if expect_same_code and not same_code(old, new):
        return _verdict(Code.OTHER_CODE, names, values={"differences": code_differences(old, new)})
    metric = cell_metric(old, new)
    if metric is None:
        return _verdict(Code.NO_FIGURE, names)
    a, b = old["stats"][metric], new["stats"][metric]
    base = {"metric": metric, "ratio": b["median"] / a["median"]}
    if hardware and not same_hardware(*hardware):
        return _verdict(Code.OTHER_HARDWARE, names, **base, values={"hardware": [hardware_text(h) for h in hardware]})
    unstable = {i: e["stats"].get("unstable_reason") for i, e in zip(names, (old, new))
                if not e["stats"].get("stable", True)}
    if unstable:
        return _verdict(Code.UNSTABLE, names, **base, values={"unstable": unstable, "unstable_codes": {
            i: e["stats"].get("unstable_codes") for i, e in zip(names, (old, new)) if i in unstable}})
    one_process = [i for i, f in zip(names, (a, b)) if (f.get("noise") or {}).get("between") == "trials"]
    if one_process:
        return _verdict(Code.ONE_PROCESS, names, **base, values={"one_process": one_process})
    rule = rule.on(hardware[0] if hardware else None)  # the fitted values of the hardware judged
    kind = kind or (pair_type(*hardware) if hardware else PairType.SAME_CARD)
    pair = rule.for_pair(kind)
    capped = any(e["stats"].get("capped") for e in (old, new)) and metric == "device_ms"
    judged_by = pair.of(capped)
    noise = change_noise(a, b, judged_by)
    if noise is None:
        return _verdict(Code.NO_INTERVAL, names, **base)
    # Whether the rule is the calibration of this hardware (fabench.analysis.calibration).
    calibrated = rule.calibrated_on(hardware[0]) if hardware else None
    sd, df = noise
    pair_values = {"pair": {"kind": pair.kind, "fitted_as": pair.fitted_as, "capped": capped}}
    verdict = _tests(math.log(base["ratio"]), sd, df, rule, names, base, pair_values,
                     lambda limit: clock_explains(old, new, metric, limit), margin=judged_by.margin)
    return calibration.mark(verdict, hardware, calibrated)


def _tests(d: float, sd: float, df: float, rule: Rule, names: tuple[str, str], base: dict, values: dict,
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
            return _verdict(Code.CLOCK, names, **base, values={**values, **explained})
        return _verdict(Code.REGRESSION if d > 0 else Code.IMPROVEMENT, names, **base, values=values)
    if beyond_noise:
        return _verdict(Code.SMALL_CHANGE, names, **base, values=values)
    if abs(d) + reach <= bound:
        return _verdict(Code.SAME, names, **base, values=values)
    return _verdict(Code.NOISY, names, **base, values={**values, "hides": math.expm1(abs(d) + reach)})


def _status_change(old: dict, new: dict, names: tuple[str, str], hardware: tuple[dict, dict] | None) -> dict | None:
    """The verdict when the backend ran in one run only, None when its status did not change."""
    old_ok, new_ok = old["status"] == "ok", new["status"] == "ok"
    if old_ok == new_ok:
        return None
    values = {"old": status_of(old), "new": status_of(new)}
    if hardware and not same_hardware(*hardware):
        # A backend that needs CUDA is unavailable on a CPU: another machine, not a software change.
        return _verdict(Code.OTHER_HARDWARE, names, values={**values, "hardware": [hardware_text(h) for h in hardware]})
    if old_ok:
        return _verdict(Code.REGRESSION, names, values=values)
    # Newly installed or supported: news, but no performance change to speak of.
    return _verdict(Code.NOW_AVAILABLE if old["status"] == "unavailable" else Code.IMPROVEMENT, names, values=values)


def clock_explains(old: dict, new: dict, metric: str, limit: float) -> dict | None:
    """When a change in device time is the clock's, being none in cycles (time x SM clock, as
    nvbench confirms a change: a power cap, or another card of the model, held the clock at another
    speed): {cycles_ratio, clock_mhz: [old, new]}. None when the cycles moved too, or a run read no clock."""
    cycles = [(e["stats"].get("device_cycles") or {}) for e in (old, new)]
    if metric != "device_ms" or not all(c.get("median") for c in cycles):
        return None
    ratio = cycles[1]["median"] / cycles[0]["median"]
    if abs(math.log(ratio)) > limit:
        return None
    return {"cycles_ratio": ratio, "clock_mhz": [cycles[0]["clock_mhz"], cycles[1]["clock_mhz"]]}


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


# ---------------------------------------------------------------- two cells of one run

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
        return _verdict(Code.NO_FIGURE, names)
    d = pair.mean
    trials = {"trials": len(pair.ratios), "processes": pair.processes,
              "consistent": sum(1 for r in pair.ratios if r * d > 0), "test": "paired",
              "ran_first": dict(zip(names[::-1], pair.ran_first)) if pair.ran_first else None,
              "least": math.exp(min(abs(r) for r in pair.ratios)) if all(r * d > 0 for r in pair.ratios) else None}
    base = {"metric": metric, "ratio": math.exp(d)}
    doubts = {i: e["stats"].get("unstable_reason") for i, e in zip(names, (a, b)) if pairs.doubted(e)}
    if doubts:
        return _verdict(Code.UNSTABLE, names, **base, values={"unstable": doubts, "paired": trials, "unstable_codes": {
            i: e["stats"].get("unstable_codes") for i, e in zip(names, (a, b)) if i in doubts}})
    if pair.processes < 2:
        return _verdict(Code.ONE_PROCESS, names, **base, values={"one_process": list(names), "paired": trials})
    variance, df = (pooled.moderated(pair) if pooled else
                    (max(pair.variance, pair.within_mean_variance), pair.processes - 1))
    sd = math.sqrt(variance / pair.processes + 2 * between_runs ** 2)
    t = abs(d) / sd if sd else math.inf
    trials.update(p=stats.t_two_sided_p(t, df), df=df, pooled_pairs=pooled.pairs if pooled else None,
                  between_runs=between_runs)
    return _tests(d, sd, df, rule, names, base, {"paired": trials})


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
        values, processes = trial_values(entry.get("trials") or [], metric)
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
