"""Pictures of a run and of the archive, as PNG bytes (matplotlib, Agg: no display needed).

    latency_png(collected)      latency vs sequence length, one line per backend: a panel per variant
                                and shape family (batch, heads, head_dim)
    speedup_png(collected)      speedup over the baseline backend of the vendor and Triton backends,
                                every variant side by side, a panel per shape family
    versions_png(comparison, variant)
                                each backend across archived versions, median with its 95% CI, a
                                panel per shape

Each reads the recorded statistics (stats.device_ms, else stats.wall_mean_ms; a v1 result's
device_ms.median or wall_mean_ms without error bars) and computes none of its own. Every shape,
variant and backend that ran is drawn; a legend names only what was drawn; the layout is
matplotlib's constrained layout, so that no two labels overlap.

    python -m fabench.report.plots --results results/<run>/results.json --out-dir results/<run>/plots
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import textwrap
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from fabench.analysis import claims  # noqa: E402
from fabench.analysis.policy import DEFAULT_RULE, Rule, same_code  # noqa: E402
from fabench.files import JsonReadError, OutputPathError, output_folder, output_folder_arg, read_json, write_atomic  # noqa: E402

ROLES = ("baseline", "vendor", "triton")
ROLE_COLORS = {"baseline": "#555555", "vendor": "#d62728", "triton": "#1f77b4"}
OTHER_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
METRIC_WORDS = {"device_ms": "device time", "wall_mean_ms": "wall-clock time"}
DPI = 120


# ---------------------------------------------------------------- reading results

def timing(backend: dict | None) -> tuple[float | None, tuple[float, float] | None, str | None]:
    """(median, 95% CI or None, metric) of an ok backend; (None, None, None) otherwise."""
    if not backend or backend.get("status") != "ok":
        return None, None, None
    stats = backend.get("stats") or {}
    for metric in ("device_ms", "wall_mean_ms"):
        stat = stats.get(metric)
        if stat and stat.get("median") is not None:
            ci = stat.get("ci95")
            return stat["median"], (tuple(ci) if ci else None), metric
    if isinstance(backend.get("device_ms"), dict) and backend["device_ms"].get("median") is not None:
        return backend["device_ms"]["median"], None, "device_ms"
    if backend.get("wall_mean_ms") is not None:
        return backend["wall_mean_ms"], None, "wall_mean_ms"
    return None, None, None


def family(shape: dict) -> tuple[int, int, int]:
    """The shapes drawn against sequence length together: same batch, heads and head_dim."""
    return shape["head_dim"], shape["batch"], shape["heads"]


def families_of(shapes) -> list[tuple[int, int, int]]:
    return sorted({family(shape) for shape in shapes})


def family_words(key: tuple[int, int, int]) -> str:
    head_dim, batch, heads = key
    return f"head_dim {head_dim} (batch {batch}, heads {heads})"


def variants_of(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in results))


def backend_order(results: list[dict]) -> list[str]:
    """The roles' backends (baseline, vendor, Triton) first, then the others that ran."""
    names = []
    for role in ROLES:
        names += [r["roles"][role] for r in results]
    names += [name for r in results for name in r["backends"]]
    return list(dict.fromkeys(names))


def backend_label(results: list[dict], name: str) -> str:
    return next((r["backends"][name]["label"] for r in results if name in r["backends"]), name)


def colors_for(results: list[dict], names: Sequence[str]) -> dict[str, str]:
    role_of = {r["roles"][role]: role for r in results for role in ROLES}
    others = iter(OTHER_COLORS * 4)
    return {name: ROLE_COLORS[role_of[name]] if name in role_of else next(others) for name in names}


def metric_words(metrics: set[str]) -> str:
    if not metrics:
        return "time"
    if len(metrics) == 1:
        return METRIC_WORDS[next(iter(metrics))]
    return "device time (wall-clock where no device timer)"


# ---------------------------------------------------------------- drawing helpers

