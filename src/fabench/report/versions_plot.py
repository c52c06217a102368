"""Each backend across archived versions, for one variant: a panel per shape, each entry's median
with its 95% CI (an unstable cell hollow and without its interval), failures crossed, flagged
regressions ringed red and improvements green, and beside every later point the policy's verdict
against the run before where it is no change: "=" the same, "?" cannot tell (so two points with
separate bars are not read as a change the policy did not call) (fabench.report.plot_common)."""

from __future__ import annotations

import math
import textwrap

from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from fabench.analysis.policy import Code
from fabench.report.plot_common import (
    DPI, GREY, OTHER_COLORS, ROLE_COLORS, draw_unstable, error_bars, family, legend_outside, log_ms_axis,
    message_figure, metric_words, plt, png_bytes, timing, unstable_proxy)


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
               if f["code"] == Code.REGRESSION and f["variant"] == variant}
    metrics, marks, drawn = set(), set(), {}
    for ax, sid in zip(axes.flat, shape_ids):
        for r in (r for r in rows if r["shape_id"] == sid):
            offset = cross_offset(backends.index(r["backend"]), len(backends))
            style = {"color": palette[r["backend"]], "offset": offset}
            if draw_version_line(ax, r, entries, style, flagged, metrics, marks):
                drawn.setdefault(r["backend"], r["label"])
        _shape_axes(ax, shapes[sid], entries, upright)
    for ax in list(axes.flat)[len(shape_ids):]:
        ax.axis("off")
    title = (f"Variant {variant} across archived versions: {metric_words(metrics)}, median with 95% CI "
             f"(oldest left)")
    fig.suptitle(textwrap.fill(title, max(40, int(fig.get_figwidth() * 11))), fontsize=11)
    handles = [Line2D([], [], color=palette[b], marker="o", markersize=4, linewidth=1.4, label=label)
               for b, label in drawn.items()]
    handles += [MARK_PROXIES[m]() for m in ("regression", "improvement", "same", "cannot tell", "unstable",
                                            "missing") if m in marks]
    legend_outside(fig, handles)
    return fig


def _shape_axes(ax, shape: dict, entries: list[str], upright: bool) -> None:
    """A shape's panel: its title, the entries along x (upright where they do not fit), ms on a log scale."""
    ax.set_title(f"seq {shape['seq']}, head_dim {shape['head_dim']} (batch {shape['batch']}, "
                 f"heads {shape['heads']})", fontsize=9)
    ax.set_xticks(range(len(entries)), [entry_tick(e) for e in entries], fontsize=8,
                  rotation=90 if upright else 0)
    ax.set_xlim(-0.5, len(entries) - 0.5)
    log_ms_axis(ax)
    ax.set_ylabel("ms (log scale)")


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
        cis.append(None if cell.get("stable") is False else ci)  # an unstable cell's interval: not drawn
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
            draw_unstable(ax, xi, m, color)
            marks.add("unstable")
        if (row["shape_id"], row["backend"], entries[xi]) in flagged and not math.isnan(m):
            ax.plot([xi], [m], marker="o", markersize=11, markerfacecolor="none", markeredgecolor="red",
                    markeredgewidth=1.8)
            marks.add("regression")
        elif not math.isnan(m):
            draw_verdict(ax, xi, m, cell.get("vs_previous"), color, marks)
    return True


def draw_verdict(ax, x: int, median: float, found: dict | None, color: str, marks: set) -> None:
    """The policy's verdict on a point against the run before it: an improvement ringed green, the
    same or cannot tell as a glyph to the point's right (a regression is ringed by the flags)."""
    if not found:
        return
    code, verdict = str(found.get("code")), found.get("verdict")
    if verdict == "changed" and code == Code.IMPROVEMENT:
        ax.plot([x], [median], marker="o", markersize=11, markerfacecolor="none", markeredgecolor="green",
                markeredgewidth=1.8)
        marks.add("improvement")
    elif verdict in VERDICT_GLYPHS:
        ax.plot([x + 0.09], [median], marker=VERDICT_GLYPHS[verdict], markersize=7, color=color, linestyle="none")
        marks.add(verdict)


# A point's verdict against the run before, where it is no change (fabench.analysis.policy verdicts).
VERDICT_GLYPHS = {"same": "$=$", "cannot tell": "$?$"}


MARK_PROXIES = {
    "regression": lambda: Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                                 markeredgecolor="red", markeredgewidth=1.8, label="flagged regression"),
    "improvement": lambda: Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                                  markeredgecolor="green", markeredgewidth=1.8, label="improvement"),
    "same": lambda: Line2D([], [], linestyle="none", marker=VERDICT_GLYPHS["same"], markersize=7, color=GREY,
                           label="the same as the run before"),
    "cannot tell": lambda: Line2D([], [], linestyle="none", marker=VERDICT_GLYPHS["cannot tell"], markersize=7,
                                  color=GREY, label="cannot tell from the run before"),
    "unstable": unstable_proxy,
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
