"""The summary at the top of a report: at most MAX_LINES lines, each the comparison policy's answer
to one question, each linking to the part of the report it summarises.

    fastest      per shape group (the head_dim tables) of the last variant, the backend the policy
                 finds faster than every other at every shape (tied ones: the same within its
                 margin), judged on its figure (device time on a GPU, wall-clock on a CPU), its lead
                 in the figure the linked table shows (TABLE_FIGURES) and the variant whose jobs
                 measured the cells; else no clear winner, and why
    tuning       the last variant's Triton-role cells against the first's: the largest gain, the
                 policy's claim on it and its claims over all shapes
    claims       the published claims re-tested (report.sections.published_claims): held, failed,
                 cannot tell, and why they cannot be told
    precision    the median 95% CI half-width of the ok cells (relative to their median), the
                 unstable cells, or that one process per job gives no interval between runs
    time         the measure jobs' span, jobs and processes, and the job that took the longest
                 (from the results' own start and finish)
    decided      how many of those questions this run answered, and where a judged example is
                 when it answered not all

Every verdict is the policy's (fabench.analysis.claims over fabench.analysis.policy): this module
sets no threshold of its own. It computes values and codes; templates/sections/summary.md.j2
writes the words. Compare's page has its own: fabench.report.sections.compare_summary.
"""

from __future__ import annotations

from datetime import datetime

from fabench.analysis import stats
from fabench.analysis.figures import METRICS, run_metric, shown_figure
from fabench.analysis.result_types import backend_dicts, cell_stats, method_of, provenance_of
from fabench.report.format import heading_anchor as anchor, md_text
from fabench.report.model import Run
from fabench.report.sections import published_claims, results
from fabench.report.sections.timeline import time_line

MAX_LINES = 8
MAX_GROUPS = 2  # shape groups with a line of their own; the fastest table covers the rest
# Claims by which the policy separates two cells, or finds them alike (fabench.analysis.claims).
TIED = ("same", "below margin")
# The figure the linked table (All measured backends) shows for the judged metric, in words, and how
# it is read from an entry: a lead on the summary's line is the ratio of the figures that table shows.
TABLE_FIGURES = {"device_ms": ("device medians", lambda entry: (entry.get("device_ms") or {}).get("median")),
                 "wall_mean_ms": ("wall-clock means", lambda entry: entry.get("wall_mean_ms"))}
# A judged run of every question the summary asks, in the checkout (examples/h200/README.md says
# what it is): where this run decides not all, the summary points there.
JUDGED_EXAMPLE = {"command": "fabench compare --root examples/h200/archive", "report": "examples/h200/report.md"}


# ---------------------------------------------------------------- the fastest backend

def ranked_backends(result: dict, metric: str) -> list[tuple[str, dict, float]]:
    """(name, entry, median) of the result's backends that ran cleanly, fastest first."""
    found = []
    for name, entry in backend_dicts(result).items():
        # Results recorded before trials have no analysed figure: their wall mean is ranked, and
        # the policy, finding no noise estimate, tells none of them apart.
        figure = shown_figure(entry, metric).get("median") or (entry.get("wall_mean_ms") if metric == "wall_mean_ms" else None)
        median = figure if entry["status"] == "ok" else None
        if median:
            found.append((name, entry, median))
    return sorted(found, key=lambda item: (item[2], item[0]))


def shape_leaders(run: Run, result: dict, metric: str) -> dict | None:
    """At one shape, in order of the judged median: the leaders (the fastest backend and each
    next one the policy does not put behind a leader: the same within its margin, or `untold`,
    with the policy's reason codes), then the first backend it finds slower than a leader (`beaten`,
    with that factor): the fastest backend is among the leaders. `beaten` None where the
    policy puts no backend behind them."""
    ranked = ranked_backends(result, metric)
    if len(ranked) < 2:
        return None
    leaders, untold, trials_lead = [ranked[0]], [], None
    for name, entry, _ in ranked[1:]:
        verdicts = [run.claim(entry, lead, names=(name, lead_name)) for lead_name, lead, _ in leaders]
        if trials_lead is None:
            trials_lead = _trials_lead(ranked[0][0], verdicts[0], run.rule.within_run_margin(),
                                       table_ratio(entry, ranked[0][1], metric))
        behind = [(v, lead) for v, (_, lead, _) in zip(verdicts, leaders)
                  if v["claim"] in results.NAMES_A_WINNER and v["faster"] == "b"]
        if behind:
            return {"leaders": [n for n, _, _ in leaders], "untold": untold, "beaten": name,
                    "ratio": table_ratio(entry, behind[0][1], metric), "trials_lead": None,
                    "measured_in": measured_in(result, [*leaders, (name, entry, None)])}
        untold += [str(v["code"] or v["claim"]) for v in verdicts if v["claim"] not in TIED]
        leaders.append((name, entry, None))
    return {"leaders": [n for n, _, _ in leaders], "untold": untold, "beaten": None, "ratio": None,
            "trials_lead": trials_lead or None, "measured_in": measured_in(result, ranked[:2])}