def png_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def log_ms_axis(ax) -> None:
    """Log scale labelled in plain milliseconds (0.2, 0.5, 1, 2, ...), also within less than a decade."""
    ax.set_yscale("log")

    def minor(value, _pos):
        low, high = ax.get_ylim()
        decades = math.log10(high / low) if low > 0 and high > low else 2
        lead = round(value / 10 ** math.floor(math.log10(value) + 1e-9)) if value > 0 else 0
        return f"{value:g}" if decades < 0.8 or (decades < 1.6 and lead in (2, 3, 5)) else ""

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.12)


def error_bars(medians: list[float], cis: list[tuple[float, float] | None]):
    if not any(cis):
        return None
    lower = [m - ci[0] if ci and not math.isnan(m) else 0 for m, ci in zip(medians, cis)]
    upper = [ci[1] - m if ci and not math.isnan(m) else 0 for m, ci in zip(medians, cis)]
    return [lower, upper]


def message_figure(message: str):
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11)
    return fig


# ---------------------------------------------------------------- latency vs sequence length

def latency_png(collected: dict) -> bytes:
    return png_bytes(latency_figure(collected))


def latency_figure(collected: dict):
    """A panel per (shape family, variant): each backend's median against sequence length."""
    results = collected["results"]
    variants, groups = variants_of(results), families_of(r["shape"] for r in results)
    names = backend_order(results)
    colors = colors_for(results, names)
    fig, axes = plt.subplots(len(groups), len(variants), figsize=(4.4 * len(variants) + 2.4, 3.4 * len(groups) + 1.2),
                             sharey="row", squeeze=False, layout="constrained")
    metrics, missing, handles = set(), [], {}
    for row, group in zip(axes, groups):
        for ax, variant in zip(row, variants):
            cells = sorted((r for r in results if r["variant"] == variant and family(r["shape"]) == group),
                           key=lambda r: r["shape"]["seq"])
            for name in names:
                drawn = draw_latency_line(ax, cells, name, backend_label(results, name), colors[name], metrics, missing)
                if drawn is not None:
                    handles.setdefault(name, drawn)
            seqs = sorted({r["shape"]["seq"] for r in cells})
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqs, [str(s) for s in seqs])
            ax.minorticks_off()
            log_ms_axis(ax)
            ax.set_title(f"{variant}: {family_words(group)}", fontsize=10)
        row[0].set_ylabel("ms (log scale)")
    for ax in axes[-1]:
        ax.set_xlabel("sequence length (tokens)")
    fig.suptitle(f"Latency vs sequence length: {collected.get('run', '')}, {device_of(results)}; "
                 f"{metric_words(metrics)}, median of trials, bars = 95% CI", fontsize=11)
    legend_outside(fig, [handles[name] for name in names if name in handles])
    note_below(fig, "Failed, not drawn: ", missing)
    return fig


def draw_latency_line(ax, cells: list[dict], name: str, label: str, color: str, metrics: set, missing: list):
    """One backend's line in one panel (a gap where it did not run); its handle, None if it never ran."""
    points = [(r["shape"]["seq"], *timing(r["backends"].get(name)), r["backends"].get(name)) for r in cells]
    if not any(p[1] is not None for p in points):
        return None
    for seq, median, _, _, backend in points:
        if median is None and backend is not None and backend.get("status") == "failed":
            missing.append(f"{label} at seq {seq} in {cells[0]['variant']}, head_dim {cells[0]['shape']['head_dim']} "
                           f"({backend.get('failure_kind') or 'failed'})")
    medians = [p[1] if p[1] is not None else math.nan for p in points]  # NaN: no line bridges the gap
    metrics.update(p[3] for p in points if p[3])
    drawn = ax.errorbar([p[0] for p in points], medians, yerr=error_bars(medians, [p[2] for p in points]),
                        marker="o", markersize=4, capsize=3, linewidth=1.6, color=color, label=label)
    return drawn


def device_of(results: list[dict]) -> str:
    devices = list(dict.fromkeys(r["provenance"].get("device") or r["platform"] for r in results))
    return ", ".join(devices)


