"""The comparison policy: the one rule by which every part of the tool calls two figures the same,
changed, or undecided, and the identities (code, hardware, experiment) that say which figures may
be compared at all. compare, step detection, the report's claims, published vs reproduced,
detector-check, the merge and tools/ all ask here.

A cell's change is d = log(new median / old median); its noise is the two runs' pooled noise
(fabench.analysis.noise): sd = sqrt(sigma_old^2 / P_old + sigma_new^2 / P_new), with df degrees of
freedom. Two tests on it, as asv and nvbench do (docs/archive.md compares them):
  beyond the noise   |d| > t(1 - alpha/2, df) * sd: at most `alpha` of the cells of two runs of one
                     experiment on one card are beyond the noise by chance;
  within the margin  the change's (1 - 2 * equivalence_alpha) interval, d +- t(1 - equivalence_alpha,
                     df) * sd, lies inside +-log(1 + margin) (two one-sided tests: a change beyond
                     the margin is called same at most `equivalence_alpha` of the time).
The verdict:
  changed (regression | improvement)  beyond the noise and |ratio - 1| > margin;
  same, flag `small change`           beyond the noise but within the margin: real, too small to matter;
  same, flag `unchanged`              within the noise and within the margin;
  cannot tell                         neither (`noisy`: the noise hides changes past the margin), or a
                                      run is unstable, has no interval, ran on other hardware, other
                                      code (where the caller expects the same), another experiment,
                                      or the change is the SM clock's (`clock`).
The margin is the change a user cares about; its default is chosen from the measured noise between
runs on one card and on two cards of one GPU model (docs/archive.md, "The comparison rule").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from fabench.analysis import calibration, stats
from fabench.analysis.figures import METRICS, cell_metric
# The identities are part of the policy's interface: callers may ask either module.
from fabench.analysis.identity import (  # noqa: F401
    code_differences, code_identity, experiment_differences, experiment_identity, hardware_identity, hardware_key,
    hardware_text, launched_kernels, matches_published_hardware, same_card, same_code, same_hardware)

CONFIG_KEY = "comparison"
RETIRED_KEYS = {("archive", "threshold"): "comparison.margin", ("archive", "tolerance"): "comparison.published_margin"}


class RuleError(ValueError):
    """A comparison setting that cannot be used: the message names the key and what is expected."""


@dataclass(frozen=True)
class Rule:
    """The comparison rule's parameters (config key `comparison`)."""

    margin: float = 0.0135  # the smallest change called a regression or improvement
    alpha: float = 0.02  # chance that one cell of two runs of one experiment is beyond the noise by chance
    equivalence_alpha: float = 0.05  # chance that a change beyond the margin is called same
    power: float = 0.8  # for the smallest detectable change, stated beside "cannot tell"
    published_margin: float = 0.05  # published (no interval) vs reproduced: a difference beyond this

    def __post_init__(self):
        for name in ("margin", "alpha", "equivalence_alpha", "published_margin"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise RuleError(f"{CONFIG_KEY}.{name}: {value!r}; expected a fraction between 0 and 1 (0.015 for 1.5%)")
        if isinstance(self.power, bool) or not isinstance(self.power, (int, float)) or not 0.5 <= self.power < 1:
            raise RuleError(f"{CONFIG_KEY}.power: {self.power!r}; expected a probability in [0.5, 1)")

    @classmethod
    def from_config(cls, config: dict | None) -> "Rule":
        """The rule from a workflow config (its `comparison` key; defaults for what it leaves out).
        The retired `archive.threshold` and `archive.tolerance` are refused, naming their successor."""
        config = config or {}
        for (section, key), successor in RETIRED_KEYS.items():
            if key in (config.get(section) or {}):
                raise RuleError(f"{section}.{key} is no longer read: set {successor} instead "
                                f"(default {getattr(DEFAULT_RULE, successor.split('.')[1])})")
        given = config.get(CONFIG_KEY) or {}
        if not isinstance(given, dict):
            raise RuleError(f"{CONFIG_KEY}: {given!r}; expected a mapping of {', '.join(cls.keys())}")
        unknown = sorted(set(given) - set(cls.keys()))
        if unknown:
            raise RuleError(f"{CONFIG_KEY}.{unknown[0]}: unknown key; expected one of {', '.join(cls.keys())}")
        return cls(**{k: v for k, v in given.items() if v is not None})

    @staticmethod
    def keys() -> list[str]:
        return [f.name for f in fields(Rule)]

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        return (f"changed (a regression or an improvement) when the median moved beyond the two runs' pooled noise "
                f"(at most {self.alpha:.1%} of the cells of two runs of one experiment lie beyond it by chance) AND by "
                f"more than the margin of {self.margin:.2%}; same when the change's "
                f"{1 - 2 * self.equivalence_alpha:.0%} interval lies within +-{self.margin:.2%} (a change beyond the "
                f"noise but within the margin is named `small change`); "
                f"otherwise cannot tell, saying why (noise, unstable trials, no interval, other hardware, other "
                f"experiment)")


DEFAULT_RULE = Rule()


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


def noise_limit(sd: float, df: int, rule: Rule = DEFAULT_RULE) -> float:
    """The |log change| beyond which a change is more than the noise (at the rule's alpha)."""
    return stats.t_quantile(stats.two_sided(1 - rule.alpha), df) * sd


def detectable(sd: float, df: int, rule: Rule = DEFAULT_RULE) -> float:
    """The smallest relative change called changed with the rule's power, for this noise."""
    limit = max(noise_limit(sd, df, rule), math.log1p(rule.margin))
    return math.expm1(limit + stats.t_quantile(rule.power, df) * sd)


def not_ok_text(entry: dict) -> str:
    kind = f" ({entry['failure_kind']})" if entry.get("failure_kind") else ""
    return f"{entry['status']}{kind}: {entry.get('reason') or 'no reason recorded'}"


def _verdict(verdict: str, flag: str, why: str, **values) -> dict:
    return {"verdict": verdict, "flag": flag, "why": why, "metric": None, "ratio": None, "interval": None,
            "detectable": None, **values}


# Why a run of one process per job (a CPU run) supports no verdict between runs, in every caller's words.
ONE_PROCESS_WHY = "one process per job: the noise between processes is not estimated"


def judge(old: dict, new: dict, rule: Rule = DEFAULT_RULE, names: tuple[str, str] = ("old", "new"),
          hardware: tuple[dict, dict] | None = None, experiment: list[str] | None = None,
          expect_same_code: bool = False) -> dict:
    """The verdict on one cell: two analysed backend entries (old, new) of two runs.

    Returns {verdict, flag, why, metric, ratio, interval (of the ratio), detectable}. verdict is
    changed / same / cannot tell; flag: regression, improvement, now available (changed);
    unchanged, small change (same); noisy, unstable, not comparable, hardware, clock, other code,
    other experiment, one process, not measured (cannot tell). `hardware` holds both runs' hardware identities,
    `experiment` the differences between the runs' experiments (experiment_differences), and
    `expect_same_code` says that the two are repeats (detector-check), so other code is no repeat."""
    if experiment:
        return _verdict("cannot tell", "other experiment", "another experiment: " + "; ".join(experiment))
    moved = _status_change(old, new, names, hardware)
    if moved:
        return moved
    if old["status"] != "ok":
        return _verdict("cannot tell", "not measured", f"{new['status']} in both")
    if expect_same_code and not same_code(old, new):
        return _verdict("cannot tell", "other code", "other code: " + ", ".join(code_differences(old, new)))
    metric = cell_metric(old, new)
    if metric is None:
        return _verdict("cannot tell", "not comparable", "no median recorded in both")
    a, b = old["stats"][metric], new["stats"][metric]
    ratio = b["median"] / a["median"]
    change = f"{ratio - 1:+.2%} {METRICS[metric]}"
    base = {"metric": metric, "ratio": ratio}
    if hardware and not same_hardware(*hardware):
        return _verdict("cannot tell", "hardware", f"{change}, but the hardware changed ({hardware_text(hardware[0])} "
                                                  f"-> {hardware_text(hardware[1])}): not a software change", **base)
    unstable = [f"{i}: {e['stats'].get('unstable_reason') or 'unstable'}" for i, e in zip(names, (old, new))
                if not e["stats"].get("stable", True)]
    if unstable:
        return _verdict("cannot tell", "unstable", f"{change}; trials unstable in " + "; ".join(unstable), **base)
    one_process = [i for i, f in zip(names, (a, b)) if (f.get("noise") or {}).get("between") == "trials"]
    if one_process:
        return _verdict("cannot tell", "one process", f"{change}; {ONE_PROCESS_WHY} "
                        f"({' and '.join(one_process)}), and it is what separates two runs", **base)
    noise = change_noise(a, b)
    if noise is None:
        return _verdict("cannot tell", "not comparable", f"{change}; no noise estimate in both runs", **base)
    # Whether the rule's margin and floor were fitted on this hardware (fabench.analysis.calibration).
    return calibration.mark(_by_rule(old, new, metric, ratio, noise, rule, base), hardware)


def _by_rule(old: dict, new: dict, metric: str, ratio: float, noise: tuple[float, int], rule: Rule, base: dict) -> dict:
    sd, df = noise
    limit = noise_limit(sd, df, rule)
    d = math.log(ratio)
    reach = stats.t_quantile(1 - rule.equivalence_alpha, df) * sd
    base.update(interval=[math.exp(d - reach), math.exp(d + reach)], detectable=detectable(sd, df, rule))
    change = f"{ratio - 1:+.2%} {METRICS[metric]}"
    span = (f"{1 - 2 * rule.equivalence_alpha:.0%} interval {base['interval'][0] - 1:+.2%} .. "
            f"{base['interval'][1] - 1:+.2%}")
    margin = math.log1p(rule.margin)
    beyond_noise = abs(d) > limit
    if beyond_noise and abs(d) > margin:
        moved = clock_explains(old, new, metric, limit)
        if moved:
            return _verdict("cannot tell", "clock", f"{change}, {moved}", **base)
        return _verdict("changed", "regression" if ratio > 1 else "improvement",
                        f"{change} ({span}): beyond the noise and the {rule.margin:.2%} margin", **base)
    if beyond_noise:
        return _verdict("same", "small change", f"{change} ({span}): a real change, but within the "
                                                f"{rule.margin:.2%} margin", **base)
    if abs(d) + reach <= margin:
        return _verdict("same", "unchanged", f"{change} ({span}): within the noise and the {rule.margin:.2%} margin",
                        **base)
    return _verdict("cannot tell", "noisy", f"{change} ({span}): within the noise, which hides changes up to "
                                            f"{math.expm1(abs(d) + reach):.1%}, more than the {rule.margin:.2%} margin",
                    **base)


def _status_change(old: dict, new: dict, names: tuple[str, str], hardware: tuple[dict, dict] | None) -> dict | None:
    """The verdict when the backend ran in one run only, None when its status did not change."""
    old_ok, new_ok = old["status"] == "ok", new["status"] == "ok"
    if old_ok == new_ok:
        return None
    moved = f"{'ok' if old_ok else old['status']} -> {'ok' if new_ok else new['status']}"
    if hardware and not same_hardware(*hardware):
        # A backend that needs CUDA is unavailable on a CPU: another machine, not a software change.
        return _verdict("cannot tell", "hardware", f"{moved}, but the hardware changed "
                                                  f"({hardware_text(hardware[0])} -> {hardware_text(hardware[1])})")
    if old_ok:
        return _verdict("changed", "regression", f"was ok in {names[0]}, now {not_ok_text(new)}")
    if old["status"] == "unavailable":
        # Newly installed or supported: news, but no performance change to speak of.
        return _verdict("changed", "now available", f"runs now (was {not_ok_text(old)} in {names[0]})")
    return _verdict("changed", "improvement", f"runs again (was {not_ok_text(old)} in {names[0]})")


def clock_explains(old: dict, new: dict, metric: str, limit: float) -> str | None:
    """Why a change in device time is the clock's, when it is none in cycles (time x SM clock, as
    nvbench confirms a change): a power cap, or another card of the model, held the clock at
    another speed. None when the cycles moved too, or a run read no clock."""
    cycles = [(e["stats"].get("device_cycles") or {}) for e in (old, new)]
    if metric != "device_ms" or not all(c.get("median") for c in cycles):
        return None
    ratio = cycles[1]["median"] / cycles[0]["median"]
    if abs(math.log(ratio)) > limit:
        return None
    return (f"but {ratio - 1:+.2%} in cycles (time x SM clock, {cycles[0]['clock_mhz']:.0f} -> "
            f"{cycles[1]['clock_mhz']:.0f} MHz): the clock moved, not the kernel's work")


# ---------------------------------------------------------------- a series of runs

def find_step(points: list[tuple[str, dict]], rule: Rule = DEFAULT_RULE) -> dict | None:
    """The step in a series of one cell's analysed figures ([(entry id, figure)] in time order,
    same hardware): the split whose before and after means differ most in units of their noise,
    when that difference is beyond the noise (the rule's alpha) and the rule's margin; None
    without one. Needs 3 runs."""
    usable = [(entry, f) for entry, f in points if f and f.get("noise") and f.get("median")]
    if len(usable) < 3:
        return None
    df = min(f["noise"]["df"] for _, f in usable)
    best = None
    for split in range(1, len(usable)):
        before, after = usable[:split], usable[split:]
        shift = _log_mean(after) - _log_mean(before)
        sd = math.sqrt(_mean_variance(before) + _mean_variance(after))
        score = abs(shift) / sd if sd else 0.0
        if (score > stats.t_quantile(stats.two_sided(1 - rule.alpha), df) and abs(shift) > math.log1p(rule.margin)
                and (best is None or score > best["score"])):
            best = {"score": score, "after": usable[split][0], "before": usable[split - 1][0],
                    "ratio": math.exp(shift), "runs": len(usable)}
    return best


def _log_mean(part: list) -> float:
    return sum(math.log(f["median"]) for _, f in part) / len(part)


def _mean_variance(part: list) -> float:
    return sum(f["noise"]["sigma"] ** 2 / f["noise"]["replicates"] for _, f in part) / len(part) ** 2


# ---------------------------------------------------------------- a figure against a published number

def judge_published(figure: dict, published_ms: float, rule: Rule = DEFAULT_RULE) -> dict:
    """A reproduced figure (median with a prediction interval) against a published number that
    carries no interval: slower/faster when it differs by more than the rule's published margin
    AND the published number lies outside where another run of ours would read (pi95); matches
    otherwise. {flag, ratio, why}."""
    ratio = figure["median"] / published_ms
    interval = figure.get("pi95") or figure.get("ci95")
    inside = bool(interval) and interval[0] <= published_ms <= interval[1]
    if abs(ratio - 1) > rule.published_margin and not inside:
        where = (f"outside our 95% prediction interval [{interval[0]:.4g}, {interval[1]:.4g}]" if interval
                 else "and ours has no interval")
        return {"flag": "slower" if ratio > 1 else "faster", "ratio": ratio,
                "why": f"{ratio - 1:+.1%}, beyond the {rule.published_margin:.0%} margin; published "
                       f"{published_ms:g} ms {where}"}
    return {"flag": "matches", "ratio": ratio, "why": f"{ratio - 1:+.1%}" + (
        ": published value inside our 95% prediction interval" if inside else
        f": within the {rule.published_margin:.0%} margin")}
