"""Results and Analysis: a table per variant, the config keys a backend ignored, the key
improvements from the first variant to the last, and the vendor-vs-Triton winner per shape.

Highlighting rule (it reproduces the published tables): the first variant is the reference, the
state before any change, so its table is plain. Every later variant's table shows in bold the
faster of the vendor and Triton times in each row, and the Triton speedup where Triton beats the
vendor, because the question such a table answers is whether the changed Triton config caught up
with the vendor kernel.
"""

from __future__ import annotations

from fabench.report.format import (backend_name, bold, fmt_ms, fmt_times, md_code, md_text, shape_text,
                                   status_text, value_text)
from fabench.report.model import Run, role_backend, role_ms, speedup


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


def ms_cell(result: dict, role: str, notes: Footnotes, strong: bool = False) -> str:
    backend = role_backend(result, role)
    ms = role_ms(result, role)
    if ms is None:
        return f"{status_text(backend)} {notes.mark(result['roles'][role], backend)}"
    return bold(fmt_ms(ms), strong)


def variant_row(result: dict, notes: Footnotes, highlight: bool) -> list[str]:
    vendor, triton = role_ms(result, "vendor"), role_ms(result, "triton")
    both = highlight and vendor is not None and triton is not None
    triton_speedup = speedup(result, "triton")
    return [
        shape_text(result["shape"]),
        ms_cell(result, "baseline", notes),
        ms_cell(result, "vendor", notes, both and vendor < triton),
        ms_cell(result, "triton", notes, both and triton < vendor),
        fmt_times(speedup(result, "vendor")),
        bold(fmt_times(triton_speedup), both and triton < vendor and triton_speedup is not None),
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
        rows = [variant_row(r, notes, highlight) for r in results]
        tables.append({"head_dim": None if head_dim == run.main_head_dim else head_dim,
                       "rows": rows, "notes": notes.notes})
    return {"title": md_text(run.title(variant)), "label": md_text(run.variant_label(variant)),
            "config": config_code(run, variant), "tables": tables}


def ignored_keys(run: Run) -> list[dict]:
    """Config keys the Triton-role backend recorded as not used (FlexAttention has no PRELOAD_V or
    waves_per_eu): once per backend and platform, with the keys it was given and, of the ignored
    ones, those the variants differ in (their difference cannot show in its times)."""
    groups: dict[tuple, dict] = {}
    for result in run.results:
        name = result["roles"]["triton"]
        backend = result["backends"].get(name) or {}
        recorded = backend.get("kernel_config")
        if not isinstance(recorded, dict) or not recorded.get("ignored"):
            continue
        key = (backend_name(name, backend), result["platform"], tuple(recorded["ignored"]))
        groups.setdefault(key, {}).update(recorded.get("kernel_options") or {})
    changed = run.changed_keys() if len(run.variants) > 1 else []
    return [{"backend": who, "platform": md_text(platform), "ignored": [md_text(k) for k in ignored],
             "used": [md_text(k) for k in used], "changed": [md_text(k) for k in ignored if k in changed]}
            for (who, platform, ignored), used in groups.items()]


def improvement(run: Run) -> dict | None:
    """The shape whose Triton time changed most between the first and the last variant."""
    first, last = run.variants[0], run.variants[-1]
    pairs = [(r["shape"], role_ms(run.find(first, r["shape"]), "triton"), role_ms(r, "triton")) for r in run.of(last)]
    pairs = [(shape, a, b) for shape, a, b in pairs if a and b]
    if not pairs:
        return None
    shape, before, after = max(pairs, key=lambda p: p[1] / p[2])
    return {"shape": run.shape_name(shape), "before": before, "after": after,
            "faster": before >= after, "ratio": before / after if before >= after else after / before}


def beats(run: Run) -> list[dict]:
    """Shapes where Triton is faster than the vendor in the last variant; `already` when it was
    faster in the first too (the published "now" becomes "still")."""
    found = []
    for result in run.of(run.variants[-1]):
        vendor, triton = role_ms(result, "vendor"), role_ms(result, "triton")
        before = run.find(run.variants[0], result["shape"])
        # "now" needs a before: a shape only the last variant measured is left to the winner table.
        if before is None or vendor is None or triton is None or triton >= vendor:
            continue
        before_vendor, before_triton = role_ms(before, "vendor"), role_ms(before, "triton")
        already = before_vendor is not None and before_triton is not None and before_triton < before_vendor
        found.append({"shape": run.shape_name(result["shape"]), "triton_ms": triton, "vendor_ms": vendor,
                      "already": already})
    return found


def winner(result: dict) -> dict:
    """Which of vendor and Triton was faster at this shape, by how much; `only` when one ran."""
    times = {role: role_ms(result, role) for role in ("vendor", "triton")}
    ran = [role for role, ms in times.items() if ms is not None]
    row = {"shape": shape_text(result["shape"]), "winner": None, "only": None}
    if len(ran) == 2:
        win, lose = sorted(ran, key=times.get)
        row.update(winner=win, ratio=times[lose] / times[win], win_ms=times[win], lose_ms=times[lose])
    elif ran:
        row["only"] = ran[0]
    return row


def context(run: Run, published: dict | None) -> dict:
    first, last = run.variants[0], run.variants[-1]
    return {
        "variants": [variant_table(run, v) for v in run.variants],
        "ignored_keys": ignored_keys(run),
        # One variant has nothing to compare against: no key improvements.
        "compared": len(run.variants) > 1,
        "first_label": md_text(run.variant_label(first)),
        "last_label": md_text(run.variant_label(last)),
        "improvement": improvement(run),
        "beats": beats(run),
        "winners": [winner(r) for r in run.of(last)],
    }
