"""What every figure of fabench.report.plots shares: reading a backend's recorded statistics,
the shape families, colours and labels, and the drawing helpers (a log millisecond axis, error
bars, the one legend, the note under the panels, the mark of an unstable cell).

An unstable cell (stats.stable False) has no interval worth drawing: its trials disagree beyond
what the interval assumes. Every figure draws it without an interval bar, as a hollow marker (or
a hollow bar), and names the mark in its legend (UNSTABLE_LABEL).
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from fabench.analysis.result_types import backend_dicts, cell_stats, provenance_of  # noqa: E402

ROLES = ("baseline", "vendor", "triton")
ROLE_COLORS = {"baseline": "#555555", "vendor": "#d62728", "triton": "#1f77b4"}
OTHER_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
METRIC_WORDS = {"device_ms": "device time", "wall_mean_ms": "wall-clock time"}
DPI = 120
GREY = "#555555"
UNSTABLE_LABEL = "unstable: no interval drawn"


# ---------------------------------------------------------------- reading results

def timing(backend: dict | None) -> tuple[float | None, tuple[float, float] | None, str | None]:
    """(median, 95% CI or None, metric) of an ok backend; (None, None, None) otherwise."""
    if not backend or backend.get("status") != "ok":
        return None, None, None
    stats = cell_stats(backend)
    for metric in ("device_ms", "wall_mean_ms"):
        stat = stats.metric(metric) if stats else None
        if stat and stat.median is not None:
            ci = stat.get("ci95")
            return stat.median, (tuple(ci) if ci else None), metric
    if isinstance(backend.get("device_ms"), dict) and backend["device_ms"].get("median") is not None:
        return backend["device_ms"]["median"], None, "device_ms"
    if backend.get("wall_mean_ms") is not None:
        return backend["wall_mean_ms"], None, "wall_mean_ms"
    return None, None, None



def unstable(backend: dict | None) -> bool:
    """Whether an ok backend entry's trials are unstable (its interval is not drawn)."""
    return bool(backend) and backend.get("status") == "ok" and getattr(cell_stats(backend), "stable", None) is False


def unstable_proxy(color: str = GREY) -> Line2D:
    """The legend's entry for the hollow marker of an unstable cell."""
    return Line2D([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="white",
                  markeredgecolor=color, markeredgewidth=1.5, label=UNSTABLE_LABEL)


def draw_unstable(ax, x: float, y: float, color: str) -> None:
    """An unstable cell's hollow marker over its line's point."""
    ax.plot([x], [y], linestyle="none", marker="o", markersize=7, markerfacecolor="white", markeredgecolor=color,
            markeredgewidth=1.5, zorder=3)


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
    names += [name for r in results for name in backend_dicts(r)]
    return list(dict.fromkeys(names))


def backend_label(results: list[dict], name: str) -> str:
    return next((backend_dicts(r)[name]["label"] for r in results if name in backend_dicts(r)), name)


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


def device_of(results: list[dict]) -> str:
    devices = list(dict.fromkeys(provenance_of(r).get("device") or r["platform"] for r in results))
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
