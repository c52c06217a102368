"""Results and Analysis: a table per variant, the config keys a backend ignored, the key
improvements from the first variant to the last, and the vendor-vs-Triton winner per shape.

Highlighting rule (it reproduces the published tables): the first variant is the reference, the
state before any change, so its table is plain. Every later variant's table shows in bold the
faster of the vendor and Triton times in each row, and the Triton speedup where Triton beats the
vendor, because the question such a table answers is whether the changed Triton config caught up
with the vendor kernel. "Faster" is the comparison policy's verdict on the two cells
(fabench.analysis.claims): beyond the noise and the margin, else nothing is bold. Every derived
figure says what the policy says of it: a speedup the policy cannot tell from the noise carries
MARKS["cannot tell"], one within the margin MARKS["same"]; unstable cells are marked and support no
claim. Published figures carry no noise estimate and are compared as published. Variants whose
Triton-role cells ran the same code get no improvement claims.
"""

from __future__ import annotations

from fabench.analysis.result_types import backend_dicts, cell_stats
from fabench.report.format import (backend_name, bold, fmt_ms, fmt_times, md_code, md_text, shape_text,
                                   status_text, value_text)
from fabench.analysis import claims
from fabench.analysis.figures import METRICS
from fabench.analysis.policy import Code, code_identity, same_code
from fabench.analysis.verdict_text import ONE_PROCESS_WHY
from fabench.report.model import RAN, ROLES, Run, role_backend, role_ms, speedup

UNSTABLE_MARK = "~"
NAMES_A_WINNER = claims.NAMES_A_WINNER
# The mark a derived figure (a speedup, a factor) carries after the policy's claim on its two cells.
MARKS = {"cannot tell": "~", "same": "=", "below margin": "="}
# Why the policy cannot tell, in words, by its reason code (fabench.analysis.policy.Code).
UNTOLD_WORDS = {Code.NO_INTERVAL: "no noise estimate", Code.NO_FIGURE: "no noise estimate",
                Code.UNSTABLE: "unstable trials", Code.NOISY: "noise wider than the margin",
                Code.CLOCK: "the GPU clock moved, not the work", Code.ONE_PROCESS: ONE_PROCESS_WHY}


class Footnotes:
    """Footnotes under one table: each distinct (backend, status, reason) gets one number."""

    def __init__(self):
        self.notes: list[dict] = []

    def mark(self, name: str, backend: dict | None) -> str:
        if backend is None:  # the role's backend is not in the job's results at all
            note = {"backend": None, "name": md_code(name)}
        else:
            note = {"backend": backend_name(name, backend), "status": status_text(backend),
                    "reason": md_text(backend["reason"]) if backend["reason"] else None}
        if note not in self.notes:
            self.notes.append(note)
        return f"[{self.notes.index(note) + 1}]"


def unstable(backend: dict | None) -> bool:
    if backend is None or backend["status"] != "ok":
        return False
    stats = cell_stats(backend)
    return stats is not None and not stats.stable


def ms_cell(result: dict, role: str, notes: Footnotes, strong: bool = False) -> str:
    backend = role_backend(result, role)
    ms = role_ms(result, role)
    if ms is None:
        return f"{status_text(backend)} {notes.mark(result['roles'][role], backend)}"
    return bold(fmt_ms(ms), strong) + (f" {UNSTABLE_MARK}" if unstable(backend) else "")


def vendor_is_triton(run: Run) -> bool:
    return run.first["roles"]["vendor"] == run.first["roles"]["triton"]


def vendor_vs_triton(run: Run, result: dict) -> dict:
    """The policy's claim on the row's vendor and Triton cells (a = vendor, b = Triton)."""
    return run.role_claim(result, "vendor", "triton")


def marked(text: str, claim: dict) -> str:
    """A derived figure with the mark of what the policy says about its two cells."""
    mark = MARKS.get(claim["claim"])
    return f"{text} {mark}" if mark and text != "n/a" else text


def speedup_cell(run: Run, result: dict, role: str, strong: bool = False) -> str:
    """Baseline over the role's time, marked unless the policy tells the two cells apart."""
    value = speedup(result, role)
    return marked(bold(fmt_times(value), strong and value is not None), run.role_claim(result, "baseline", role))


# How a column names the roles its backend fills, when it fills more than one.
ROLE_WORDS = {"baseline": "baseline", "vendor": "vendor", "triton": "Triton"}


