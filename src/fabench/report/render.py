"""Render a collected run as the published report's Markdown, section for section.

    python -m fabench.report.render --results results/<run>/results.json --config results/<run>/config.json \
        --published report/published/mi300x-2025-12-30.yaml --out results/<run>/report.md

Everything shown comes from the data: rows are the shapes that were measured, columns are the
three roles (baseline, vendor, triton) labelled with the backends that filled them on the run's
platform. Python computes each table's cells; report/report.md.j2 lays the sections out.

Highlighting rule (it reproduces the published tables): the first variant is the reference, the
state before any change, so its table is plain. Every later variant's table shows in bold the
faster of the vendor and Triton times in each row, and the Triton speedup where Triton beats the
vendor, because the question such a table answers is whether the changed Triton config caught up
with the vendor kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import jinja2

from fabench.results.collect import shape_key
from fabench.report.published import find_published, load_published, source_text

ROLES = ("baseline", "vendor", "triton")
SHAPE_HEADER = "Config (B,S,H,D)"
DIM_WORDS = (("batch", "batch"), ("seq", "seq"), ("heads", "heads"), ("head_dim", "d_k"))
FAILURE_WORDS = {
    "oom": "out of memory",
    "out_of_resources": "out of resources",
    "unsupported": "unsupported",
    "correctness": "wrong result",
    "fallback": "fell back to slow code",
    "config_mismatch": "ran another config",
    "error": "error",
}
FLOP_CONVENTION = "causal: half of the dense 4*B*H*S^2*D"
# The published appendix prints fields left-aligned in these widths, one space apart, under and
# over rules of 90 '=' (measured from the published text). A column whose label or a value does not
# fit is widened to its longest cell plus FULL_OUTPUT_GAP, and the rules by as much.
FULL_OUTPUT_WIDTHS = (20, 15, 15, 15, 12)
FULL_OUTPUT_RULE_WIDTH = 90
FULL_OUTPUT_GAP = 2
REPO_TEMPLATES = Path(__file__).resolve().parents[3] / "report"
PACKAGE_TEMPLATES = Path(__file__).resolve().parent / "data"
TEMPLATE = "report.md.j2"


# ---------------------------------------------------------------- formatting

def fmt(value, spec: str, missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def fmt_ms(value) -> str:
    return fmt(value, ".3f")


def fmt_sig(value, digits: int = 3) -> str:
    """`digits` significant digits without exponent (0.0236, 14.7, 530): small TFLOP/s stay visible."""
    if value is None:
        return "n/a"
    if value == 0 or not math.isfinite(value):
        return format(value, "g")
    rounded = float(f"{value:.{digits}g}")
    return f"{rounded:.{max(0, digits - 1 - math.floor(math.log10(abs(rounded))))}f}"


def fmt_times(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def md_cell(text) -> str:
    """Table cells may hold free text (failure reasons): keep the row on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def shape_text(shape: dict) -> str:
    return "({}, {}, {}, {})".format(*shape_key(shape))


def value_text(value) -> str:
    # JSON spelling for booleans and null, as in aiter's config file (PRELOAD_V=false).
    return value if isinstance(value, str) else json.dumps(value)


def status_text(backend: dict | None) -> str:
    if backend is None:
        return "not run"
    if backend["status"] == "failed":
        return f"failed: {FAILURE_WORDS.get(backend['failure_kind'], backend['failure_kind'])}"
    return backend["status"]


# ---------------------------------------------------------------- the run, indexed

def measured_ms(backend: dict | None) -> float | None:
    """Wall mean of a backend that ran cleanly; anything else has no time to compare."""
    if backend is None or backend["status"] != "ok":
        return None
    return backend["wall_mean_ms"]


class ShapeNames:
    """Short shape names ("seq=512"): only the dimensions that tell the shapes apart.

    The main shapes (those with the main head_dim) are named by the dimensions that vary among
    them; any other shape also names every dimension where it departs from them ("d_k=64").
    """

    def __init__(self, shapes: list[dict], main_head_dim: int):
        main = [s for s in shapes if s["head_dim"] == main_head_dim]
        self.common = {dim: main[0][dim] for dim, _ in DIM_WORDS if len({s[dim] for s in main}) == 1}

    def __call__(self, shape: dict) -> str:
        parts = [f"{word}={shape[dim]}" for dim, word in DIM_WORDS
                 if self.common.get(dim, object()) != shape[dim]]
        return ", ".join(parts) or shape_text(shape)


