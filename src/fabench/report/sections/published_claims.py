"""The published claims, re-tested: each claim of the published report (the `claims` of its
numbers file, report/published/*.yaml) and whether it holds on this run's hardware, fails, or
cannot be told, by the comparison policy (fabench.analysis.claims, the policy's within-run
verdict on two cells). Left out when no published claims are given or nothing was measured
(the publication's numbers recast as a run).

A claim names cells by variant and role; another platform fills a role with its own backend
(CK's by cuDNN on NVIDIA, by SDPA on a CPU), and the section says so beside the claim. It also
says which figure the policy judged (device time where the run timed on the device) and whether
the published method's figure, the wall clock, is host-bound for a cell: its host overhead per
call (wall mean minus device median) exceeds the kernel's own time, so a wall-clock claim there
measures the host, not the kernel.
"""

from __future__ import annotations

from fabench.analysis import claims
from fabench.analysis.figures import METRICS
from fabench.analysis.policy import Code
from fabench.analysis.result_types import metric_median
from fabench.report.format import fmt_ms, md_text, value_text
from fabench.report.model import Run, role_backend
from fabench.results.published import claim_cells
from fabench.shapes import shape_key

OUTCOMES = ("holds", "fails", "cannot tell")
# Why a claim cannot be told, as a code (the summary counts them): a cell's backend cannot run on
# this host (CK or aiter on a CPU), the noise or the run's intervals hide the answer, a cell was
# not measured (left out, failed, another variant or shape), or the run's config is not the
# published one. The policy's reason codes (fabench.analysis.policy.Code) map to them by UNTOLD_CAUSES.
CAUSES = ("untestable here", "too noisy", "no interval", "not measured", "other config")
UNTOLD_CAUSES = {Code.NOISY: "too noisy", Code.UNSTABLE: "too noisy", Code.CLOCK: "too noisy",
                 Code.ONE_PROCESS: "no interval", Code.NO_INTERVAL: "no interval", Code.NO_FIGURE: "no interval",
                 Code.NOT_OK: "not measured", Code.MISSING: "not measured"}


def _entry(run: Run, cell: dict, shape: dict) -> tuple[dict | None, str | None, str | None]:
    """The run's backend entry for a claim's cell (whatever its status), why it has no time to
    judge and the cause's code (CAUSES; both None when it ran cleanly)."""
    if cell["variant"] not in run.variants:
        return None, f"this run has no variant {cell['variant']!r}", "not measured"
    result = run.find(cell["variant"], shape)
    if result is None:
        return None, f"not measured at {run.shape_name(shape)} in {run.variant_label(cell['variant'])}", "not measured"
    entry = role_backend(result, cell["role"])
    if entry is None or entry["status"] != "ok":
        label = (entry or {}).get("label") or result["roles"][cell["role"]]
        cause = "untestable here" if (entry or {}).get("status") == "unavailable" else "not measured"
        return entry, f"{label} {(entry or {}).get('status', 'not run')} there", cause
    return entry, None, None


def config_differences(run: Run, published: dict, claim: dict) -> list[str]:
    """Triton-config keys whose value in this run's variant differs from the published one, for
    every variant the claim names (keys one side does not set are not compared)."""
    found = []
    for variant in dict.fromkeys(c["variant"] for c in claim_cells(claim)):
        if variant not in run.variants:
            continue
        ours, theirs = run.kernel_values(variant), published["variants"][variant]["triton"]
        found += [f"{variant} {key}={value_text(ours[key])} (published {value_text(theirs[key])})"
                  for key in theirs if key in ours and ours[key] != theirs[key]]
    return found


def outcome(claim: dict, verdict: dict) -> str:
    """holds / fails / cannot tell, from the policy's claim on the claim's cells (a, b)."""
    kind = verdict["claim"]
    if kind in ("cannot tell", "not measured"):
        return "cannot tell"
    if "same" in claim:
        return "holds" if kind in ("same", "below margin") else "fails"
    # The faster cell is b: the claim holds only where the policy names b faster beyond the margin.
    return "holds" if kind in claims.NAMES_A_WINNER and verdict["faster"] == "b" else "fails"


def host_bound(name: str, entry: dict) -> str | None:
    """Why the wall clock is host-bound for this cell (host time per call above the kernel's), else None."""
    host = entry.get("host_overhead_ms")
    device = metric_median(entry, "device_ms")
    if host is None or not device or host <= device:
        return None
    return f"{name}: host {fmt_ms(host)} ms per call, kernel {fmt_ms(device)} ms"


def cell_names(run: Run, claim: dict, entries: list[dict | None]) -> list[str]:
    """The cells' names: the backend's label, after the variant's where the claim spans two."""
    cells = claim_cells(claim)
    two_variants = len({c["variant"] for c in cells}) > 1
    return [md_text((f"{run.variant_label(c['variant'])} " if two_variants else "") +
                    ((e or {}).get("label") or c["role"])) for c, e in zip(cells, entries)]