def legend_outside(fig, handles: list) -> None:
    """The figure's one legend, right of the panels (constrained layout keeps it clear of them)."""
    if handles:
        fig.legend(handles=handles, loc="outside right center", frameon=False, fontsize=9)


def note_below(fig, lead: str, items: list[str]) -> None:
    """A note under the panels, wrapped to the figure's width (drawn outside the panels' area)."""
    if not items:
        return
    width = max(40, int(fig.get_figwidth() * 13))
    text = textwrap.fill(lead + "; ".join(items), width)
    fig.text(0.01, -0.01, text, fontsize=8, ha="left", va="top", color="#b00000")


# ---------------------------------------------------------------- speedup over the baseline, every variant

SPEEDUP_ROLES = ("vendor", "triton")
VARIANT_HATCHES = ("//", "", "..", "xx", "\\\\", "++", "oo", "--")


# A bar's mark after its value: the comparison policy's claim on the backend against the baseline.
SPEEDUP_MARKS = {"cannot tell": "~", "same": "=", "below margin": "="}
EVERY_VARIANT = "every variant"


def speedup_png(collected: dict, rule: Rule = DEFAULT_RULE) -> bytes:
    return png_bytes(speedup_figure(collected, rule))


def speedup_figure(collected: dict, rule: Rule = DEFAULT_RULE):
    """Speedup over the baseline backend (baseline median / backend median) of the vendor and Triton
    backends in every variant, at each sequence length: a panel per shape family. A backend that ran
    the same code in every variant (it reads no variant config) gets one bar, not one per variant:
    the variants cannot differ for it. Each value carries the comparison policy's mark when the
    policy cannot tell it from the baseline (~) or finds them the same within its margin (=)."""
    results = collected["results"]
    variants, groups = variants_of(results), families_of(r["shape"] for r in results)
    baseline = backend_label(results, results[0]["roles"]["baseline"])
    panels = [(group, speedup_series(results, variants, group, rule)) for group in groups]
    if not any(values for _, series in panels for *_, values in series):
        return message_figure("No speedup to draw: the baseline or the compared backends did not run.")
    bars = max(len(series) for _, series in panels) * max(len({r["shape"]["seq"] for r in results}), 1)
    fig, axes = plt.subplots(len(groups), 1, figsize=(max(7.5, 0.34 * bars + 3.5), 3.8 * len(groups) + 0.8),
                             squeeze=False, layout="constrained")
    handles = {}
    for ax, (group, series) in zip(axes[:, 0], panels):
        draw_speedup_panel(ax, results, group, series, handles)
        ax.set_title(family_words(group), fontsize=10)
        ax.set_ylabel(f"speedup over {baseline} (x)")
    axes[-1, 0].set_xlabel("sequence length (tokens)")
    fig.suptitle(f"Speedup over {baseline} (higher is faster), every variant: {collected.get('run', '')}, "
                 f"{device_of(results)}", fontsize=11)
    legend_outside(fig, list(handles.values()))
    drawn = {key for key in handles if key != "baseline"}
    never = [f"{backend_label(results, results[0]['roles'][role])}, {variant}" for role in SPEEDUP_ROLES
             for variant in variants if (role, variant) not in drawn and (role, EVERY_VARIANT) not in drawn]
    marks = sorted({mark for _, series in panels for *_, values in series for _, mark in values if mark})
    notes = (["Did not run in any shape: " + ", ".join(never)] if never else []) + [
        {"~": "~ after a value: the comparison policy cannot tell it from the baseline (no claim)",
         "=": "= after a value: the policy finds it the same as the baseline within its margin"}[m] for m in marks]
    note_below(fig, "", notes)
    return fig


