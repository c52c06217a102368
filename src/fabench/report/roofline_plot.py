"""The roofline: each backend's cells as achieved TFLOP/s against arithmetic intensity (FLOPs per byte
the cell must move), under the GPU's limits (its memory bandwidth times the intensity, up to its
dense fp16/bf16 tensor peak), a panel per variant. Every value is fabench.analysis.roofline's; each
point carries its 95% interval, an unstable cell hollow and without it (fabench.report.plot_common).
A run without limits (a CPU run, a GPU without a known peak) gets a figure that says why, and the
report does not show it (fabench.report.sections.limits leaves its section out).
"""

from __future__ import annotations

from fabench.analysis import roofline
from fabench.analysis.result_types import backend_dicts
from fabench.report.plot_common import (
    backend_label, backend_order, colors_for, device_of, draw_unstable, legend_outside, message_figure, plt,
    png_bytes, unstable_proxy, variants_of)

NUDGE = 0.05  # log2 units between neighbouring backends' points at one intensity (3.5% apart)


def roofline_png(collected: dict) -> bytes:
    return png_bytes(roofline_figure(collected))


def has_roofline(collected: dict) -> bool:
    """Whether the run has limits to draw: every result on one GPU model with a known peak."""
    return roofline.run_peak(collected["results"])[0] is not None


def roofline_figure(collected: dict):
    results = collected["results"]
    peak, why = roofline.run_peak(results)
    if peak is None:
        return message_figure(f"No roofline for this run: {why}.")
    variants = variants_of(results)
    names = backend_order(results)
    colors = colors_for(results, names)
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants) + 2.4, 4.6), sharey=True,
                             squeeze=False, layout="constrained")
    handles, marks = {}, set()
    intensities = [x for x in (roofline.intensity(r) for r in results) if x]
    for ax, variant in zip(axes[0], variants):
        draw_limits(ax, peak, min(intensities) / 2, max(intensities) * 2)
        for i, name in enumerate(names):
            # Every backend's cell of one shape has the same intensity: each backend's points are
            # moved sideways by its own small factor (NUDGE per place) so that none hides another.
            nudge = 2 ** ((i - (len(names) - 1) / 2) * NUDGE)
            drawn = draw_backend(ax, [r for r in results if r["variant"] == variant], name, peak, colors[name], marks,
                                 nudge)
            if drawn is not None:
                handles.setdefault(name, drawn)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(variant, fontsize=10)
    axes[0][0].set_ylabel("achieved TFLOP/s (device time)")
    fig.supxlabel("arithmetic intensity: FLOP per byte of Q, K, V read and O written (backends nudged apart)",
                  fontsize=10)
    for name, handle in handles.items():
        handle.set_label(backend_label(results, name))
    fig.suptitle(f"Roofline: {collected.get('run', '')}, {device_of(results)} ({peak['model']}: {peak['tflops']:g} "
                 f"TFLOP/s dense fp16, {peak['tb_s']:g} TB/s {peak['memory']}); median of trials, bars = 95% CI",
                 fontsize=10)
    legend_outside(fig, [handles[n] for n in names if n in handles] + ([unstable_proxy()] if marks else []))
    return fig


def draw_limits(ax, peak: dict, low: float, high: float) -> None:
    """The bandwidth slope up to the ridge, then the tensor peak."""
    ridge = peak["tflops"] / peak["tb_s"]
    xs = [low, ridge, high] if low < ridge < high else [low, high]
    ax.plot(xs, [min(peak["tflops"], peak["tb_s"] * x) for x in xs], color="black", linewidth=1.4)
    ax.axhline(peak["tflops"], color="black", linewidth=0.6, linestyle=":")
    ax.text(high, peak["tflops"], f"{peak['tflops']:g} TFLOP/s peak", ha="right", va="bottom", fontsize=8)


def draw_backend(ax, results: list[dict], name: str, peak: dict, color: str, marks: set, nudge: float = 1.0):
    """One backend's cells of one variant; its handle, None when none ran cleanly with a device time."""
    points = []
    for result in results:
        entry = backend_dicts(result).get(name)
        limits = roofline.cell_limits(result, entry, peak) if entry else None
        if limits is not None:
            points.append(limits)
    if not points:
        return None
    drawn = None
    for p in points:
        if p["unstable"]:
            draw_unstable(ax, p["intensity"] * nudge, p["tflops"], color)
            marks.add("unstable")
            continue
        low, high = p["tflops_ci95"]
        drawn = ax.errorbar([p["intensity"] * nudge], [p["tflops"]], yerr=[[p["tflops"] - low], [high - p["tflops"]]],
                            marker="o", markersize=5, capsize=3, linestyle="none", color=color)
    return drawn or ax.plot([], [], marker="o", linestyle="none", color=color)[0]