def roles_filled(run: Run, published: dict, claim: dict, entries: list[dict | None]) -> list[str]:
    """"SDPA (cuDNN) fills CK's role (vendor)" for each cell whose backend is not the published one."""
    notes = []
    for cell, entry in zip(claim_cells(claim), entries):
        theirs = published["labels"][published["roles"][cell["role"]]]
        if entry is not None and entry["label"] != theirs:
            notes.append(f"{md_text(entry['label'])} fills {md_text(theirs)}'s role ({cell['role']})")
    return list(dict.fromkeys(notes))


def figures_text(names: list[str], entries: list[dict], metric: str | None) -> str:
    if metric is None:
        return "n/a"
    medians = [metric_median(e, metric) for e in entries]
    return " vs ".join(f"{name} {fmt_ms(m)} ms" for name, m in zip(names, medians))


def retest(run: Run, published: dict, claim: dict) -> dict:
    """One claim re-tested on this run: outcome, the figure judged, and the notes beside it."""
    shape = claim["shape"]
    found = [_entry(run, cell, shape) for cell in claim_cells(claim)]
    entries = [entry for entry, _, _ in found]
    row = {"id": md_text(claim["id"]), "published": md_text(claim["published"]), "where": md_text(claim["where"]),
           "roles": roles_filled(run, published, claim, entries), "host_bound": [], "figures": "n/a",
           "judged_on": "n/a", "cause": None}
    missing = list(dict.fromkeys(why for _, why, _ in found if why))
    if missing:
        return _untestable(row, found, entries, missing)
    differs = config_differences(run, published, claim)
    if differs:
        return {**row, "outcome": "cannot tell", "cause": "other config",
                "why": md_text("this run's config is not the published one: " + ", ".join(differs))}
    return _judged(run, claim, entries, row)


def _untestable(row: dict, found: list[tuple], entries: list[dict | None], missing: list[str]) -> dict:
    """retest's row for a claim with a cell this run lacks: "cannot tell", and why."""
    # A backend this host cannot run makes the claim untestable here, whatever else is missing.
    causes = {cause for _, _, cause in found if cause}
    return {**row, "outcome": "cannot tell", "why": md_text("; ".join(missing)),
            "cause": "untestable here" if "untestable here" in causes else "not measured",
            "unavailable": [md_text(e.get("label") or "") for e in entries if (e or {}).get("status") == "unavailable"]}


def _judged(run: Run, claim: dict, entries: list[dict | None], row: dict) -> dict:
    """retest's row for a claim whose cells this run measured: the policy's claim on them."""
    # The policy's claim on (a, b): for "faster" claims b is the cell claimed faster.
    names = cell_names(run, claim, entries)
    a, b = (1, 0) if "faster" in claim else (0, 1)
    verdict = run.claim(entries[a], entries[b], names=(names[a], names[b]))
    bound = [h for h in (host_bound(n, e) for n, e in zip(names, entries)) if h]
    judged = METRICS.get(verdict["metric"], "n/a")
    told = outcome(claim, verdict)
    cause = None if told != "cannot tell" else (
        "not measured" if verdict["claim"] == "not measured" else UNTOLD_CAUSES.get(verdict["code"], "too noisy"))
    return {**row, "outcome": told, "cause": cause, "why": md_text(verdict["why"]),
            "judged_on": judged + ("; its wall clock host-bound" if bound and verdict["metric"] == "device_ms" else ""),
            "figures": figures_text(names, entries, verdict["metric"]), "host_bound": bound}


def context(run: Run, published: dict | None) -> dict | None:
    if not published or not published.get("claims") or run.published:
        return None  # nothing to re-test, or the publication's own numbers recast as a run
    rows = [retest(run, published, claim) for claim in published["claims"]]
    tally = _tally(rows)
    devices = run.provenance_values("device")
    return {
        "hardware": md_text(", ".join(devices) or run.first["platform"]),
        "published_on": md_text(published["source"]["hardware"]["device"]),
        "rows": rows,
        "counts": tally["counts"], "causes": tally["causes"],
        "shapes": sorted({shape_key(c["shape"]) for c in published["claims"]}),
        "untestable": tally["untestable"], "roles": tally["roles"],
    }


def _tally(rows: list[dict]) -> dict:
    """The rows counted by outcome and by cause; the backends no claim could run, said once; the roles filled."""
    return {
        "counts": {name: sum(1 for r in rows if r["outcome"] == name) for name in OUTCOMES},
        "causes": {cause: sum(1 for r in rows if r["cause"] == cause) for cause in CAUSES
                   if any(r["cause"] == cause for r in rows)},
        # Every claim needs a backend this host cannot run (a CPU): said once, instead of per claim.
        "untestable": list(dict.fromkeys(label for r in rows for label in r.get("unavailable", [])))
        if all(r["cause"] == "untestable here" for r in rows) else None,
        "roles": list(dict.fromkeys(note for r in rows for note in r["roles"])),
    }