class Run:
    """The collected results and the config, indexed the ways the sections need."""

    def __init__(self, collected: dict, config: dict):
        self.name = collected.get("run") or config.get("run")
        self.config = config
        shapes = sorted({shape_key(r["shape"]): r["shape"] for r in collected["results"]}.values(), key=shape_key)
        # The head_dim most shapes share is the report's subject (the published report's 256);
        # other head dims are side comparisons, as its appendix's d_k=64 line.
        self.main_head_dim = Counter(s["head_dim"] for s in shapes).most_common(1)[0][0]
        self.shape_name = ShapeNames(shapes, self.main_head_dim)
        self.variants = self._variant_order(collected["results"])
        self.results = sorted(collected["results"], key=self._order)
        self.first = self.results[0]

    def _order(self, result: dict) -> tuple:
        """Variant order; the main head_dim first, other head dims ascending; (B,S,H,D) within."""
        shape = result["shape"]
        main = shape["head_dim"] == self.main_head_dim
        return self.variants.index(result["variant"]), not main, shape["head_dim"], shape_key(shape)

    def _variant_order(self, results: list[dict]) -> list[str]:
        """Config order; a variant with results but not in the config goes last."""
        present = [r["variant"] for r in results]
        order = [v for v in self.config.get("variants", {}) if v in present]
        return order + [v for v in dict.fromkeys(present) if v not in order]

    def of(self, variant: str) -> list[dict]:
        return [r for r in self.results if r["variant"] == variant]

    def find(self, variant: str, shape: dict) -> dict | None:
        return next((r for r in self.of(variant) if shape_key(r["shape"]) == shape_key(shape)), None)

    def variant_info(self, variant: str, key: str) -> str:
        return self.config.get("variants", {}).get(variant, {}).get(key) or variant

    def head_dim_groups(self, variant: str) -> list[tuple[int, list[dict]]]:
        """Results grouped by head_dim, the main head_dim first, then ascending."""
        dims = dict.fromkeys(r["shape"]["head_dim"] for r in self.of(variant))
        return [(d, [r for r in self.of(variant) if r["shape"]["head_dim"] == d]) for d in dims]

    def label(self, role: str) -> str:
        """A column's label: the label of the backend that filled the role on this platform."""
        for result in self.results:
            backend = result["backends"].get(result["roles"][role])
            if backend:
                return backend["label"]
        return self.first["roles"][role]

    def provenance_values(self, key: str) -> list[str]:
        values = (r["provenance"].get(key) for r in self.results)
        return [v for v in dict.fromkeys(values) if v is not None]


def role_backend(result: dict, role: str) -> dict | None:
    return result["backends"].get(result["roles"][role])


def speedup(result: dict, role: str) -> float | None:
    """Baseline time over this role's time, unless the data states the speedup itself."""
    backend = role_backend(result, role)
    if backend is not None and backend.get("speedup") is not None:
        return backend["speedup"]
    base, mine = measured_ms(role_backend(result, "baseline")), measured_ms(backend)
    return base / mine if base is not None and mine else None


def role_ms(result: dict | None, role: str) -> float | None:
    return None if result is None else measured_ms(role_backend(result, role))


# ---------------------------------------------------------------- tables

class Notes:
    """Footnotes under one table: each distinct (backend, status, reason) gets one number."""

    def __init__(self):
        self.texts: list[str] = []

    def mark(self, name: str, backend: dict | None) -> str:
        if backend is None:
            text = f"`{name}`: not in this job's results"
        else:
            text = f"{backend['label']} (`{name}`): {status_text(backend)}: {backend['reason']}"
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def table(header: list[str], rows: list[list[str]], notes: Notes | None = None) -> dict:
    return {"header": [md_cell(c) for c in header], "rows": [[md_cell(c) for c in row] for row in rows],
            "notes": [md_cell(n) for n in notes.texts] if notes else []}


