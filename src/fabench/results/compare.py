"""Archived runs side by side, each cell judged by the comparison policy (fabench.analysis.policy).

Cells are (variant, shape, backend). Each archived entry's results are analysed again from their
raw trials (fabench.analysis.analyse_run), so entries archived under older rules are judged by
today's; this module computes no statistics and decides nothing of its own. A cell is compared
with the same cell in the previous entry that has it (entries ordered by label version, then run
number) and in the baseline entry, by the policy's Rule (stated in every output). Entries measured
on different hardware are never judged against each other (the cell's code is `other_hardware`),
nor entries of different experiments (settings that change what is measured: `other_experiment`,
the differences named). Each verdict keeps the policy's code and values and gains `why`, its
words (fabench.analysis.verdict_text). The CLI and the workflow both call compare_entries with
the config's Rule (policy.Rule.of) and write its outputs through one writer
(fabench.report.compare_outputs).

Results archived before trials were recorded (schema v1) carry no trials: such an entry is
refused, with that reason, as are entries whose files fail their checksums.
"""

from __future__ import annotations

import math
from typing import Iterable

from fabench.analysis import analyse_run, calibration, policy, verdict_text
from fabench.analysis.figures import cell_metric
from fabench.analysis.policy import Code, Rule
from fabench.analysis.result_types import BackendEntry, backend_dicts, cell_stats
from fabench.results.archive_read import Entry, EntryChanged
from fabench.results.published import published_rows
from fabench.shapes import main_head_dim, shape_key

COMPARE_FORMAT = "fabench-compare/2"
V1_REASON = "archived with schema v1: no trials (no confidence interval to compare)"
ROLE_ORDER = ("baseline", "vendor", "triton")


class CompareError(ValueError):
    """The comparison cannot be made as asked (an unknown baseline)."""


class NothingToCompare(CompareError):
    """Every entry given was left out (broken, or archived without trials)."""


# ---------------------------------------------------------------- one cell, two entries

def cell_of(backend: dict | None) -> dict | None:
    """What the comparison reads of a backend entry: status, reason and the recorded statistics
    (a cell is laid out as an entry is: its `stats` the entry's, read as one through cell_stats)."""
    if backend is None:
        return None
    entry = BackendEntry.of(backend)
    stats = entry.stats

    def figure(metric: str) -> dict | None:
        found = stats.metric(metric) if stats else None
        return found.raw if found else None
    return {
        "status": entry.status,
        "reason": entry.reason,
        "failure_kind": entry.failure_kind,
        "device_ms": figure("device_ms"),
        "wall_mean_ms": figure("wall_mean_ms"),
        "stable": stats.stable if stats else True,
        "unstable_reason": stats.unstable_reason if stats else None,
        "ci_method": stats.raw.get("ci_method") if stats else None,
        "stats": (stats.raw or None) if stats else None,
    }


# Flags listed under the tables: changes, a backend newly available (news, not a speed-up), cells
# that cannot be judged for instability, cells whose runs ran on different hardware or different
# experiments, and changes in time that are none in clock cycles (named, never called a regression).
FLAGGED = (Code.REGRESSION, Code.IMPROVEMENT, Code.NOW_AVAILABLE, Code.UNSTABLE, Code.OTHER_HARDWARE,
           Code.OTHER_EXPERIMENT, Code.CLOCK)


def judge(old: dict, new: dict, rule: Rule, hardware: dict, experiments, hosts: dict) -> dict:
    """The policy's verdict on one cell of two entries, with its words (`why`) for the outputs; the
    pair type told by the hosts of every entry compared (identity.hosts_of)."""
    ids = (old["entry"], new["entry"])
    kind = policy.pair_type(hardware[ids[0]], hardware[ids[1]], hosts)
    verdict = policy.judge(old, new, rule, ids, (hardware[ids[0]], hardware[ids[1]]), experiments(*ids), kind=kind)
    return {**verdict, "why": verdict_text.why(verdict)}


