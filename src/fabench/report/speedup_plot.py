"""Speedup over the baseline backend of the vendor and Triton backends, every variant side by side
(also for a backend that ran the same code in every variant's jobs: its bars show the run-to-run
noise; one measured once per shape and shown in every variant, fabench.results.shared, gets one bar,
labelled as every variant's), a panel per shape family; each bar carries the comparison policy's mark (the run's Rule, passed
by every caller), and a bar whose cells are unstable is drawn hollow (fabench.report.plot_common)."""

from __future__ import annotations

from matplotlib.patches import Patch

from fabench.analysis import claims
from fabench.analysis.policy import Rule, same_code
from fabench.analysis.result_types import backend_dicts
from fabench.report.plot_common import (
    GREY, ROLE_COLORS, backend_label, device_of, families_of, family, family_words, legend_outside,
    message_figure, note_below, plt, png_bytes, timing, unstable, variants_of)

SPEEDUP_ROLES = ("vendor", "triton")
# No bar has an interval (a speedup is a ratio of two medians): an unstable one is only drawn hollow.
UNSTABLE_BAR = "unstable: hollow bar, no claim"
VARIANT_HATCHES = ("//", "", "..", "xx", "\\\\", "++", "oo", "--")


# A bar's mark after its value: the comparison policy's claim on the backend against the baseline.
SPEEDUP_MARKS = {"cannot tell": "~", "same": "=", "below margin": "="}


def speedup_png(collected: dict, rule: Rule) -> bytes:
    return png_bytes(speedup_figure(collected, rule))


def speedup_figure(collected: dict, rule: Rule):
    """Speedup over the baseline backend (baseline median / backend median) of the vendor and Triton
    backends in every variant, at each sequence length: a panel per shape family. A backend that ran
    the same code in every variant (it reads no variant config) has a bar per variant too, and a note
    says so: their difference is the run's noise, which a reader should see. Each value carries the comparison policy's mark when the
    policy cannot tell it from the baseline (~) or finds them the same within its margin (=), under
    `rule` (the run's, policy.Rule.of). A bar whose cells are unstable is drawn hollow."""
    results = collected["results"]
    variants, groups = variants_of(results), families_of(r["shape"] for r in results)
    baseline = backend_label(results, results[0]["roles"]["baseline"])
    within = claims.WithinRun(results, rule)  # the report's claims: baseline and role of one job, paired
    panels = [(group, speedup_series(results, variants, group, within)) for group in groups]
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
    legend_outside(fig, [handle for key, handle in handles.items() if key != "unstable"]
                   + ([handles["unstable"]] if "unstable" in handles else []))
    notes = _notes(results, variants, groups, panels, handles)
    note_below(fig, "", notes)
    return fig


def _notes(results: list[dict], variants: list[str], groups: list[tuple], panels: list, handles: dict) -> list[str]:
    """The figure's notes: what never ran, what was measured once per shape, what ran the same code
    in every variant, and what each mark means."""
    never, once, alike = _unshown(results, variants, groups, panels, handles)
    marks = sorted({mark for _, series in panels for *_, values in series for _, mark, _ in values if mark})
    notes = ["Did not run in any shape: " + ", ".join(never)] if never else []
    if once:
        notes.append(f"{' and '.join(once)}: measured once per shape, in the jobs of {variants[0]}, with the "
                     "baseline; one bar stands for every variant")
    if alike:
        notes.append(f"{' and '.join(alike)} ran the same code in every variant: "
                     f"{'their' if len(alike) > 1 else 'its'} bars differ by run-to-run noise only")
    return notes + [MARK_NOTES[m] for m in marks]


MARK_NOTES = {"~": "~ after a value: the comparison policy cannot tell it from the baseline (no claim)",
              "=": "= after a value: the policy finds it the same as the baseline within its margin"}


def _unshown(results: list[dict], variants: list[str], groups: list[tuple], panels: list,
             handles: dict) -> tuple[list[str], list[str], list[str]]:
    """(the role and variant series never drawn, the roles measured once per shape and drawn as one
    series, the roles that ran the same code in every variant), each by its label."""
    label = lambda role: backend_label(results, results[0]["roles"][role])  # noqa: E731
    drawn = {key for key in handles if key not in ("baseline", "unstable")}
    shared = {role for _, series in panels for role, variant, _ in series if variant == EVERY_VARIANT}
    never = [f"{label(role)}, {variant}" for role in SPEEDUP_ROLES
             for variant in variants if (role, variant) not in drawn and role not in shared]
    alike = [label(role) for role in SPEEDUP_ROLES if len(variants) > 1 and role not in shared
             and all(one_code(*group_cells(results, group), variants, role) for group in groups)]
    return never, [label(role) for role in SPEEDUP_ROLES if role in shared], alike