def ms_cell(result: dict, role: str, notes: Notes, strong: bool = False) -> str:
    backend = role_backend(result, role)
    if measured_ms(backend) is None:
        return f"{status_text(backend)} {notes.mark(result['roles'][role], backend)}"
    return bold(fmt_ms(backend["wall_mean_ms"]), strong)


def variant_row(result: dict, notes: Notes, highlight: bool) -> list[str]:
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


def variant_header(run: Run) -> list[str]:
    b, v, t = (run.label(role) for role in ROLES)
    return [SHAPE_HEADER, f"{b} (ms)", f"{v} (ms)", f"{t} (ms)", f"{v} Speedup", f"{t} Speedup"]


def kernel_values(run: Run, variant: str) -> dict:
    """The Triton-role config as measured (the result's kernel_config), else as configured."""
    for result in run.of(variant):
        if (result.get("kernel_config") or {}).get("values"):
            return result["kernel_config"]["values"]
    return run.config.get("variants", {}).get(variant, {}).get("triton") or {}


def differing_keys(values: list[dict]) -> list[str]:
    """Keys whose values differ between variants; with one variant, all of them."""
    keys = list(dict.fromkeys(k for v in values for k in v))
    if len(values) < 2:
        return keys
    return [k for k in keys if len({json.dumps(v.get(k, "unset")) for v in values}) > 1]


def config_line(run: Run, variant: str) -> str | None:
    values = kernel_values(run, variant)
    keys = differing_keys([kernel_values(run, v) for v in run.variants])
    if not keys:
        return None
    shown = ", ".join(f"{k}={value_text(values.get(k, 'unset'))}" for k in keys)
    return f"{run.variant_info(variant, 'label')}: `{shown}`"


def ignored_key_notes(run: Run) -> list[str]:
    """Config keys the Triton-role backend recorded as not used (FlexAttention has no PRELOAD_V or
    waves_per_eu): once per backend and platform, naming the keys the variants differ in."""
    groups: dict[tuple, dict] = {}
    for result in run.results:
        name = result["roles"]["triton"]
        backend = result["backends"].get(name) or {}
        recorded = backend.get("kernel_config")
        if not isinstance(recorded, dict) or not recorded.get("ignored"):
            continue
        key = (backend_name(name, backend), result["platform"], tuple(recorded["ignored"]))
        groups.setdefault(key, {}).update(recorded.get("kernel_options") or {})
    differing = differing_keys([kernel_values(run, v) for v in run.variants]) if len(run.variants) > 1 else []
    notes = []
    for (who, platform, ignored), used in groups.items():
        note = f"{who}, the Triton-role backend on {platform}, did not use the config keys {', '.join(ignored)}"
        note += f"; it was given only {', '.join(used)}." if used else "."
        changed = [k for k in ignored if k in differing]
        if changed:
            note += (f" The variants' {'difference' if len(changed) == 1 else 'differences'} in "
                     f"{', '.join(changed)} therefore cannot show in its times.")
        notes.append(md_cell(note))
    return notes


def variant_section(run: Run, variant: str) -> dict:
    highlight = variant != run.variants[0]
    tables = []
    for head_dim, results in run.head_dim_groups(variant):
        notes = Notes()
        rows = [variant_row(r, notes, highlight) for r in results]
        caption = None if head_dim == run.main_head_dim else f"At d_k={head_dim}:"
        tables.append({"caption": caption, **table(variant_header(run), rows, notes)})
    return {"title": run.variant_info(variant, "title"), "config_line": config_line(run, variant), "tables": tables}


# ---------------------------------------------------------------- computed findings

def improvement_line(run: Run) -> str:
    """The largest change of the Triton time between the first and the last variant."""
    first, last = run.variants[0], run.variants[-1]
    pairs = [(r["shape"], role_ms(run.find(first, r["shape"]), "triton"), role_ms(r, "triton")) for r in run.of(last)]
    pairs = [(shape, a, b) for shape, a, b in pairs if a and b]
    if not pairs:
        return (f"{run.label('triton')}: no shape has a time in both {run.variant_info(first, 'label')} "
                f"and {run.variant_info(last, 'label')}")
    shape, before, after = max(pairs, key=lambda p: p[1] / p[2])
    ratio, word = (before / after, "faster") if before >= after else (after / before, "slower")
    return (f"{run.label('triton')} at {run.shape_name(shape)}: **{before:.3f}ms → {after:.3f}ms** "
            f"({ratio:.1f}x {word})")


