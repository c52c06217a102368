"""The comparison rule's parameters and reason codes: what fabench.analysis.policy judges by (the
config key `comparison`, each kind of pair's margin and noise from the calibration) and the codes
every verdict carries. Built once from settings (Rule.of), resolved per hardware (Rule.on)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

from fabench.analysis import calibration
from fabench.analysis.identity import PairType

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
                raise RuleError(f"{CONFIG_KEY}.{name}: {value!r}; expected a fraction between 0 and 1 (0.02 for 2%)")
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