def column_roles(run: Run) -> dict[str, list[str]]:
    """Each role whose backend gets a column, with every role that backend fills: one column per
    backend, so that a backend in two roles (vendor and Triton both SDPA) is not shown twice."""
    first: dict[str, list[str]] = {}
    for role in ROLES:
        first.setdefault(run.first["roles"][role], []).append(role)
    return {roles[0]: roles for roles in first.values()}


def columns(run: Run) -> list[str]:
    """The table's headers: the shape, each backend's time, each non-baseline backend's speedup."""
    roles = column_roles(run)
    named = {role: md_text(run.label(role)) + ("" if len(filled) == 1 else
                                               " as " + " and ".join(ROLE_WORDS[r] for r in filled))
             for role, filled in roles.items()}
    return ["shape", *(f"{named[role]} (ms)" for role in roles),
            *(f"{named[role]} Speedup" for role in roles if role != "baseline")]


def variant_row(run: Run, result: dict, notes: Footnotes, highlight: bool) -> list[str]:
    claim = vendor_vs_triton(run, result)
    winner = claim["faster"] if highlight and claim["claim"] in NAMES_A_WINNER else None
    strong = {"vendor": winner == "a", "triton": winner == "b"}
    roles = column_roles(run)
    return [
        shape_text(result["shape"]),
        *(ms_cell(result, role, notes, strong.get(role, False)) for role in roles),
        *(speedup_cell(run, result, role, role == "triton" and strong["triton"]) for role in roles if role != "baseline"),
    ]


def config_code(run: Run, variant: str) -> str | None:
    """The variant's values of the keys the variants differ in, as code; None if none differ."""
    values = run.kernel_values(variant)
    keys = run.changed_keys()
    if not keys:
        return None
    return md_code(", ".join(f"{k}={value_text(values.get(k, 'unset'))}" for k in keys))


def variant_table(run: Run, variant: str) -> dict:
    highlight = variant != run.variants[0]
    tables = []
    for head_dim, results in run.head_dim_groups(variant):
        notes = Footnotes()
        rows = [variant_row(run, r, notes, highlight) for r in results]
        tables.append({"head_dim": None if head_dim == run.main_head_dim else head_dim,
                       "rows": rows, "notes": notes.notes})
    return {"title": md_text(run.heading(variant)), "label": md_text(run.variant_label(variant)),
            "config": config_code(run, variant), "tables": tables}


def ignored_keys(run: Run) -> list[dict]:
    """Config keys the Triton-role backend recorded as not used (FlexAttention has no PRELOAD_V or
    waves_per_eu): once per backend and platform, with the keys it was given in every one of its
    cells (a variant that ignored nothing gave keys too), by variant where the variants gave
    different keys, and, of the ignored ones, those the variants differ in (their difference
    cannot show in its times)."""
    groups: dict[tuple, dict] = {}
    for result in run.results:
        name = result["roles"]["triton"]
        backend = backend_dicts(result).get(name) or {}
        recorded = backend.get("kernel_config")
        if not isinstance(recorded, dict) or "ignored" not in recorded:
            continue
        group = groups.setdefault((backend_name(name, backend), result["platform"]), {"ignored": {}, "used": {}})
        group["ignored"].update(dict.fromkeys(recorded["ignored"]))
        given = group["used"].setdefault(result["variant"], {})
        given.update(dict.fromkeys(recorded.get("kernel_options") or {}))
    changed = run.changed_keys() if len(run.variants) > 1 else []
    return [{"backend": who, "platform": md_text(platform), "ignored": [md_text(k) for k in sorted(group["ignored"])],
             **given_keys(run, group["used"]), "changed": [md_text(k) for k in sorted(group["ignored"]) if k in changed]}
            for (who, platform), group in groups.items() if group["ignored"]]


def given_keys(run: Run, by_variant: dict[str, dict]) -> dict:
    """The keys a backend was given: one list when every variant gave the same, else each
    variant's (`by_variant`), so that no variant's keys are left out of the note."""
    distinct = list(dict.fromkeys(tuple(keys) for keys in by_variant.values()))
    if len(distinct) == 1:
        return {"used": [md_text(k) for k in distinct[0]], "used_by_variant": []}
    return {"used": [], "used_by_variant": [{"variant": md_text(run.variant_label(v)),
                                             "given": [md_text(k) for k in keys] or ["none"]}
                                            for v, keys in by_variant.items()]}