def beats_lines(run: Run) -> list[str]:
    """Where Triton is faster than the vendor in the last variant ("now", or "still" if it was already)."""
    t, v = run.label("triton"), run.label("vendor")
    lines = []
    for result in run.of(run.variants[-1]):
        vendor, triton = role_ms(result, "vendor"), role_ms(result, "triton")
        before = run.find(run.variants[0], result["shape"])
        # "now" needs a before: a shape only the last variant measured is left to the winner table.
        if before is None or vendor is None or triton is None or triton >= vendor:
            continue
        already = role_ms(before, "triton") is not None and role_ms(before, "vendor") is not None \
            and role_ms(before, "triton") < role_ms(before, "vendor")
        when = "still" if already else "now"
        lines.append(f"{t} {when} **beats {v}** at {run.shape_name(result['shape'])} ({triton:.3f}ms vs {vendor:.3f}ms)")
    return lines or [f"{t} beats {v} at no measured shape"]


def key_improvements(run: Run) -> list[str]:
    if len(run.variants) < 2:
        return []
    return [improvement_line(run), *beats_lines(run)]


def winner_row(run: Run, result: dict) -> list[str]:
    names = {"vendor": run.label("vendor"), "triton": run.label("triton")}
    times = {role: role_ms(result, role) for role in names}
    ran = [role for role, ms in times.items() if ms is not None]
    if len(ran) < 2:
        only = f"only {names[ran[0]]} measured" if ran else "neither measured"
        return [shape_text(result["shape"]), names[ran[0]] if ran else "n/a", only]
    win, lose = sorted(ran, key=times.get)
    margin = f"{times[lose] / times[win]:.2f}x ({times[win]:.3f} ms vs {times[lose]:.3f} ms)"
    return [shape_text(result["shape"]), f"**{names[win]}**", margin]


def winners(run: Run) -> dict:
    last = run.variants[-1]
    rows = [winner_row(run, r) for r in run.of(last)]
    return {"variant_label": run.variant_info(last, "label"), **table([SHAPE_HEADER, "Winner", "Margin"], rows)}


# ---------------------------------------------------------------- published vs reproduced

def same_hardware(result: dict, published: dict) -> bool:
    """Measured on the published platform and device (by name), so a difference in % means something."""
    hardware = published["source"]["hardware"]
    device = result["provenance"].get("device") or ""
    return result["platform"] == hardware.get("platform", result["platform"]) \
        and hardware["device"].lower() in device.lower()


def ratio_text(ours: float, pub: float) -> str:
    """This run's time against the published one, as a factor: across machines a % is noise."""
    return f"{fmt_sig(ours / pub)}x slower" if ours >= pub else f"{fmt_sig(pub / ours)}x faster"


def difference_text(result: dict, published: dict, ours: float | None, pub: float) -> str:
    if ours is None or not pub:
        return "n/a"
    if same_hardware(result, published):
        return f"{(ours - pub) / pub * 100:+.1f}%"
    return ratio_text(ours, pub)


def comparison_rows(run: Run, published: dict) -> list[list[str]]:
    rows = []
    for result in run.results:
        row = find_published(published, result["variant"], result["shape"])
        for role in ROLES if row else ():
            name = published["roles"][role]
            if row["ms"].get(name) is None:
                continue
            pub, ours, backend = row["ms"][name], role_ms(result, role), role_backend(result, role)
            diff = difference_text(result, published, ours, pub)
            rows.append([run.variant_info(result["variant"], "label"), shape_text(result["shape"]), role,
                         published["labels"][name], fmt_ms(pub),
                         backend["label"] if backend else result["roles"][role],
                         fmt_ms(ours) if ours is not None else status_text(backend), diff])
    return rows