# ---------------------------------------------------------------- loading entries

def usable_results(entry: Entry) -> tuple[list[dict] | None, list[str]]:
    """The entry's results, or None and why the comparison leaves it out."""
    if not entry.ok:
        return None, list(entry.problems)
    try:
        results = entry.results()["results"]  # the verified bytes, or EntryChanged
    except EntryChanged as err:
        return None, [str(err).split(": ", 1)[-1]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, [f"results.json: unreadable ({err})"]
    if any(r.get("schema_version", 1) < 2 for r in results):
        return None, [V1_REASON]
    return results, []


def entry_info(entry: Entry) -> dict:
    versions = entry.get("versions", {})
    return {"id": entry.id, "label": entry.label, "run_id": entry.run_id, "path": str(entry.path),
            "run": entry.get("run"), "archived_at": entry.get("archived_at"), "finished": entry.get("finished"),
            "platform": entry.get("platform"), "device": entry.get("device"), "gpu": entry.get("gpu"),
            "arch": entry.get("arch"), "versions": versions}


def _row_order(results_by_entry: list[list[dict]]) -> list[tuple]:
    """Variants in order of appearance; the main head_dim first (as the report), then (B,S,H,D);
    the role backends first (baseline, vendor, Triton), then the others."""
    variants, shapes, backends, roles = {}, {}, {}, {}
    for results in results_by_entry:
        for r in results:
            variants.setdefault(r["variant"], None)
            shapes.setdefault(r["shape_id"], r["shape"])
            for i, role in enumerate(ROLE_ORDER):
                roles.setdefault(r["roles"][role], i)
            for name in backend_dicts(r):
                backends.setdefault(name, None)
    main = main_head_dim(shapes.values())
    shape_order = sorted(shapes, key=lambda s: (shapes[s]["head_dim"] != main, shapes[s]["head_dim"],
                                                 shape_key(shapes[s])))
    backend_order = sorted(backends, key=lambda b: (roles.get(b, len(ROLE_ORDER)), list(backends).index(b)))
    return [(v, s, shapes[s], b) for v in variants for s in shape_order for b in backend_order]


# ---------------------------------------------------------------- the comparison

def compare_entries(entries: Iterable[Entry], rule: Rule, baseline: str | None = None,
                    published: dict | None = None, in_given_order: bool = False) -> dict:
    """The comparison of archived entries as data (the JSON output; the Markdown renders it).

    Broken and schema-v1 entries are listed under left_out, with their problems, and take no
    part. `baseline` is an entry id (<label>/<run-id>); default the first entry in order. The order
    is version order (label, then number), or, `in_given_order`, the order the entries are given in
    (a user who names `old new` judges new against old, whatever their numbers)."""
    used, left_out = _load(entries, in_given_order)
    baseline = _baseline(baseline, [e.id for e, _ in used], left_out)
    experiments = experiment_differences({entry.id: results for entry, results in used})
    hardware = {entry.id: policy.hardware_identity(results) for entry, results in used}
    hosts = policy.hosts_of(list(hardware.values()))
    rows, flags = _rows(used, baseline, lambda old, new: judge(old, new, rule, hardware, experiments, hosts))
    comparison = {
        "format": COMPARE_FORMAT,
        "steps": steps(rows, hardware, rule, experiments),
        "rule": {**rule.values(), "text": rule_text(rule)},
        "pairs": pairs_judged([e.id for e, _ in used], baseline, rule, hardware, hosts),
        "calibration": calibration.coverage(list(hardware.values())),  # the rule's fits on these cards
        "baseline": baseline,
        "entries": [{**entry_info(e), "hardware": hardware[e.id]} for e, _ in used],
        "experiments": experiments.differences,
        "left_out": left_out,
        "rows": rows,
        "flags": flags,
        "answers": answers(rows),
        "published": None,
    }
    if published is not None:
        comparison["published"] = {
            "source": published.get("source", {}).get("document") or published.get("source", {}).get("title"),
            "tolerance": rule.published_margin,
            "rule": published_rule_text(rule),
            "entries": [published_section(e, results, published, rule) for e, results in used],
        }
    return comparison


def pairs_judged(ids: list[str], baseline: str, rule: Rule, hardware: dict, hosts: dict) -> list[dict]:
    """Each pair of entries the comparison judges (each against the one before, and against the
    baseline): its kind, the margin it is judged by (the smallest change it can see) and where that
    came from. One source per pair: the config's margin, else the fit's for that kind of pair."""
    wanted = list(zip(ids, ids[1:])) + [(baseline, i) for i in ids if i != baseline]
    out, seen = [], set()
    for old, new in wanted:
        if (old, new) in seen:
            continue
        seen.add((old, new))
        kind = policy.pair_type(hardware[old], hardware[new], hosts)
        if kind is None:
            out.append({"old": old, "new": new, "kind": None, "margin": None, "fitted_as": None, "source": None})
            continue
        on = rule.on(hardware[old])
        pair = on.for_pair(kind)
        source = "the config (comparison.margin)" if "margin" in on.chosen else (
            f"calibration {on.fit}" + ("" if pair.fitted_as == str(kind) else f", fitted as {pair.fitted_as}"))
        out.append({"old": old, "new": new, "kind": str(kind), "margin": pair.margin, "fitted_as": pair.fitted_as,
                    "capped_margin": pair.capped.margin,
                    "unseen": {"steady": math.sqrt(pair.steady.variance), "capped": math.sqrt(pair.capped.variance)},
                    "source": source})
    return out


def _load(entries: Iterable[Entry], in_given_order: bool = False) -> tuple[list[tuple[Entry, list[dict]]], list[dict]]:
    """The usable entries in order, each with its results analysed again, and those left out."""
    used, left_out = [], []
    for entry in (list(entries) if in_given_order else sorted(entries, key=lambda e: e.sort_key)):
        results, problems = usable_results(entry)
        if results is None:
            left_out.append({"id": entry.id, "path": str(entry.path), "problems": problems})
        else:
            used.append((entry, analyse_run({"results": results})["results"]))
    if not used:
        raise NothingToCompare("no entry left to compare: " + "; ".join(
            f"{x['id']}: {', '.join(x['problems'])}" for x in left_out) if left_out else "no entries given")
    return used, left_out


def _baseline(baseline: str | None, ids: list[str], left_out: list[dict]) -> str:
    if baseline is None:
        return ids[0]
    if baseline not in ids:
        why = next((x["problems"] for x in left_out if x["id"] == baseline), None)
        raise CompareError(f"baseline {baseline}: " + (f"left out ({'; '.join(why)})" if why
                                                       else "not among the compared entries"))
    return baseline


def _rows(used: list[tuple[Entry, list[dict]]], baseline: str, verdict) -> tuple[list[dict], list[dict]]:
    """One row per cell measured in some entry, each entry's cell judged against the previous entry
    that has it and against the baseline by `verdict(old, new)`; and the flags among those verdicts."""
    tables = {entry.id: {(r["variant"], r["shape_id"]): r for r in results} for entry, results in used}
    rows, flags = [], []
    for variant, sid, shape, backend in _row_order([results for _, results in used]):
        cells = []
        for entry, _ in used:
            result = tables[entry.id].get((variant, sid))
            cell = cell_of(backend_dicts(result).get(backend)) if result else None
            cells.append({"entry": entry.id, **(cell or {"status": None})})
        if not any(c["status"] == "ok" for c in cells):
            continue  # never measured in any entry (another platform's backend)
        label = next(backend_dicts(r)[backend]["label"] for _, results in used for r in results
                     if r["variant"] == variant and r["shape_id"] == sid and backend in backend_dicts(r))
        row = {"variant": variant, "shape_id": sid, "shape": shape, "backend": backend, "label": label,
               "cells": cells}
        _judge_row(cells, baseline, verdict)
        flags += _flags(row)
        rows.append(row)
    return rows, flags


def _judge_row(cells: list[dict], baseline: str, verdict) -> None:
    """Each present cell's vs_previous and vs_baseline verdicts (in place); the baseline is not
    judged twice where it is the previous entry."""
    base_cell = next((c for c in cells if c["entry"] == baseline and c["status"] is not None), None)
    previous = None
    for cell in cells:
        cell["vs_previous"] = cell["vs_baseline"] = None
        if cell["status"] is None:
            continue
        if previous is not None:
            cell["vs_previous"] = {"entry": previous["entry"], **verdict(previous, cell)}
        if base_cell is not None and cell is not base_cell and (previous is None or previous is not base_cell):
            cell["vs_baseline"] = {"entry": baseline, **verdict(base_cell, cell)}
        previous = cell


def _flags(row: dict) -> list[dict]:
    found = []
    for cell in row["cells"]:
        for kind in ("vs_previous", "vs_baseline"):
            verdict = cell.get(kind)
            if verdict and verdict["code"] in FLAGGED:
                found.append({"code": verdict["code"], "variant": row["variant"], "shape_id": row["shape_id"],
                              "backend": row["backend"], "label": row["label"], "entry": cell["entry"],
                              "against": verdict["entry"], "against_kind": kind[3:], "ratio": verdict["ratio"],
                              "p": verdict["values"].get("p"), "why": verdict["why"]})
    return found


def answers(rows: list[dict]) -> dict:
    """How many ok cells compared with the previous entry got an answer (same or changed), the share
    `fabench compare --min-answered` gates on: {judged, answered, share (None without any), expected
    (the share unchanged software is expected to get at these cells' noise: each verdict's
    `answerable`), expected_sd}."""
    # A cell measured in neither run (the same failing status in both) is no ok cell to judge.
    verdicts = [c["vs_previous"] for row in rows for c in row["cells"]
                if c.get("vs_previous") and c["vs_previous"]["code"] != Code.NOT_OK]
    answered = sum(v["verdict"] in ("same", "changed") for v in verdicts)
    chances = [v["values"].get("answerable") or 0.0 for v in verdicts]
    n = len(verdicts)
    return {"judged": n, "answered": answered, "share": answered / n if n else None,
            "expected": sum(chances) / n if n else None,
            "expected_sd": math.sqrt(sum(c * (1 - c) for c in chances)) / n if n else None}


class experiment_differences:
    """The experiment differences between any two entries ([] for one experiment), each pair
    worked out once; `differences` lists the pairs that differ, for the outputs."""

    def __init__(self, results: dict[str, list[dict]]):
        self.results, self.found, self.differences = results, {}, []

    def __call__(self, old: str, new: str) -> list[str]:
        if (old, new) not in self.found:
            found = policy.experiment_differences(self.results[old], self.results[new])
            self.found[(old, new)] = found
            if found:
                self.differences.append({"old": old, "new": new, "differences": found})
        return self.found[(old, new)]


def steps(rows: list[dict], hardware: dict, rule: Rule, experiments=None) -> list[dict]:
    """Cells whose series over the archived entries (one GPU model's and one experiment's, in
    archive order, three stable runs or more) steps somewhere beyond the noise and the margin
    (analysis.policy.find_step): where, by how much, and whether the card changed there (two cards
    of one model differ by up to a few percent under a power cap); `rule` resolved for each model."""
    found = []
    for row in rows:
        series: dict[tuple, list] = {}
        for cell in row["cells"]:
            if cell["status"] == "ok" and cell_stats(cell) and cell.get("stable", True):
                same_model = series.setdefault(policy.hardware_key(hardware[cell["entry"]]), [])
                # A series is one experiment's: an entry of another is no point of it.
                if not (same_model and experiments and experiments(same_model[0]["entry"], cell["entry"])):
                    same_model.append(cell)
        for cells in series.values():
            metric = cell_metric(*cells) if len(cells) >= 3 else None
            step = (policy.find_step([(c["entry"], c[metric]) for c in cells], rule.on(hardware[cells[0]["entry"]]))
                    if metric else None)
            if step:
                cards = [hardware[step[side]]["cards"] for side in ("before", "after")]
                found.append({"variant": row["variant"], "shape_id": row["shape_id"], "backend": row["backend"],
                              "label": row["label"], "metric": metric, "card_changed": cards[0] != cards[1], **step})
    return found


def rule_text(rule: Rule) -> str:
    return (f"Each cell gets a verdict by the comparison policy: {rule.text()}. Device time is compared when both "
            f"runs recorded it, else wall-clock time. Runs on different hardware (platform, GPU model, "
            f"architecture) are never judged against each other: the cell's code is `other_hardware`; nor runs of "
            f"different experiments (settings that change what is measured): `other_experiment`, with the "
            f"differences named. A change in device time that is none in clock cycles (time x the SM clock each "
            f"trial read) is the clock's: `clock`. A cell held at its power cap is judged by its time at the capped "
            f"margin, or, where each run's trials in SM clock cycles (each chunk's clock, read by the GPU sleep "
            f"after it) are stable, by its cycles at the steady margin. A backend that ran and now fails or is "
            f"unavailable is a regression; one that failed and now runs is an improvement; one that was "
            f"unavailable and now runs is `now_available`, not a speed-up.")


# ---------------------------------------------------------------- published vs reproduced

def published_rule_text(rule: Rule) -> str:
    return (f"The published numbers are wall-clock means with no interval: a reproduced cell is flagged when its "
            f"wall-clock median differs from the published value by more than {rule.published_margin:.0%} AND the "
            f"published value lies outside our 95% prediction interval (where another run of ours would read). "
            f"Unstable cells are never flagged.")


def published_flags(results: list[dict], published: dict, rule: Rule) -> list[dict]:
    """Each published (variant, shape, backend) time against the reproduced one (stats.wall_mean_ms),
    flagged by the policy (analysis.policy.judge_published)."""
    found = {(r["variant"], shape_key(r["shape"])): r for r in results}
    out = []
    for row in published_rows(published):
        result = found.get((row["variant"], shape_key(row["shape"])))
        for backend, pub in row["ms"].items():
            if pub is None:
                continue
            item = {"variant": row["variant"], "shape": row["shape"], "shape_id": result and result["shape_id"],
                    "backend": backend, "published_ms": pub, "median": None, "ci95": None, "ratio": None}
            item.update(published_flag(cell_of(backend_dicts(result).get(backend)) if result else None, pub, rule))
            out.append(item)
    return out


def published_flag(cell: dict | None, published_ms: float, rule: Rule) -> dict:
    if cell is None:
        return {"flag": "not measured", "why": "not in this run"}
    if cell["status"] != "ok":
        return {"flag": "not measured", "why": verdict_text.not_ok_text(cell)}
    stat = cell["wall_mean_ms"]
    if not (stat and (stat.get("pi95") or stat.get("ci95"))):
        return {"flag": "not comparable", "why": "no wall-clock median with an interval"}
    shown = {"median": stat["median"], "ci95": stat.get("ci95")}
    if not cell["stable"]:
        return {**shown, "ratio": stat["median"] / published_ms, "flag": "unstable",
                "why": cell.get("unstable_reason") or "trials unstable"}
    return {**shown, **policy.judge_published(stat, published_ms, rule)}


def published_section(entry: Entry, results: list[dict], published: dict, rule: Rule) -> dict:
    hardware = published.get("source", {}).get("hardware", {})
    if not policy.matches_published_hardware(results, published):
        return {"entry": entry.id, "skipped": f"measured on {entry.get('device')}, published on "
                                              f"{hardware.get('device')}: a difference says nothing", "cells": []}
    return {"entry": entry.id, "skipped": None, "cells": published_flags(results, published, rule)}
