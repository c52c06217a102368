"""The summary at the top of compare's page: what changed between the newest two archived runs the
comparison policy judged against each other (their verdicts counted, the largest change) and the
software that differs under one archive label. Values and codes here; the words in
templates/sections/compare_summary.md.j2. The same values as data: fabench.report.findings.
"""

from __future__ import annotations

import math

from fabench.report.format import heading_anchor as anchor, md_text


def judged_pair(comparison: dict) -> tuple[str, str, list[str]]:
    """The newest two runs the policy judged against each other (of one experiment, sharing a cell):
    (old, new, the newer entries passed over, which share no such cell with an earlier run). The
    newest two when no pair was judged."""
    entries = [e["id"] for e in comparison["entries"]]
    judged = {(found["entry"], cell["entry"]) for row in comparison["rows"] for cell in row["cells"]
              if (found := cell.get("vs_previous")) and str(found["code"]) != "other_experiment"}
    for new in reversed(entries):
        for old in reversed(entries[:entries.index(new)]):
            if (old, new) in judged:
                return old, new, entries[entries.index(new) + 1:]
    return entries[-2], entries[-1], []


def software_changes(comparison: dict) -> list[dict]:
    """Per archive label, the versions that differ between its entries (a package installed between
    two runs changes no label): what the label does not say."""
    found = []
    for label in dict.fromkeys(e["label"] for e in comparison["entries"]):
        entries = [e for e in comparison["entries"] if e["label"] == label]
        keys = sorted({k for e in entries for k in e["versions"]})
        changed = [{"name": k, "values": [str(e["versions"].get(k) or "none") for e in entries]}
                   for k in keys if len({str(e["versions"].get(k)) for e in entries}) > 1]
        if changed:
            found.append({"label": label, "entries": [e["id"] for e in entries], "changed": changed})
    return found


def pair_verdicts(comparison: dict, old: str, new: str) -> list[tuple[dict, dict]]:
    """(row, verdict) of every cell of entry `new` judged against entry `old`."""
    found = []
    for row in comparison["rows"]:
        cell = next((c for c in row["cells"] if c["entry"] == new), None)
        verdict = (cell or {}).get("vs_previous")
        if verdict and verdict["entry"] == old:
            found.append((row, verdict))
    return found


def largest_change(verdicts: list[tuple[dict, dict]]) -> tuple[dict, dict] | None:
    """The (row, verdict) of the largest change the policy names (by the size of its log ratio)."""
    changed = [(row, v) for row, v in verdicts if v["verdict"] == "changed" and v["ratio"]]
    return max(changed, key=lambda item: abs(math.log(item[1]["ratio"])), default=None)


def verdict_counts(verdicts: list[tuple[dict, dict]]) -> tuple[dict[str, int], dict[str, int]]:
    """How many cells get each kind (a change by its code: regression, improvement, now_available;
    else the verdict), and how many that cannot be told by each reason code."""
    counts: dict[str, int] = {}
    untold: dict[str, int] = {}
    for _, found in verdicts:
        code = str(found["code"])
        kind = code if found["verdict"] == "changed" else found["verdict"]
        counts[kind] = counts.get(kind, 0) + 1
        if found["verdict"] == "cannot tell":
            untold[code] = untold.get(code, 0) + 1
    return counts, untold


def compare_context(comparison: dict) -> dict | None:
    """What changed between the newest two runs the policy judged against each other (judged_pair):
    how many cells it calls a regression, an improvement, the same or cannot tell (by reason code),
    and the largest change it names; and the software that differs under one label. None with
    fewer than two runs."""
    entries = [e["id"] for e in comparison["entries"]]
    if len(entries) < 2:
        return None
    old, new, passed_over = judged_pair(comparison)
    verdicts = pair_verdicts(comparison, old, new)
    counts, untold = verdict_counts(verdicts)
    largest = largest_change(verdicts)
    if largest is not None:
        row, found = largest
        largest = {"variant": md_text(row["variant"]), "shape_id": md_text(row["shape_id"]),
                   "label": md_text(row["label"]), "ratio": found["ratio"], "code": str(found["code"])}
    return {"old": md_text(old), "new": md_text(new), "counts": counts, "untold": untold, "largest": largest,
            "cells": sum(counts.values()), "anchor": anchor("Flags"),
            "passed_over": [md_text(e) for e in passed_over],
            "software": [{"label": md_text(w["label"]), "entries": [md_text(e) for e in w["entries"]],
                          "changed": [{"name": md_text(c["name"]), "values": [md_text(v) for v in c["values"]]}
                                      for c in w["changed"]]} for w in software_changes(comparison)]}