def comparison_caveats(run: Run, published: dict, rows: list[list[str]]) -> list[str]:
    caveats = []
    hardware = published["source"]["hardware"]["device"]
    other = [r for r in run.results if not same_hardware(r, published)]
    if other:
        devices = [d for d in dict.fromkeys(r["provenance"].get("device") for r in other) if d]
        rows_word = "" if len(other) == len(run.results) else " in their rows"
        caveats.append(f"The hardware differs: published on {hardware}, measured here on "
                       f"{', '.join(devices) or 'an unrecorded device'}. Difference{rows_word} is therefore the "
                       f"ratio of the two times, not a %: it compares two machines, not a reproduction error.")
    swapped = sorted({(r[3], r[5]) for r in rows if r[3] != r[5]})
    if swapped:
        pairs = ", ".join(f"{a} → {b}" for a, b in swapped)
        caveats.append(f"Some roles were filled by other backends than published ({pairs}): "
                       f"those rows compare the role, not the same kernel.")
    return caveats


def published_section(run: Run, published: dict | None) -> dict | None:
    if not published:
        return None
    rows = comparison_rows(run, published)
    header = ["Variant", SHAPE_HEADER, "Role", "Published backend", "Published (ms)",
              "This run's backend", "This run (ms)", "Difference"]
    return {"source": source_text(published), "table": table(header, rows) if rows else None,
            "caveats": comparison_caveats(run, published, rows)}


# ---------------------------------------------------------------- correctness, timers, all backends

def backend_name(name: str, backend: dict) -> str:
    return f"{backend['label']} (`{name}`)"


RAN = ("ok", "failed")


def all_backends(run: Run):
    for result in run.results:
        for name, backend in result["backends"].items():
            yield result, name, backend


def ran_backends(run: Run):
    """Backends that ran (cleanly or not); unavailable ones are summarised once instead."""
    for result, name, backend in all_backends(run):
        if backend["status"] in RAN:
            yield result, name, backend


def unavailable_backends(run: Run) -> list[str]:
    """One line per backend that did not run on this host, with its reason, not one per job.

    A role backend missing from a job's results counts too. "(k of n jobs)" when not all jobs agree.
    """
    counts: Counter = Counter()
    for result in run.results:
        for name, backend in result["backends"].items():
            if backend["status"] not in RAN:
                counts[backend_name(name, backend), backend.get("reason") or "no reason recorded"] += 1
        for role in ROLES:
            name = result["roles"][role]
            if name not in result["backends"]:
                counts[f"`{name}`", "not run: not in the job's results"] += 1
    total = len(run.results)
    return [md_cell(f"{who}: {reason}" + ("" if n == total else f" ({n} of {total} jobs)"))
            for (who, reason), n in counts.items()]


def correctness_verdict(correctness: dict | None, tolerance: dict) -> str:
    """Judged against the run's tolerance; the runner's own verdict only when no numbers exist."""
    c = correctness or {}
    err, cos = c.get("max_abs_err"), c.get("cosine")
    if err is None and cos is None:
        passed = c.get("passed")
        return "n/a" if passed is None else ("pass" if passed else "**FAIL**")
    good = (err is None or err <= tolerance["max_abs_err"]) and (cos is None or cos >= tolerance["min_cosine"])
    return "pass" if good else "**FAIL**"


def correctness_section(run: Run) -> dict:
    rows = []
    for result, name, backend in ran_backends(run):
        c = backend.get("correctness") or {}
        rows.append([run.variant_info(result["variant"], "label"), shape_text(result["shape"]),
                     backend_name(name, backend), status_text(backend), fmt(c.get("max_abs_err"), ".2e"),
                     fmt(c.get("cosine"), ".6f"), correctness_verdict(c, result["tolerance"])])
    header = ["Variant", SHAPE_HEADER, "Backend", "Status", "Max abs err", "Cosine", "Check"]
    return {"tolerance": run.first["tolerance"], "unavailable": unavailable_backends(run), **table(header, rows)}


