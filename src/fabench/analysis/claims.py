"""What a report may say about two cells of one run: which is faster, that they take the same
time, or that the run cannot tell; and which cells of two variants ran the same code.

A within-run comparison of two cells is the comparison policy's (fabench.analysis.policy) verdict
on them, the first cell taken as the old and the second as the new: "faster" where the difference
is beyond both the noise and the policy's margin, "same" where it lies within the margin, "below
margin" where it is real but smaller than the margin (not a win worth naming), and "cannot tell"
where the noise, an unstable cell or a missing interval hides the answer (the verdict says which).
A run of one process per job (a CPU run) cannot see the noise between processes, so nothing it
measured supports a claim against another cell: "cannot tell", saying so. A publication's numbers
carry no analysis at all: they are compared as they were published, and the claim says so.

Two variants' cells ran the same code when the comparison policy's code identity agrees
(fabench.analysis.policy.same_code: implementation, config values read, launched kernels): then
any difference between them is run-to-run noise, and no claim that one variant is faster is made.
"""

from __future__ import annotations

import math

from fabench.analysis import calibration, policy, verdict_text, within_run
from fabench.analysis.identity import PairType, hardware_identity
from fabench.analysis.figures import METRICS, cell_metric
from fabench.analysis.pairs import Pair, PairNoise, steady
from fabench.analysis.policy import Code, Rule, judge
from fabench.analysis.result_types import BackendEntry, backend_dicts
from fabench.analysis.verdict_text import ONE_PROCESS_WHY

# Claims that name a faster cell: beyond the noise and the margin, or published figures as published.
NAMES_A_WINNER = ("faster", "as published")
# The claim's code where an unstable cell of another job is still beaten by every process (within_run.processes_apart).
SEPARATED = "separated"
ONE_PROCESS = f"{ONE_PROCESS_WHY}, so the run cannot tell a difference from it"


def _published_figure(entry: BackendEntry) -> float | None:
    """The time of a cell that carries no analysis (published numbers), else None."""
    if entry.stats is not None:
        return None
    value = entry.wall_mean_ms
    return value if isinstance(value, (int, float)) else None


def _claim(claim: str, faster: str | None, ratio: float | None, why: str, metric: str | None = None,
           code: str | None = None) -> dict:
    return {"claim": claim, "faster": faster, "ratio": ratio, "why": why, "metric": metric, "code": code,
            "paired": None, "checked": None}


def unsupported(entry: dict | None, metric: str = "wall_mean_ms") -> str | None:
    """Why a cell's figure supports no claim on its own (against a published number, say):
    unstable trials, one process per job, or no noise estimate; None when it does."""
    if entry is None or entry.get("status") != "ok":
        return None
    stats = BackendEntry.of(entry).stats
    figure = stats.metric(metric) if stats else None
    noise = figure.noise if figure else None
    if stats and not stats.stable:
        return "unstable trials"
    if not noise:
        return "no noise estimate"
    return ONE_PROCESS if noise.between == "trials" else None


def compare(a: dict | None, b: dict | None, rule: Rule, names: tuple[str, str] = ("a", "b"),
            published: bool = False, same_job: bool = False, pair_noise: PairNoise | None = None,
            between_runs: float = 0.0) -> dict:
    """What the run may say about two analysed backend entries of it: the policy's verdict
    (fabench.analysis.policy.judge, a taken as the old and b as the new) in a claim's words.

    Returns {claim, faster ("a", "b" or None), ratio (slower over faster, on the judged figure),
    why, metric (the figure judged), code (the policy's reason code, policy.Code)}: claim is "faster" (changed),
    "same" (within the margin), "below margin" (real, but within the margin), "cannot tell",
    "as published" or "not measured"; `faster` is set where the direction is a claim (faster,
    below margin, as published). `names` name the cells in `why`. `published`: the cells are a
    publication's numbers, which carry no analysis: compared as published, and the claim says so.
    `same_job`: the two are backends of one job, interleaved trial by trial in its processes: the
    policy's paired test (within_run.paired) at the process unit, its variance moderated by the run's
    other such pairs (`pair_noise`, pairs.PairNoise); else the verdict between two runs' figures (policy.judge),
    with the unstable exception at the process unit (within_run.processes_apart)."""
    if a is None or b is None or a.get("status") != "ok" or b.get("status") != "ok":
        return _claim("not measured", None, None, "not measured in both", code=Code.MISSING)
    figures = _published_figure(BackendEntry.of(a)), _published_figure(BackendEntry.of(b))
    if published and None not in figures:
        low, high = sorted(figures)
        return _claim("as published", "a" if figures[0] <= figures[1] else "b", high / low if low else None,
                      "published figures, no noise estimate: compared as published", "wall_mean_ms")
    metric = cell_metric(a, b)
    # Paired where the two have partner trials (results from before trials have none: judged as figures).
    if same_job and metric is not None and Pair.of(a, b, metric) is not None:
        verdict = within_run.paired(a, b, metric, rule, pair_noise, names=names, between_runs=between_runs)
    else:
        verdict = judge(a, b, rule, names=names)
    # The verdict's change reads "new against old" between runs; two cells of one run say it as a factor.
    reason = verdict_text.reason(verdict)
    if verdict["ratio"] is None:
        return _claim("cannot tell", None, None, reason, verdict["metric"], verdict["code"])
    return checked(_worded(verdict, reason, a, b, rule, names, same_job), a, b, names)