def triton_pairs(run: Run) -> list[tuple[dict, dict, dict]]:
    """(shape, first variant's Triton cell, last variant's) where both have a time."""
    first, last = run.variants[0], run.variants[-1]
    pairs = []
    for result in run.of(last):
        before = run.find(first, result["shape"])
        if before is not None and role_ms(before, "triton") and role_ms(result, "triton"):
            pairs.append((result["shape"], role_backend(before, "triton"), role_backend(result, "triton")))
    return pairs


def same_code_variants(run: Run) -> bool:
    """Whether the first and the last variant's Triton-role cells ran the same code everywhere."""
    first, last = run.variants[0], run.variants[-1]
    pairs = [(role_backend(run.find(first, r["shape"]), "triton") if run.find(first, r["shape"]) else None,
              role_backend(r, "triton")) for r in run.of(last)]
    ran = [(a, b) for a, b in pairs if records_code(a) and records_code(b)]
    return bool(ran) and all(same_code(a, b) for a, b in ran)


def records_code(entry: dict | None) -> bool:
    """Whether the entry ran and records any fact of its code (the policy's code identity)."""
    identity = code_identity(entry)
    return identity is not None and any(value is not None for value in identity.values())


def improvement(run: Run) -> dict | None:
    """The shape whose Triton time changed most between the first and the last variant, and the
    policy's claim on that change: named only where it is beyond the noise and the margin."""
    pairs = triton_pairs(run)
    if not pairs:
        return None
    shape, before, after = max(pairs, key=lambda p: p[1]["wall_mean_ms"] / p[2]["wall_mean_ms"])
    claim = run.claim(before, after, names=(run.variant_label(run.variants[0]), run.variant_label(run.variants[-1])))
    a, b = before["wall_mean_ms"], after["wall_mean_ms"]
    return {"shape": run.shape_name(shape), "before": a, "after": b, "faster": a >= b,
            "ratio": a / b if a >= b else b / a, "claim": claim["claim"], "why": md_text(claim["why"]),
            "beyond_noise": claim["claim"] in NAMES_A_WINNER}


def beats(run: Run) -> list[dict]:
    """Shapes where Triton is faster than the vendor in the last variant, by the policy;
    `already` when it was so in the first too (the published "now" becomes "still")."""
    found = []
    for result in run.of(run.variants[-1]):
        before = run.find(run.variants[0], result["shape"])
        claim = vendor_vs_triton(run, result)
        # "now" needs a before: a shape only the last variant measured is left to the winner table.
        if before is None or claim["claim"] not in NAMES_A_WINNER or claim["faster"] != "b":
            continue
        earlier = vendor_vs_triton(run, before)
        found.append({"shape": run.shape_name(result["shape"]), "triton_ms": role_ms(result, "triton"),
                      "vendor_ms": role_ms(result, "vendor"),
                      "already": earlier["claim"] in NAMES_A_WINNER and earlier["faster"] == "b"})
    return found


def untold(run: Run) -> list[str]:
    """Shapes of the last variant where both ran but the policy cannot tell vendor from Triton:
    "beats at no shape" would claim more than the run knows there."""
    return [run.shape_name(r["shape"]) for r in run.of(run.variants[-1])
            if vendor_vs_triton(run, r)["claim"] == "cannot tell"]


def winner(run: Run, result: dict) -> dict:
    """Which of vendor and Triton was faster at this shape, by how much, as the policy claims it:
    `winner` beyond the noise and the margin, `same` within the margin, `below` real but below it,
    `untold` when the policy cannot tell (and why); `only` when one ran."""
    times = {role: role_ms(result, role) for role in ("vendor", "triton")}
    ran = [role for role, ms in times.items() if ms is not None]
    row = {"shape": shape_text(result["shape"]), "winner": None, "only": None, "same": None, "below": None,
           "untold": None}
    if len(ran) == 2:
        claim = vendor_vs_triton(run, result)
        win, lose = sorted(ran, key=times.get)
        if claim["faster"] is not None:  # the judged figure's direction, which the wall means may not share
            win = "vendor" if claim["faster"] == "a" else "triton"
            lose = "triton" if win == "vendor" else "vendor"
        row.update(ratio=times[lose] / times[win], win_ms=times[win], lose_ms=times[lose], why=md_text(claim["why"]))
        if claim["claim"] in NAMES_A_WINNER:
            row["winner"] = "vendor" if claim["faster"] == "a" else "triton"
        elif claim["claim"] == "below margin":
            row["below"] = "vendor" if claim["faster"] == "a" else "triton"
        elif claim["claim"] == "same":
            row["same"] = True
        else:
            row["untold"] = True
    elif ran:
        row["only"] = ran[0]
        missing = "triton" if ran[0] == "vendor" else "vendor"
        backend = role_backend(result, missing)
        row.update(missing=missing, missing_status=status_text(backend),
                   missing_reason=md_text(backend["reason"]) if backend and backend.get("reason") else None)
    return row