def tflops(result: dict, backend: dict, kind: str) -> float | None:
    """Recorded TFLOP/s, else derived from the job's FLOP count and the time."""
    recorded = (backend.get("tflops") or {}).get(kind)
    if recorded is not None:
        return recorded
    ms = backend.get("wall_mean_ms") if kind == "wall" else (backend.get("device_ms") or {}).get("median")
    return result["flops"] / (ms * 1e9) if result.get("flops") and ms else None


def has_device_timer(run: Run) -> bool:
    """Whether any job timed on the device; without one (a CPU) only wall-clock columns are shown."""
    return any(r["method"].get("device_timer") for r in run.results) or \
        any((b.get("device_ms") or {}).get("median") is not None for _, _, b in all_backends(run))


def timing_section(run: Run) -> dict:
    device = has_device_timer(run)
    rows = []
    for result in run.results:
        for role in ROLES:
            backend = role_backend(result, role)
            if backend is None or backend["status"] not in RAN:
                continue
            row = [run.variant_info(result["variant"], "label"), shape_text(result["shape"]),
                   backend_name(result["roles"][role], backend), fmt_ms(backend.get("wall_mean_ms"))]
            if device:
                dev = backend.get("device_ms") or {}
                row += [fmt_ms(dev.get("median")), fmt_ms(dev.get("p10")), fmt_ms(dev.get("p90")),
                        fmt_sig(tflops(result, backend, "device_median"))]
            rows.append(row + [fmt_sig(tflops(result, backend, "wall"))])
    header = ["Variant", SHAPE_HEADER, "Backend", "Wall mean (ms)"]
    if device:
        header += ["Device median (ms)", "Device p10 (ms)", "Device p90 (ms)", "TFLOP/s (device median)"]
    header.append("TFLOP/s (wall)")
    conventions = [r.get("flop_convention") for r in run.results if r.get("flop_convention")]
    timers = [r["method"].get("device_timer") for r in run.results if r["method"].get("device_timer")]
    return {"flop_convention": ", ".join(dict.fromkeys(conventions)) or FLOP_CONVENTION,
            "device": device, "device_timer": ", ".join(dict.fromkeys(timers)) or "none recorded",
            "platforms": ", ".join(dict.fromkeys(r["platform"] for r in run.results)),
            "wall_method": run.first["method"]["wall"], **table(header, rows)}


def all_backends_section(run: Run) -> dict:
    device = has_device_timer(run)
    rows = []
    for result, name, backend in ran_backends(run):
        row = [run.variant_info(result["variant"], "label"), shape_text(result["shape"]),
               backend_name(name, backend), status_text(backend), fmt_ms(backend.get("wall_mean_ms"))]
        if device:
            row += [fmt_ms((backend.get("device_ms") or {}).get("median")),
                    fmt_sig(tflops(result, backend, "device_median"))]
        else:
            row.append(fmt_sig(tflops(result, backend, "wall")))
        rows.append(row + [backend.get("reason") or ""])
    header = ["Variant", SHAPE_HEADER, "Backend", "Status", "Wall mean (ms)"]
    header += ["Device median (ms)", "TFLOP/s (device median)"] if device else ["TFLOP/s (wall)"]
    return table(header + ["Reason"], rows)


# ---------------------------------------------------------------- appendix (fixed-width output)

def column_widths(lines: list[list[str]]) -> list[int]:
    """The published widths, except where a cell does not fit (leaves no space before the next)."""
    widths = []
    for i, width in enumerate(FULL_OUTPUT_WIDTHS):
        longest = max((len(cells[i]) for cells in lines if len(cells) > i), default=0)
        widths.append(width if longest < width else longest + FULL_OUTPUT_GAP)
    return widths


def fixed_width(cells: list[str], widths: Sequence[int] = FULL_OUTPUT_WIDTHS) -> str:
    padded = [f"{cell:<{width}}" for cell, width in zip(cells, widths)]
    return " ".join(padded + list(cells[len(widths):]))


def plain_ms(result: dict, role: str) -> str:
    ms = role_ms(result, role)
    return fmt_ms(ms) if ms is not None else status_text(role_backend(result, role))