def table_ratio(slower: dict, faster: dict, metric: str) -> float | None:
    """The slower entry's figure over the faster's, in the figure the linked table shows."""
    read = TABLE_FIGURES[metric][1]
    a, b = read(slower), read(faster)
    return a / b if a and b else None


def measured_in(result: dict, compared: list[tuple]) -> dict[str, list[str]]:
    """{variant: backend names} of the compared entries, by the variant whose jobs measured them (a
    backend measured once per shape is shown in every variant, marked `measured_in`)."""
    found: dict[str, list[str]] = {}
    for name, entry, _ in compared:
        found.setdefault(entry.get("measured_in") or result["variant"], []).append(name)
    return found


def _trials_lead(leader: str, verdict: dict, margin: float, ratio: float | None) -> dict | False:
    """Where two backends of one job ran in one process (no test: `one_process`), the fastest's lead
    when every paired trial has it ahead of the next by more than the rule's margin: {leader, least
    (the smallest paired factor), ratio (in the table's figure)}; False otherwise."""
    paired = verdict.get("paired") or {}
    if (verdict["code"] != "one_process" or paired.get("side") != "b" or not paired.get("least")
            or paired["least"] <= 1 + margin or ratio is None):
        return False
    return {"leader": leader, "least": paired["least"], "ratio": ratio}


def one_process_lead(run: Run, shapes: list[tuple[dict, dict]]) -> dict | None:
    """The backend every paired trial put ahead of the next at every shape, in a run of one process
    a job (which tests no difference), and the setting that would test it; None where there is none."""
    leads = [s["trials_lead"] for _, s in shapes]
    if not leads or not all(leads) or len({lead["leader"] for lead in leads}) > 1:
        return None
    label = _labeller(run)(leads[0]["leader"])
    return {"leader": label, "least": min(lead["least"] for lead in leads),
            "ratios": [min(lead["ratio"] for lead in leads), max(lead["ratio"] for lead in leads)]}


def repeats_setting(run: Run) -> str:
    """The setting that runs each job in two processes (a CPU host's config key, else the GPU's)."""
    return f"{run.platform.settings_key}: {{repeats: 2}}"


def group_line(run: Run, head_dim: int, group: list[dict], metric: str) -> dict:
    """One shape group's answer. `winner`: the same leaders at every shape, ahead of the next
    backend (one, or several the policy finds the same or cannot tell apart: `untold` names
    where and why); `untold`: the policy puts no backend behind another at any shape; else `no
    clear winner`, with the leaders per shape (`split`)."""
    shapes = [(r, shape_leaders(run, r, metric)) for r in group]
    shapes = [(r, s) for r, s in shapes if s is not None]
    label = _labeller(run)
    line = {"head_dim": head_dim, "shapes": len(group), "metric": METRICS[metric], "code": "no clear winner",
            "figure": TABLE_FIGURES[metric][0], "leaders": [], "ratios": None, "beaten": [], "untold": [],
            "reasons": [], "split": [], "trials_lead": None, "setting": None,
            "measured_in": measured_words(run, [s["measured_in"] for _, s in shapes], label)}
    if not shapes:
        return {**line, "code": "not measured"}
    line.update(_untold(run, shapes))
    if all(s["beaten"] is None for _, s in shapes):
        # The policy puts no backend behind another anywhere; one process a job may still show one
        # ahead in every paired trial, untested: the line says so, and which setting tests it.
        return {**line, "code": "untold", "trials_lead": one_process_lead(run, shapes)}
    if len({tuple(sorted(s["leaders"])) for _, s in shapes}) > 1 or any(s["beaten"] is None for _, s in shapes):
        return {**line, "split": [{"shape": md_text(run.shape_name(r["shape"])),
                                   "leaders": [label(n) for n in s["leaders"]]} for r, s in shapes]}
    ratios = [s["ratio"] for _, s in shapes]
    return {**line, "code": "winner", "leaders": [label(n) for n in shapes[0][1]["leaders"]],
            "ratios": [min(ratios), max(ratios)],
            "beaten": [label(n) for n in dict.fromkeys(s["beaten"] for _, s in shapes)]}


def _labeller(run: Run):
    """A backend's name -> its label as the run's first result gives it (the name where it has none), escaped."""
    first = backend_dicts(run.first)
    return lambda name: md_text(first.get(name, {}).get("label") or name)