def winners(run: Run) -> dict:
    """The winner table's rows, and, when one role ran at no shape of the last variant for one
    reason, that reason said once instead of a row per shape."""
    rows = [winner(run, r) for r in run.of(run.variants[-1])]
    only = {(w["missing"], w["missing_status"], w["missing_reason"]) for w in rows if w["only"]}
    if rows and all(w["only"] for w in rows) and len(only) == 1:
        missing, status, reason = only.pop()
        return {"rows": [], "none": {"role": missing, "status": status, "reason": reason}}
    return {"rows": rows, "none": None}


def mark_notes(run: Run) -> list[dict]:
    """The marks the tables use, each with what it means and, for "cannot tell", the policy's
    reasons in this run (once each)."""
    claimed = [run.role_claim(r, "baseline", role) for r in run.results for role in ("vendor", "triton")]
    used = {MARKS.get(c["claim"]) for c in claimed} - {None}
    reasons = list(dict.fromkeys(UNTOLD_WORDS.get(c["code"], c["code"] or "no reason")
                                 for c in claimed if c["claim"] == "cannot tell"))
    notes = []
    if MARKS["cannot tell"] in used:
        notes.append({"mark": MARKS["cannot tell"], "reasons": [md_text(r) for r in reasons]})
    if MARKS["same"] in used:
        notes.append({"mark": MARKS["same"], "reasons": []})
    return notes


def same_code_backends(run: Run) -> list[str]:
    """Backends that ran the same code in every variant at every shape (they read no variant
    config): their differences between the variant tables are run-to-run noise."""
    if len(run.variants) < 2:
        return []
    names = {}
    for result in run.of(run.variants[0]):
        others = [run.find(v, result["shape"]) for v in run.variants[1:]]
        for name, entry in backend_dicts(result).items():
            same = entry["status"] == "ok" and (code_identity(entry) or {}).get("implementation") is not None and all(
                o is not None and same_code(entry, backend_dicts(o).get(name)) for o in others)
            names[name] = names.get(name, True) and same
    once = {name for names in run.measured_once.values() for name in names}
    return [backend_name(name, backend_dicts(run.first)[name]) for name, same in names.items()
            if same and name in backend_dicts(run.first) and name not in once]


def measured_once(run: Run) -> list[dict]:
    """Per measuring variant, the backends measured once per shape in its jobs and shown in every
    variant's table (fabench.results.shared): the report says so under the tables."""
    said = []
    for variant, names in run.measured_once.items():
        ran = [backend_name(name, backend_dicts(run.first)[name]) for name in names
               if (backend_dicts(run.first).get(name) or {}).get("status") in RAN]  # unavailable: listed apart
        if ran:
            said.append({"variant": md_text(run.variant_label(variant)), "backends": ran})
    return said


def judged_on(run: Run) -> str | None:
    """The figure the policy judged the tables' claims on, in words; None for published numbers."""
    if run.published:
        return None
    metrics = {run.role_claim(r, "baseline", role)["metric"]
               for r in run.results for role in ("vendor", "triton")} - {None}
    return " and ".join(METRICS[m] for m in METRICS if m in metrics) or None


def context(run: Run, published: dict | None) -> dict:
    first, last = run.variants[0], run.variants[-1]
    return {
        "columns": columns(run),
        "variants": [variant_table(run, v) for v in run.variants],
        "ignored_keys": ignored_keys(run),
        # One variant has nothing to compare against: no key improvements.
        "compared": len(run.variants) > 1,
        "first_label": md_text(run.variant_label(first)),
        "last_label": md_text(run.variant_label(last)),
        "improvement": improvement(run),
        "beats": beats(run),
        "untold": untold(run),
        "winners": winners(run),
        "marks": mark_notes(run),
        "judged_on": judged_on(run),
        "same_code_triton": len(run.variants) > 1 and same_code_variants(run),
        # One backend fills the vendor and the Triton role: there is no pair to name a winner of.
        "one_backend": vendor_is_triton(run),
        "same_code": same_code_backends(run),
        "measured_once": measured_once(run),
        "unstable_mark": UNSTABLE_MARK,
        "any_unstable": any(unstable(b) for _, _, b in run.backends()),
    }