def speedup_series(results: list[dict], variants: list[str], group: tuple,
                   rule: Rule = DEFAULT_RULE) -> list[tuple[str, str, list]]:
    """(role, variant, (speedup, mark) per sequence length) of every role and variant that ran in
    the group; variant EVERY_VARIANT for a role whose cells ran the same code in every variant."""
    cells = {(r["variant"], r["shape"]["seq"]): r for r in results if family(r["shape"]) == group}
    seqs = sorted({seq for _, seq in cells})
    series = []
    for role in SPEEDUP_ROLES:
        shown = [EVERY_VARIANT] if one_code(cells, variants, seqs, role) else variants
        for variant in shown:
            source = variants[-1] if variant == EVERY_VARIANT else variant
            values = [speedup(cells.get((source, seq)), role, rule) for seq in seqs]
            if any(value is not None for value, _ in values):
                series.append((role, variant, values))
    return series


def one_code(cells: dict, variants: list[str], seqs: list[int], role: str) -> bool:
    """Whether the role's backend ran the same code in every variant at every sequence length
    (the policy's code identity), so that the variants cannot differ for it."""
    if len(variants) < 2:
        return False
    for seq in seqs:
        entries = [role_entry(cells.get((variant, seq)), role) for variant in variants]
        if any(e is None or e["status"] != "ok" for e in entries) or not all(same_code(entries[0], e) for e in entries[1:]):
            return False
    return True


def role_entry(result: dict | None, role: str) -> dict | None:
    return None if result is None else result["backends"].get(result["roles"][role])


def speedup(result: dict | None, role: str, rule: Rule = DEFAULT_RULE) -> tuple[float | None, str | None]:
    """(baseline median / the role's median, the policy's mark on the two), (None, None) without both."""
    if result is None:
        return None, None
    base_entry, entry = role_entry(result, "baseline"), role_entry(result, role)
    base, mine = timing(base_entry)[0], timing(entry)[0]
    if not base or not mine:
        return None, None
    claim = claims.compare(base_entry, entry, names=("baseline", role), rule=rule)
    return base / mine, SPEEDUP_MARKS.get(claim["claim"])


def draw_speedup_panel(ax, results: list[dict], group: tuple, series: list, handles: dict) -> None:
    """Bars grouped by sequence length, each labelled with its value (and mark) upright above it."""
    seqs = sorted({r["shape"]["seq"] for r in results if family(r["shape"]) == group})
    variants = variants_of(results) + [EVERY_VARIANT]
    width = 0.84 / max(len(series), 1)
    for i, (role, variant, values) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(seqs))]
        hatch = VARIANT_HATCHES[variants.index(variant) % len(VARIANT_HATCHES)]
        shade = 1.0 if variant == EVERY_VARIANT else (variants.index(variant) + 1) / (len(variants) - 1)
        label = f"{backend_label(results, results[0]['roles'][role])}, " + (
            "every variant (same code)" if variant == EVERY_VARIANT else variant)
        bars = ax.bar(xs, [v or 0 for v, _ in values], width * 0.92, color=ROLE_COLORS[role], hatch=hatch,
                      alpha=0.5 + 0.45 * shade, edgecolor="white", label=label)
        handles.setdefault((role, variant), bars)
        for bar, (value, mark) in zip(bars, values):
            text = "did not run" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"
            text += f" {mark}" if mark and value is not None else ""
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        rotation=90, fontsize=7, xytext=(0, 2), textcoords="offset points")
    line = ax.axhline(1.0, color=ROLE_COLORS["baseline"], linewidth=1, linestyle="--",
                      label=f"{backend_label(results, results[0]['roles']['baseline'])} = 1x")
    handles.setdefault("baseline", line)
    ax.set_xticks(range(len(seqs)), [str(s) for s in seqs])
    ax.grid(True, axis="y", alpha=0.3)
    top = max((v for *_, values in series for v, _ in values if v is not None), default=1.0)
    ax.set_ylim(0, max(top, 1.0) * 1.45)  # room for the upright value labels above the tallest bar


# ---------------------------------------------------------------- across archived versions

def versions_png(comparison: dict, variant: str) -> bytes:
    return png_bytes(versions_figure(comparison, variant))


