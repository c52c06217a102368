"""Latency against sequence length, one line per backend: a panel per variant and shape family
(batch, heads, head_dim); each point the median with its 95% CI, an unstable cell hollow and
without its interval (fabench.report.plot_common)."""

from __future__ import annotations

import math

from fabench.analysis.result_types import backend_dicts
from fabench.report.plot_common import (
    backend_label, backend_order, colors_for, device_of, draw_unstable, error_bars, families_of, family,
    family_words, legend_outside, log_ms_axis, metric_words, note_below, plt, png_bytes, timing, unstable,
    unstable_proxy, variants_of)


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
    metrics, missing, handles, marks = set(), [], {}, set()
    for row, group in zip(axes, groups):
        for ax, variant in zip(row, variants):
            cells = sorted((r for r in results if r["variant"] == variant and family(r["shape"]) == group),
                           key=lambda r: r["shape"]["seq"])
            for name in names:
                drawn = draw_latency_line(ax, cells, name, backend_label(results, name), colors[name],
                                          (metrics, missing, marks))
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
    legend_outside(fig, [handles[name] for name in names if name in handles]
                   + ([unstable_proxy()] if "unstable" in marks else []))
    note_below(fig, "Failed, not drawn: ", missing)
    return fig


def draw_latency_line(ax, cells: list[dict], name: str, label: str, color: str, found: tuple[set, list, set]):
    """One backend's line in one panel (a gap where it did not run); its handle, None if it never ran.
    `found` gathers the metrics drawn, the failures (for the note) and the marks used (for the legend)."""
    metrics, missing, marks = found
    points = [(r["shape"]["seq"], *timing(backend_dicts(r).get(name)), backend_dicts(r).get(name)) for r in cells]
    if not any(p[1] is not None for p in points):
        return None
    for seq, median, _, _, backend in points:
        if median is None and backend is not None and backend.get("status") == "failed":
            missing.append(f"{label} at seq {seq} in {cells[0]['variant']}, head_dim {cells[0]['shape']['head_dim']} "
                           f"({backend.get('failure_kind') or 'failed'})")
    medians = [p[1] if p[1] is not None else math.nan for p in points]  # NaN: no line bridges the gap
    metrics.update(p[3] for p in points if p[3])
    # An unstable cell's interval is not drawn: its trials disagree beyond what the interval assumes.
    cis = [None if unstable(p[4]) else p[2] for p in points]
    drawn = ax.errorbar([p[0] for p in points], medians, yerr=error_bars(medians, cis),
                        marker="o", markersize=4, capsize=3, linewidth=1.6, color=color, label=label)
    for seq, median, *_, backend in points:
        if unstable(backend):
            draw_unstable(ax, seq, median, color)
            marks.add("unstable")
    return drawn