def _worded(verdict: dict, reason: str, a: dict, b: dict, rule: Rule, names: tuple[str, str], same_job: bool) -> dict:
    """compare's claim from a verdict with a ratio: the faster cell and by what factor, in words."""
    metric, ratio, code = verdict["metric"], verdict["ratio"], verdict["code"]
    faster, factor = ("b", 1 / ratio) if ratio < 1 else ("a", ratio)
    slower = names[0 if faster == "b" else 1]
    why = f"{slower} {factor:.2f}x slower in {METRICS[metric]}: {reason}"
    if verdict["verdict"] == "cannot tell" and code == Code.UNSTABLE and not same_job:
        apart = within_run.processes_apart(a, b, metric, rule)
        if apart is not None:
            return _claim("faster", faster, factor, f"{slower} {factor:.2f}x slower in {METRICS[metric]}: "
                                                    f"{verdict_text.apart_text(apart, rule)}", metric, SEPARATED)
    kind = ("cannot tell" if verdict["verdict"] == "cannot tell" else "faster" if verdict["verdict"] == "changed"
            else "below margin" if code == Code.SMALL_CHANGE else "same")
    found = _claim(kind, faster if kind in ("faster", "below margin") else None, factor, why, metric, code)
    # The paired trials' evidence (within_run.paired), with the side they point to: what a one-process
    # run shows without a test, and the summary says so.
    paired = verdict["values"].get("paired")
    found["paired"] = paired and {**paired, "side": faster}
    return found


def checked(claim: dict, a: dict, b: dict, names: tuple[str, str]) -> dict:
    """The claim (in place; returned) with what the kernels' own time check (graphs against CUPTI,
    fabench.analysis.kernel_check) says of its cells: `checked` "differs" where it disagrees on
    either (the claim's device figure is then in doubt by the check's difference, and `why` says
    so), "agrees" where it agrees on both, else None (not checked, or could not judge)."""
    checks = [BackendEntry.of(e).kernel_time() for e in (a, b)]
    differs = [(name, c) for name, c in zip(names, checks) if c.agrees is False]
    if claim["metric"] != "device_ms":
        claim["checked"] = None
    elif differs:
        claim["checked"] = "differs"
        claim["why"] += "; the graphs' check of the kernels' own time differs for " + ", ".join(
            f"{name} ({c.difference:+.1%}, tolerance {c.low:+.1%} to {c.high:+.1%})" for name, c in differs)
    else:
        claim["checked"] = "agrees" if all(c.agrees for c in checks) else None
    return claim


class WithinRun:
    """The claims on cells of one run's results: two backends of one job (interleaved trial by
    trial in its processes) by the paired test, its variance moderated by the run's other such
    pairs (pairs.PairNoise, computed once per metric); any other two by the verdict between figures.
    A cell's calibrated shift between runs on this card (half the unseen noise the fit gives two
    runs of one card, calibrations.yaml) joins the paired test, so a claim holds for another run
    too; where the fit finds none beyond the process noise the claim's words say it is this run's."""

    def __init__(self, results: list[dict], rule: Rule, published: bool = False):
        self.results, self.rule, self.published = results, rule, published
        self._job = {id(entry): index for index, r in enumerate(results) for entry in backend_dicts(r).values()}
        self._noise: dict[tuple[str, bool], PairNoise | None] = {}
        fit = None if published else calibration.calibration_for(hardware_identity(results))
        # Each of the two cells shifts by its own run effect: sd of one cell's, from the pair's variance.
        same_card = calibration.pair_values(fit, str(PairType.SAME_CARD))["steady"] if fit else None
        self.between_runs = math.sqrt(same_card["noise"] ** 2 / 2) if same_card else 0.0

    def pair_noise(self, metric: str, unsteady: bool = False) -> PairNoise | None:
        """The run's noise of paired cells (pairs.PairNoise, the prior each pair's variance is
        moderated by): of stable pairs, or `unsteady` for a pair with an unstable cell (its own
        noise pools with the unstable pairs too)."""
        if (metric, unsteady) not in self._noise:
            self._noise[metric, unsteady] = PairNoise.of(self.results, metric, unsteady)
        return self._noise[metric, unsteady]

    def claim(self, a: dict | None, b: dict | None, names: tuple[str, str] = ("a", "b")) -> dict:
        same_job = a is not None and b is not None and self._job.get(id(a), -1) == self._job.get(id(b), -2)
        metric = cell_metric(a, b) if same_job else None
        unsteady = same_job and not all(steady(e) for e in (a, b))
        return compare(a, b, self.rule, names=names, published=self.published, same_job=same_job,
                       pair_noise=self.pair_noise(metric, unsteady) if metric else None,
                       between_runs=self.between_runs)


# Which cells ran the same code is the comparison policy's question (one code identity).
same_code = policy.same_code