def versions_figure(comparison: dict, variant: str):
    """For one variant, a panel per shape (every head_dim): each backend's median with its 95% CI
    in every archived entry (x axis, oldest first); flagged regressions ringed in red."""
    entries = [e["id"] for e in comparison["entries"]]
    rows = [r for r in comparison["rows"] if r["variant"] == variant]
    if not rows or not entries:
        return message_figure(f"No archived results for variant {variant}.")
    shapes = {r["shape_id"]: r["shape"] for r in rows}
    shape_ids = sorted(shapes, key=lambda s: (family(shapes[s]), shapes[s]["seq"]))
    panel_width, columns, upright = versions_layout(len(shape_ids), len(entries))
    lines = (len(shape_ids) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(panel_width * columns + LEGEND_WIDTH_IN, 3.4 * lines + 1.0),
                             squeeze=False, layout="constrained")
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    palette = dict(zip(backends, list(ROLE_COLORS.values()) + list(OTHER_COLORS) * 4))
    flagged = {(f["shape_id"], f["backend"], f["entry"]) for f in comparison["flags"]
               if f["flag"] == "regression" and f["variant"] == variant}
    metrics, marks, drawn = set(), set(), {}
    for ax, sid in zip(axes.flat, shape_ids):
        for r in (r for r in rows if r["shape_id"] == sid):
            offset = cross_offset(backends.index(r["backend"]), len(backends))
            style = {"color": palette[r["backend"]], "offset": offset}
            if draw_version_line(ax, r, entries, style, flagged, metrics, marks):
                drawn.setdefault(r["backend"], r["label"])
        shape = shapes[sid]
        ax.set_title(f"seq {shape['seq']}, head_dim {shape['head_dim']} (batch {shape['batch']}, "
                     f"heads {shape['heads']})", fontsize=9)
        ax.set_xticks(range(len(entries)), [entry_tick(e) for e in entries], fontsize=8,
                      rotation=90 if upright else 0)
        ax.set_xlim(-0.5, len(entries) - 0.5)
        log_ms_axis(ax)
        ax.set_ylabel("ms (log scale)")
    for ax in list(axes.flat)[len(shape_ids):]:
        ax.axis("off")
    title = (f"Variant {variant} across archived versions: {metric_words(metrics)}, median with 95% CI "
             f"(oldest left)")
    fig.suptitle(textwrap.fill(title, max(40, int(fig.get_figwidth() * 11))), fontsize=11)
    handles = [Line2D([], [], color=palette[b], marker="o", markersize=4, linewidth=1.4, label=label)
               for b, label in drawn.items()]
    handles += [MARK_PROXIES[m]() for m in ("regression", "unstable", "missing") if m in marks]
    legend_outside(fig, handles)
    return fig


# The versions figure fits a report page: at most this wide (pixels at DPI), the legend's column included;
# more entries than fit side by side turn their labels upright, more shapes wrap onto further lines of panels.
MAX_WIDTH_PX = 1600
LEGEND_WIDTH_IN = 2.4
MARGIN_IN = 0.5  # the y axis's label and tick labels
ENTRY_WIDTH_IN = 1.1  # an upright entry label ("cpu-torch2.13.0+cpu" at 8 pt) needs about this much