def full_output_cells(result: dict) -> list[str]:
    return [shape_text(result["shape"]), *(plain_ms(result, role) for role in ROLES),
            fmt_times(speedup(result, "vendor")), fmt_times(speedup(result, "triton"))]


def vendor_vs_triton_lines(run: Run, result: dict) -> list[str]:
    """The published wording: ratio = Triton/vendor, called "slower" when the vendor took longer."""
    v, t = run.label("vendor"), run.label("triton")
    width = max(len(v), len(t)) + 2
    vendor, triton = role_ms(result, "vendor"), role_ms(result, "triton")
    lines = [f"{v} vs {t} comparison ({run.shape_name(result['shape'])}):",
             f"  {v + ':':<{width}}{plain_ms(result, 'vendor')}{' ms' if vendor is not None else ''}",
             f"  {t + ':':<{width}}{plain_ms(result, 'triton')}{' ms' if triton is not None else ''}"]
    if vendor and triton:
        lines.append(f"  {v} is {triton / vendor:.2f}x {'slower' if vendor > triton else 'faster'} than {t}")
    return lines


def full_output(run: Run) -> list[str]:
    """The last variant printed like the published script's output."""
    last = run.variants[-1]
    groups = run.head_dim_groups(last)
    b, v, t = (run.label(role) for role in ROLES)
    header = ["Config", f"{b} (ms)", f"{v} (ms)", f"{t} (ms)", f"{v} Speedup", f"{t} Speedup"]
    rows = [full_output_cells(r) for hd, results in groups if hd == run.main_head_dim for r in results]
    widths = column_widths([header, *rows])
    rule = "=" * (FULL_OUTPUT_RULE_WIDTH + sum(widths) - sum(FULL_OUTPUT_WIDTHS))
    device = "cpu" if run.first["platform"] == "cpu" else "cuda"  # torch's device name, also on ROCm
    lines = [f"Device: {device}"] + [f"GPU: {d}" for d in run.provenance_values("device")[:1] if device == "cuda"]
    lines += ["", rule, fixed_width(header, widths), rule]
    lines += [fixed_width(row, widths) for row in rows]
    lines.append(rule)
    for result in (r for hd, results in groups if hd != run.main_head_dim for r in results):
        lines += ["", *vendor_vs_triton_lines(run, result)]
    return lines


# ---------------------------------------------------------------- header, environment, configuration