# The series name of a role whose cells were measured once per shape and shown in every variant.
EVERY_VARIANT = "every variant (one measurement)"


def speedup_series(results: list[dict], variants: list[str], group: tuple,
                   within: claims.WithinRun) -> list[tuple[str, str, list]]:
    """(role, variant, (speedup, mark, unstable) per sequence length) of every role and variant that ran in
    the group; a role whose every later variant only shows the first's measurement (both its cells and
    the baseline's measured once per shape) is one series, named EVERY_VARIANT."""
    cells, seqs = group_cells(results, group)
    series = []
    for role in SPEEDUP_ROLES:
        once = len(variants) > 1 and all(shown_only(cells.get((variant, seq)), role)
                                         for variant in variants[1:] for seq in seqs)
        for variant in variants[:1] if once else variants:
            values = [speedup(cells.get((variant, seq)), role, within) for seq in seqs]
            if any(value is not None for value, *_ in values):
                series.append((role, EVERY_VARIANT if once else variant, values))
    return series


def shown_only(result: dict | None, role: str) -> bool:
    """Whether a variant's cell of the role, and the baseline's, are copies of another variant's
    measurement (marked `measured_in`), so that their speedup is that variant's again."""
    return result is not None and all((role_entry(result, r) or {}).get("measured_in") for r in ("baseline", role))


def group_cells(results: list[dict], group: tuple) -> tuple[dict, list[int]]:
    """The group's results by (variant, seq), and its sequence lengths."""
    cells = {(r["variant"], r["shape"]["seq"]): r for r in results if family(r["shape"]) == group}
    return cells, sorted({seq for _, seq in cells})


def one_code(cells: dict, seqs: list[int], variants: list[str], role: str) -> bool:
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
    return None if result is None else backend_dicts(result).get(result["roles"][role])


def speedup(result: dict | None, role: str, within: claims.WithinRun) -> tuple[float | None, str | None, bool]:
    """(baseline median / the role's median, the policy's mark on the two, whether either cell is
    unstable), (None, None, False) without both."""
    if result is None:
        return None, None, False
    base_entry, entry = role_entry(result, "baseline"), role_entry(result, role)
    base, mine = timing(base_entry)[0], timing(entry)[0]
    if not base or not mine:
        return None, None, False
    claim = within.claim(base_entry, entry, names=("baseline", role))
    return base / mine, SPEEDUP_MARKS.get(claim["claim"]), unstable(base_entry) or unstable(entry)


def draw_speedup_panel(ax, results: list[dict], group: tuple, series: list, handles: dict) -> None:
    """Bars grouped by sequence length, each labelled with its value (and mark) upright above it."""
    seqs = sorted({r["shape"]["seq"] for r in results if family(r["shape"]) == group})
    variants = variants_of(results)
    width = 0.84 / max(len(series), 1)
    for i, (role, variant, values) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(seqs))]
        place = variants.index(variant) if variant in variants else len(variants) - 1  # EVERY_VARIANT: solid
        hatch = "" if variant == EVERY_VARIANT else VARIANT_HATCHES[place % len(VARIANT_HATCHES)]
        shade = (place + 1) / len(variants)
        label = f"{backend_label(results, results[0]['roles'][role])}, {variant}"
        bars = ax.bar(xs, [v or 0 for v, *_ in values], width * 0.92, color=ROLE_COLORS[role], hatch=hatch,
                      alpha=0.5 + 0.45 * shade, edgecolor="white", label=label)
        handles.setdefault((role, variant), bars)
        for bar, (value, mark, shaky) in zip(bars, values):
            if shaky and value is not None:
                hollow(bar, ROLE_COLORS[role])
                handles.setdefault("unstable", Patch(facecolor="white", edgecolor=GREY, linewidth=1.5,
                                                     label=UNSTABLE_BAR))
            text = "did not run" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"
            text += f" {mark}" if mark and value is not None else ""
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        rotation=90, fontsize=7, xytext=(0, 2), textcoords="offset points")
    line = ax.axhline(1.0, color=ROLE_COLORS["baseline"], linewidth=1, linestyle="--",
                      label=f"{backend_label(results, results[0]['roles']['baseline'])} = 1x")
    handles.setdefault("baseline", line)
    ax.set_xticks(range(len(seqs)), [str(s) for s in seqs])
    ax.grid(True, axis="y", alpha=0.3)
    top = max((v for *_, values in series for v, *_ in values if v is not None), default=1.0)
    ax.set_ylim(0, max(top, 1.0) * 1.45)  # room for the upright value labels above the tallest bar


def hollow(bar, color: str) -> None:
    """An unstable cell's bar: its outline only, in the role's colour."""
    bar.set_facecolor("white")
    bar.set_alpha(1.0)
    bar.set_edgecolor(color)
    bar.set_linewidth(1.5)