def versions_layout(shapes: int, entries: int) -> tuple[float, int, bool]:
    """Panel width (inches), panels per line, and whether the entry labels must stand upright to fit."""
    usable = MAX_WIDTH_PX / DPI - LEGEND_WIDTH_IN - MARGIN_IN
    wanted = max(4.6, ENTRY_WIDTH_IN * entries + 2.6)
    columns = max(1, min(shapes, 2 if shapes == 4 else 3, int(usable // wanted)))
    panel_width = min(wanted, usable / columns)
    return panel_width, columns, ENTRY_WIDTH_IN * entries + 1.0 > panel_width


def cross_offset(index: int, backends: int) -> float:
    """Where backend `index` puts its "did not run" cross, left or right of its entry's tick, so that
    several backends failing in one entry each show a cross of their own."""
    step = min(0.12, 0.7 / max(backends, 1))
    return (index - (backends - 1) / 2) * step


def draw_version_line(ax, row: dict, entries: list[str], style: dict, flagged: set, metrics: set, marks: set) -> bool:
    """One backend of one shape across the entries, in style's colour, its crosses shifted by
    style's offset; True when it ran in at least one entry."""
    color = style["color"]
    medians, cis = [], []
    ran = any(c.get("status") == "ok" for c in row["cells"])
    for i, cell in enumerate(row["cells"]):
        median, ci, metric = timing(cell_backend(cell))
        metrics.update([metric] if metric else [])
        medians.append(math.nan if median is None else median)
        cis.append(ci)
        if cell.get("status") in ("failed", "unavailable") and ran:
            # did not run here but did elsewhere: an x on the axis, in the backend's colour
            ax.plot([i + style["offset"]], [0.04], marker="x", markersize=9, markeredgewidth=2, color=color,
                    transform=blended_transform_factory(ax.transData, ax.transAxes), clip_on=False)
            marks.add("missing")
    if not ran:
        return False
    ax.errorbar(range(len(entries)), medians, yerr=error_bars(medians, cis), marker="o", markersize=4, capsize=4,
                linewidth=1.4, color=color, label=row["label"])
    for xi, (m, cell) in enumerate(zip(medians, row["cells"])):
        if cell.get("status") == "ok" and cell.get("stable") is False:
            ax.plot([xi], [m], marker="o", markersize=7, markerfacecolor="white", markeredgecolor=color,
                    markeredgewidth=1.5)
            marks.add("unstable")
        if (row["shape_id"], row["backend"], entries[xi]) in flagged and not math.isnan(m):
            ax.plot([xi], [m], marker="o", markersize=11, markerfacecolor="none", markeredgecolor="red",
                    markeredgewidth=1.8)
            marks.add("regression")
    return True


GREY = "#555555"
MARK_PROXIES = {
    "regression": lambda: Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                                 markeredgecolor="red", markeredgewidth=1.8, label="flagged regression"),
    "unstable": lambda: Line2D([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="white",
                               markeredgecolor=GREY, markeredgewidth=1.5, label="unstable trials (not flagged)"),
    "missing": lambda: Line2D([], [], linestyle="none", marker="x", markersize=9, markeredgewidth=2, color=GREY,
                              label="failed or unavailable"),
}


def entry_tick(entry_id: str) -> str:
    label, _, run_id = entry_id.partition("/")
    return f"{label}\n#{run_id.split('-')[0]}"


def cell_backend(cell: dict) -> dict | None:
    """A comparison cell as a backend entry for timing()."""
    if cell.get("status") != "ok":
        return None
    return {"status": "ok", "stats": {"device_ms": cell.get("device_ms"), "wall_mean_ms": cell.get("wall_mean_ms")}}


# ---------------------------------------------------------------- files

RUN_PLOTS = {"latency.png": latency_png, "speedup.png": speedup_png}


def write_run_plots(collected: dict, out_dir: Path) -> list[Path]:
    paths, out_dir = [], output_folder(out_dir)
    for name, draw in RUN_PLOTS.items():
        path = out_dir / name
        write_atomic(path, draw(collected))
        paths.append(path)
    return paths


def version_plot_name(variant: str) -> str:
    return f"versions-{variant}.png"


def write_version_plots(comparison: dict, out_dir: Path, variants: Sequence[str] | None = None) -> list[Path]:
    variants = variants or list(dict.fromkeys(r["variant"] for r in comparison["rows"]))
    paths, out_dir = [], output_folder(out_dir)
    for variant in variants:
        path = out_dir / version_plot_name(variant)
        write_atomic(path, versions_png(comparison, variant))
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.report.plots", description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, type=Path, help="results/<run>/results.json")
    parser.add_argument("--out-dir", required=True, type=output_folder_arg, help="folder for latency.png and speedup.png")
    args = parser.parse_args(argv)
    try:
        paths = write_run_plots(read_json(args.results), args.out_dir)
    except (OutputPathError, JsonReadError) as err:  # one line naming the path
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    except OSError as err:
        parser.exit(2, f"{parser.prog}: error: {err.filename}: {err.strerror}\n")
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