HARDWARE_FIELDS = (("Device", "device"), ("Architecture", "arch"), ("Host", "host"), ("Driver", "driver"))
# os, python and cudnn are extras the runner records beyond the design's list; shown when present.
SOFTWARE_FIELDS = (("OS", "os"), ("Python", "python"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("HIP", "hip"),
                   ("PyTorch", "torch"), ("Triton", "triton"),
                   ("aiter", "aiter"), ("aiter commit", "aiter_commit"), ("Runtime", "runtime"),
                   ("Image", "image"), ("Image ID", "image_id"), ("Project commit", "project_commit"),
                   ("Config SHA-256", "config_sha256"))


def field_lines(run: Run, fields) -> list[str]:
    """One line per recorded field; several values mean the jobs did not all run alike."""
    lines = []
    for name, key in fields:
        values = run.provenance_values(key)
        if values:
            note = " (differs between jobs)" if len(values) > 1 else ""
            lines.append(f"**{name}**: {'; '.join(map(str, values))}{note}")
    return lines


def reduced_notice(run: Run, published: dict | None) -> str | None:
    reduced = [r for r in run.results if r["method"].get("reduced")]
    if not reduced:
        return None
    used = " / ".join(dict.fromkeys(f"{r['method']['warmup']} warm-up and {r['method']['iters']} timed" for r in reduced))
    ref = published["method"] if published else run.config
    return (f"**Fewer iterations than published**: {len(reduced)} of {len(run.results)} jobs used {used} "
            f"iterations per backend instead of the published {ref.get('warmup')} warm-up and "
            f"{ref.get('iters')} timed iterations; their times are indicative only.")


def environment(run: Run, published: dict | None) -> dict:
    started, finished = run.provenance_values("started"), run.provenance_values("finished")
    period = f"{min(started)} to {max(finished)}" if started and finished else None
    return {"hardware": field_lines(run, HARDWARE_FIELDS), "software": field_lines(run, SOFTWARE_FIELDS),
            "period": period, "reduced": reduced_notice(run, published)}


def python_shape_lines(shapes: list[dict]) -> list[str]:
    """Shapes as the published parameter block writes them, fields aligned."""
    fields = [[f"batch={s['batch']},", f"seq={s['seq']},", f"heads={s['heads']},", f"d_k={s['head_dim']}"] for s in shapes]
    widths = [max(len(f[i]) for f in fields) for i in range(3)]
    return ["(" + " ".join([*(f[i].ljust(widths[i]) for i in range(3)), f[3]]) + ")," for f in fields]


def configuration(run: Run) -> dict:
    config = run.config
    shapes = config.get("shapes") or [r["shape"] for r in run.results]
    shapes = list({shape_key(s): s for s in shapes}.values())
    variants = [[v, run.variant_info(v, "title"), ", ".join(f"{k}={value_text(x)}" for k, x in kernel_values(run, v).items())]
                for v in run.variants]
    return {
        "shape_lines": python_shape_lines(shapes),
        "dtype": config.get("dtype", run.first["dtype"]),
        "causal": config.get("causal", run.first["causal"]),
        "warmup": config.get("warmup", run.first["method"]["warmup"]),
        "iters": config.get("iters", run.first["method"]["iters"]),
        "cpu": config.get("cpu"),
        "seed": config.get("seed"),
        "backends": config.get("backends") or list(run.first["backends"]),
        "roles": run.first["roles"],
        "platform": run.first["platform"],
        "tolerance": config.get("tolerance") or run.first["tolerance"],
        "variants": table(["Variant", "Title", "Triton-role config"], variants),
    }


def header(run: Run) -> dict:
    devices = run.provenance_values("device")
    return {
        "run": run.name,
        "platforms": ", ".join(dict.fromkeys(r["platform"] for r in run.results)),
        "device": ", ".join(devices) or "unrecorded device",
        "arch": ", ".join(run.provenance_values("arch")),
        "runtime": ", ".join(run.provenance_values("runtime")) or "unrecorded",
        "labels": {role: run.label(role) for role in ROLES},
    }


# ---------------------------------------------------------------- rendering

def template_env(template_dir: str | Path | None = None) -> jinja2.Environment:
    """Templates from `template_dir`, else the checkout's report/, else the package's data/."""
    folder = Path(template_dir) if template_dir else (REPO_TEMPLATES if (REPO_TEMPLATES / TEMPLATE).is_file() else PACKAGE_TEMPLATES)
    return jinja2.Environment(loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render(collected: dict, config: dict, published: dict | None = None,
           template_dir: str | Path | None = None) -> str:
    """The report as Markdown. `published` is the loaded report/published/*.yaml, or None."""
    if not collected.get("results"):
        raise ValueError("nothing to report: the collected run has no results")
    run = Run(collected, config)
    context = {
        "header": header(run),
        "environment": environment(run, published),
        "configuration": configuration(run),
        "variants": [variant_section(run, v) for v in run.variants],
        "ignored_keys": ignored_key_notes(run),
        "key_improvements": key_improvements(run),
        "winners": winners(run),
        "published": published_section(run, published),
        "correctness": correctness_section(run),
        "timing": timing_section(run),
        "all_backends": all_backends_section(run),
        "full_output": full_output(run),
    }
    return template_env(template_dir).get_template(TEMPLATE).render(**context)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.report.render", description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, type=Path, help="results/<run>/results.json")
    parser.add_argument("--config", required=True, type=Path, help="results/<run>/config.json")
    parser.add_argument("--published", type=Path, help="report/published/<report>.yaml (omit: no comparison)")
    parser.add_argument("--out", required=True, type=Path, help="results/<run>/report.md")
    parser.add_argument("--templates", type=Path, help="folder holding report.md.j2 (default: report/)")
    args = parser.parse_args(argv)
    collected = json.loads(args.results.read_text())
    config = json.loads(args.config.read_text())
    published = load_published(args.published) if args.published else None
    text = render(collected, config, published, args.templates)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