def _untold(run: Run, shapes: list[tuple[dict, dict]]) -> dict:
    """group_line's fields on the shapes where the policy told no leader apart: where, why, and the
    setting that would test them."""
    untold = [(r, s) for r, s in shapes if s["untold"]]
    return {"untold": [md_text(run.shape_name(r["shape"])) for r, _ in untold],
            "reasons": [md_text(results.UNTOLD_WORDS.get(f, f)) for f in dict.fromkeys(
                f for _, s in untold for f in s["untold"])],
            # One process a job tests no pair: the setting that gives the paired test its second process.
            "setting": repeats_setting(run) if any("one_process" in s["untold"] for _, s in untold) else None}


def measured_words(run: Run, found: list[dict[str, list[str]]], label) -> dict:
    """Which variant's jobs measured the cells a group line compares: `variant` (the label its line
    names: the last variant's, or the one variant that measured them all) and `once` (the backends
    of that line measured once per shape in another variant's jobs and shown in every table)."""
    last = run.variants[-1]
    by_variant: dict[str, list[str]] = {}
    for one in found:
        for variant, names in one.items():
            by_variant.setdefault(variant, [])
            by_variant[variant] += [n for n in names if n not in by_variant[variant]]
    if len(by_variant) == 1 and last not in by_variant:
        only = next(iter(by_variant))
        return {"variant": md_text(run.variant_label(only)), "once": [], "shown_in_all": len(run.variants) > 1}
    return {"variant": md_text(run.variant_label(last)), "shown_in_all": False,
            "once": [{"variant": md_text(run.variant_label(v)), "backends": [label(n) for n in names]}
                     for v, names in by_variant.items() if v != last]}


def fastest(run: Run) -> dict:
    metric = run_metric(run.results)
    last = run.variants[-1]
    groups = [group_line(run, d, g, metric) for d, g in run.head_dim_groups(last)]
    return {"variant": md_text(run.variant_label(last)), "groups": groups[:MAX_GROUPS],
            "more_groups": len(groups[MAX_GROUPS:]), "main_head_dim": run.main_head_dim,
            "anchor": anchor("All measured backends")}


# ---------------------------------------------------------------- the tuned config

def tuning(run: Run) -> dict | None:
    """The Triton role's last variant against its first, shape by shape, by the policy: the
    largest gain on the judged figure with its claim, and how many shapes each claim has."""
    if len(run.variants) < 2:
        return None
    first, last = run.variants[0], run.variants[-1]
    line = {"first": md_text(run.variant_label(first)), "last": md_text(run.variant_label(last)),
            "backend": md_text(run.label("triton")), "anchor": anchor(md_text(run.heading(last)))}
    if results.same_code_variants(run):
        return {**line, "code": "same code"}
    names = (run.variant_label(first), run.variant_label(last))
    judged = []
    for shape, before, after in results.triton_pairs(run):
        claim = run.claim(before, after, names=names)
        gain = table_ratio(before, after, claim["metric"]) if claim["metric"] in TABLE_FIGURES else None
        if gain:
            judged.append((shape, claim, gain))  # first over last, in the table's figure: above 1 a gain
    if not judged:
        return {**line, "code": "not measured"}
    shape, claim, gain = max(judged, key=lambda j: j[2])
    counts: dict[str, int] = {}
    for _, c, _ in judged:
        kind = {"a": "slower", "b": "faster"}[c["faster"]] if c["claim"] in results.NAMES_A_WINNER else c["claim"]
        counts[kind] = counts.get(kind, 0) + 1
    return {**line, "code": "compared", "shape": md_text(run.shape_name(shape)), "gain": gain,
            "claim": claim["claim"], "faster": claim["faster"], "reason_code": claim["code"] and str(claim["code"]),
            "metric": METRICS.get(claim["metric"], "n/a"), "figure": TABLE_FIGURES[claim["metric"]][0],
            "reason": md_text(results.UNTOLD_WORDS.get(claim["code"], claim["code"] or "")), "counts": counts,
            "shapes": len(judged)}


# ---------------------------------------------------------------- claims, precision, time

def claims(run: Run, published: dict | None) -> dict | None:
    section = published_claims.context(run, published)
    if section is None:
        return None
    return {"counts": section["counts"], "causes": section["causes"], "total": len(section["rows"]),
            "anchor": anchor("The Published Claims, Re-tested")}


