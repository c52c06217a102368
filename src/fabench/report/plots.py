"""Pictures of a run and of the archive, as PNG bytes (matplotlib, Agg: no display needed).

    latency_png(collected)      latency vs sequence length, one line per backend, a panel per variant
    speedup_png(collected)      speedup over the baseline backend, first variant vs last (before/after tuning)
    versions_png(comparison, variant)
                                each backend across archived versions, median with its 95% CI

Each reads the recorded statistics (stats.device_ms, else stats.wall_mean_ms; a v1 result's
device_ms.median or wall_mean_ms without error bars) and computes none of its own. Only shapes at
the main head_dim (the one most shapes share) are drawn against sequence length.

    python -m fabench.report.plots --results results/<run>/results.json --out-dir results/<run>/plots
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from fabench.files import write_atomic  # noqa: E402

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


def main_head_dim(results: list[dict]) -> int:
    shapes = {r["shape_id"]: r["shape"] for r in results}
    return Counter(s["head_dim"] for s in shapes.values()).most_common(1)[0][0]


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


def empty_figure(message: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11)
    return png_bytes(fig)


# ---------------------------------------------------------------- latency vs sequence length

def latency_png(collected: dict, head_dim: int | None = None) -> bytes:
    results = collected["results"]
    head_dim = head_dim or main_head_dim(results)
    variants = variants_of(results)
    names = backend_order(results)
    colors = colors_for(results, names)
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants) + 1.6, 4.6), sharey=True, squeeze=False)
    metrics, missing = set(), []
    for ax, variant in zip(axes[0], variants):
        rows = sorted((r for r in results if r["variant"] == variant and r["shape"]["head_dim"] == head_dim),
                      key=lambda r: r["shape"]["seq"])
        for name in names:
            points = [(r["shape"]["seq"], *timing(r["backends"].get(name)), r["backends"].get(name)) for r in rows]
            if not any(p[1] is not None for p in points):
                continue
            for seq, median, _, _, backend in points:
                if median is None and backend is not None and backend.get("status") == "failed":
                    missing.append(f"{backend_label(results, name)} at seq {seq} in {variant} "
                                   f"({backend.get('failure_kind') or 'failed'})")
            # a gap (NaN) where a backend did not run, so no line bridges it
            seqs = [p[0] for p in points]
            medians = [p[1] if p[1] is not None else math.nan for p in points]
            cis = [p[2] for p in points]
            metrics.update(p[3] for p in points if p[3])
            ax.errorbar(seqs, medians, yerr=error_bars(medians, cis), marker="o", markersize=4,
                        capsize=3, linewidth=1.6, color=colors[name], label=backend_label(results, name))
        ax.set_xscale("log", base=2)
        seqs = sorted({r["shape"]["seq"] for r in rows})
        ax.set_xticks(seqs, [str(s) for s in seqs])
        ax.minorticks_off()
        log_ms_axis(ax)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(f"{variant}", fontsize=11)
    axes[0][0].set_ylabel(f"{metric_words(metrics)}, ms (log scale)")
    shape = next((r["shape"] for r in results if r["shape"]["head_dim"] == head_dim), {})
    fig.suptitle(f"Latency vs sequence length: {collected.get('run', '')}, {device_of(results)}\n"
                 f"batch {shape.get('batch')}, heads {shape.get('heads')}, head_dim {head_dim}; "
                 f"median of trials, bars = 95% CI", fontsize=11)
    legend_right(fig, axes[0][-1])
    if missing:
        fig.text(0.01, -0.02, "Failed, not drawn: " + "; ".join(missing), fontsize=9, ha="left", va="top",
                 color="#b00000", wrap=True)
    return png_bytes(fig)


def device_of(results: list[dict]) -> str:
    devices = list(dict.fromkeys(r["provenance"].get("device") or r["platform"] for r in results))
    return ", ".join(devices)


def legend_right(fig, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for other in fig.axes:
        for h, lab in zip(*other.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=10)
    fig.tight_layout()


# ---------------------------------------------------------------- speedup before vs after

def speedup_png(collected: dict, head_dim: int | None = None) -> bytes:
    """Speedup over the baseline backend (baseline median / backend median) of the vendor and Triton
    backends, at each sequence length, in the first variant (before) and the last (after)."""
    results = collected["results"]
    head_dim = head_dim or main_head_dim(results)
    variants = variants_of(results)
    before, after = variants[0], variants[-1]
    first = results[0]
    roles = [role for role in ("vendor", "triton")]
    seqs = sorted({r["shape"]["seq"] for r in results if r["shape"]["head_dim"] == head_dim})
    find = {(r["variant"], r["shape"]["seq"]): r for r in results if r["shape"]["head_dim"] == head_dim}
    series = []
    for role in roles:
        for variant in dict.fromkeys((before, after)):
            values = []
            for seq in seqs:
                r = find.get((variant, seq))
                base = timing(r["backends"].get(r["roles"]["baseline"]))[0] if r else None
                mine = timing(r["backends"].get(r["roles"][role]))[0] if r else None
                values.append(base / mine if base and mine else None)
            name = first["roles"][role]
            series.append((role, variant, f"{backend_label(results, name)}, {variant}", values))
    if not any(v is not None for *_, values in series for v in values):
        return empty_figure("No speedup to draw: the baseline or the compared backends did not run.")
    fig, ax = plt.subplots(figsize=(9.5, 4.6))
    width = 0.8 / len(series)
    for i, (role, variant, label, values) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(seqs))]
        heights = [v or 0 for v in values]
        bars = ax.bar(xs, heights, width * 0.95, label=label, color=ROLE_COLORS[role],
                      alpha=0.45 if variant == before and before != after else 0.95,
                      hatch="//" if variant == before and before != after else None, edgecolor="white")
        for bar, value in zip(bars, values):
            text = "did not run" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.axhline(1.0, color=ROLE_COLORS["baseline"], linewidth=1, linestyle="--",
               label=f"{backend_label(results, first['roles']['baseline'])} = 1x")
    ax.set_xticks(range(len(seqs)), [str(s) for s in seqs])
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel(f"speedup over {backend_label(results, first['roles']['baseline'])} (x, higher is faster)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, max(v or 0 for *_, values in series for v in values) * 1.15)
    ax.set_title(f"Speedup before ({before}) vs after ({after}): {collected.get('run', '')}, {device_of(results)}, "
                 f"head_dim {head_dim}", fontsize=11)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    return png_bytes(fig)


# ---------------------------------------------------------------- across archived versions

def versions_png(comparison: dict, variant: str, max_shapes: int = 6) -> bytes:
    """For one variant, a panel per shape at the main head_dim: each backend's median with its 95% CI
    in every archived entry (x axis, oldest first); flagged regressions ringed in red."""
    entries = [e["id"] for e in comparison["entries"]]
    rows = [r for r in comparison["rows"] if r["variant"] == variant]
    if not rows or not entries:
        return empty_figure(f"No archived results for variant {variant}.")
    shapes = {r["shape_id"]: r["shape"] for r in rows}
    main = Counter(s["head_dim"] for s in shapes.values()).most_common(1)[0][0]
    shape_ids = sorted((s for s in shapes if shapes[s]["head_dim"] == main), key=lambda s: shapes[s]["seq"])
    shape_ids = shape_ids[:max_shapes]
    columns = min(len(shape_ids), 2 if len(shape_ids) == 4 else 3)
    lines = (len(shape_ids) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(max(4.6, 1.1 * len(entries) + 2.6) * columns, 3.6 * lines + 0.8),
                             squeeze=False)
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    palette = dict(zip(backends, list(ROLE_COLORS.values()) + list(OTHER_COLORS)))
    flagged = {(f["shape_id"], f["backend"], f["entry"]) for f in comparison["flags"]
               if f["flag"] == "regression" and f["variant"] == variant}
    metrics, marks = set(), set()
    x = list(range(len(entries)))
    for ax, sid in zip(axes.flat, shape_ids):
        for r in (r for r in rows if r["shape_id"] == sid):
            medians, cis = [], []
            for i, cell in enumerate(r["cells"]):
                median, ci, metric = timing(cell_backend(cell))
                metrics.update([metric] if metric else [])
                medians.append(math.nan if median is None else median)
                cis.append(ci)
                if cell.get("status") in ("failed", "unavailable") and any(c.get("status") == "ok" for c in r["cells"]):
                    # did not run here but did elsewhere: an x on the axis, in the backend's colour
                    ax.plot([i], [0.04], marker="x", markersize=9, markeredgewidth=2, color=palette[r["backend"]],
                            transform=blended_transform_factory(ax.transData, ax.transAxes), clip_on=False)
                    marks.add("missing")
            if all(math.isnan(m) for m in medians):
                continue
            ax.errorbar(x, medians, yerr=error_bars(medians, cis), marker="o", markersize=4, capsize=4,
                        linewidth=1.4, color=palette[r["backend"]], label=r["label"])
            for xi, (m, cell) in enumerate(zip(medians, r["cells"])):
                if cell.get("status") == "ok" and cell.get("stable") is False:
                    ax.plot([xi], [m], marker="o", markersize=7, markerfacecolor="white",
                            markeredgecolor=palette[r["backend"]], markeredgewidth=1.5)
                    marks.add("unstable")
                if (sid, r["backend"], entries[xi]) in flagged and not math.isnan(m):
                    ax.plot([xi], [m], marker="o", markersize=11, markerfacecolor="none", markeredgecolor="red",
                            markeredgewidth=1.8)
                    marks.add("regression")
        shape = shapes[sid]
        ax.set_title(f"seq {shape['seq']} (B={shape['batch']}, H={shape['heads']}, D={shape['head_dim']})",
                     fontsize=10)
        ax.set_xticks(x, [entry_tick(e) for e in entries], fontsize=8)
        ax.set_xlim(-0.5, len(entries) - 0.5)
        log_ms_axis(ax)
        ax.set_ylabel("ms (log scale)")
    for ax in list(axes.flat)[len(shape_ids):]:
        ax.axis("off")
    fig.suptitle(f"Variant {variant} across archived versions: {metric_words(metrics)}, median with 95% CI "
                 f"(oldest left)", fontsize=11)
    handles = [Line2D([], [], color=palette[b], marker="o", markersize=4, linewidth=1.4,
                      label=next(r["label"] for r in rows if r["backend"] == b)) for b in backends]
    grey = "#555555"
    proxies = {
        "regression": Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                             markeredgecolor="red", markeredgewidth=1.8, label="flagged regression"),
        "unstable": Line2D([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="white",
                           markeredgecolor=grey, markeredgewidth=1.5, label="unstable trials (not flagged)"),
        "missing": Line2D([], [], linestyle="none", marker="x", markersize=9, markeredgewidth=2, color=grey,
                          label="failed or unavailable"),
    }
    handles += [proxies[m] for m in ("regression", "unstable", "missing") if m in marks]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


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
    paths = []
    for name, draw in RUN_PLOTS.items():
        path = Path(out_dir) / name
        write_atomic(path, draw(collected))
        paths.append(path)
    return paths


def version_plot_name(variant: str) -> str:
    return f"versions-{variant}.png"


def write_version_plots(comparison: dict, out_dir: Path, variants: Sequence[str] | None = None) -> list[Path]:
    variants = variants or list(dict.fromkeys(r["variant"] for r in comparison["rows"]))
    paths = []
    for variant in variants:
        path = Path(out_dir) / version_plot_name(variant)
        write_atomic(path, versions_png(comparison, variant))
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.report.plots", description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, type=Path, help="results/<run>/results.json")
    parser.add_argument("--out-dir", required=True, type=Path, help="folder for latency.png and speedup.png")
    args = parser.parse_args(argv)
    for path in write_run_plots(json.loads(args.results.read_text()), args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