def precision(run: Run) -> dict | None:
    """The run's precision in one figure: the median over its ok cells of their 95% CI's half
    width relative to the median; or that its intervals are within one process."""
    metric = run_metric(run.results)
    cells = [b for _, _, b in run.ran_backends() if b["status"] == "ok" and cell_stats(b)]
    if not cells:
        return None
    figures = [shown_figure(b, metric) for b in cells]
    widths = [(f["ci95"][1] - f["ci95"][0]) / 2 / f["median"] for f in figures if f.get("ci95") and f.get("median")]
    one_process = sum(1 for f in figures if (f.get("noise") or {}).get("between") == "trials")
    unstable = sum(1 for b in cells if not cell_stats(b).stable)
    return {"code": "one process" if one_process == len(cells) else "intervals", "cells": len(cells),
            "checked": kernel_checks(cells),
            "half_width": stats.median(widths) if widths else None, "one_process": one_process,
            "unstable": unstable, "metric": METRICS[metric], "anchor": anchor("How precise is this run")}


def kernel_checks(cells: list[dict]) -> dict | None:
    """The kernels' own time check per cell (fabench.analysis.kernel_check) counted: agrees,
    differs, or could not judge; None where no cell was checked."""
    checks = [((b.get("cross_check") or {}).get("kernel_time") or {}) for b in cells]
    checked = {word: sum(1 for c in checks if c and c.get("agrees") is value)
               for word, value in (("agree", True), ("differ", False), ("could not judge", None))}
    return checked if any(checks) else None


def wall_time(run: Run) -> dict | None:
    """The measure jobs' span, jobs and processes from the time line, and the longest job;
    for results recorded before time lines, the span from the jobs' recorded start and finish."""
    anchor_to = anchor("Where the run's time went")
    line = time_line(run)
    longest = longest_job(run)
    if line is not None:
        return {"span_s": line["measure_span_s"], "workflow_s": line["workflow_s"], "jobs": line["jobs"],
                "processes": line["processes"], "workers": line["workers"], "longest": longest,
                "anchor": anchor_to}
    started = [provenance_of(r).get("started") for r in run.results]
    finished = [provenance_of(r).get("finished") for r in run.results]
    if None in started or None in finished:
        return None
    span = (datetime.fromisoformat(max(finished)) - datetime.fromisoformat(min(started))).total_seconds()
    processes = sum(len(method_of(r).get("process_exits") or []) for r in run.results)
    # No time line section to link to: the configuration names the trials and processes per job.
    return {"span_s": span, "workflow_s": None, "jobs": len(run.results), "processes": processes, "workers": 0,
            "longest": longest, "anchor": anchor("Benchmark Configuration")}


def job_seconds(result: dict) -> float | None:
    """A job's span from its recorded start to its finish; None where either is unrecorded."""
    started, finished = provenance_of(result).get("started"), provenance_of(result).get("finished")
    if not started or not finished:
        return None
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()


def longest_job(run: Run) -> dict | None:
    """The job that took the longest, by its own recorded start and finish: its variant, shape and
    seconds, and its share of the jobs' summed seconds. None for one job or without the records."""
    spans = [(job_seconds(r), r) for r in run.results]
    if len(spans) < 2 or any(s is None for s, _ in spans):
        return None
    seconds, result = max(spans, key=lambda item: item[0])
    total = sum(s for s, _ in spans)
    return {"variant": md_text(run.variant_label(result["variant"])), "shape": md_text(run.shape_name(result["shape"])),
            "seconds": seconds, "share": seconds / total if total else None}


def decided(found: dict) -> dict:
    """Of the summary's questions (the fastest per shape group, the tuning effect, the published
    claims), how many this run answered: a winner named, a tuning claim beyond the noise or the
    same within the margin, a claim held or failed. Where not all, the judged example to read."""
    asked = answered = 0
    for group in found["fastest"]["groups"]:
        asked, answered = asked + 1, answered + (group["code"] == "winner")
    tuned = found["tuning"]
    if tuned and tuned["code"] != "same code":  # the same code in both variants asks nothing
        asked, answered = asked + 1, answered + (tuned["code"] == "compared" and tuned["claim"] != "cannot tell")
    if found["claims"]:
        counts = found["claims"]["counts"]
        asked += found["claims"]["total"]
        answered += counts["holds"] + counts["fails"]
    return {"asked": asked, "answered": answered, "example": JUDGED_EXAMPLE if answered < asked else None,
            "anchor": found["fastest"]["anchor"]}


def context(run: Run, published: dict | None) -> dict | None:
    if run.published:
        return None  # a publication's numbers recast as a run: nothing was measured to summarise
    found = {"fastest": fastest(run), "tuning": tuning(run), "claims": claims(run, published),
             "precision": precision(run), "time": wall_time(run)}
    return {**found, "decided": decided(found)}
