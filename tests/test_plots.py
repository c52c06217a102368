"""The run and archive figures follow the data: every shape family (head_dim), every variant, a
legend of only what was drawn, and no two labels overlapping in the drawn figure."""

import copy
import itertools
import json
from pathlib import Path

import matplotlib
import pytest
from matplotlib.text import Text

from fabench.analysis.policy import Rule
from fabench.report import plots
from fabench.report.latency_plot import latency_figure
from fabench.report.plot_common import UNSTABLE_LABEL
from fabench.report.speedup_plot import UNSTABLE_BAR, speedup_figure
from fabench.report.versions_plot import MAX_WIDTH_PX, versions_figure

FIXTURE = Path(__file__).parent / "fixtures" / "h200-run" / "default-512.json"
VARIANTS = ("default", "tuned", "three-stages")
SHAPES = [{"batch": 4, "seq": seq, "heads": 8, "head_dim": 256} for seq in (512, 1024, 2048, 4096)] + [
    {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 64}, {"batch": 4, "seq": 2048, "heads": 8, "head_dim": 64},
    {"batch": 2, "seq": 1024, "heads": 16, "head_dim": 128}]
# sdpa_flash never runs (unavailable everywhere): no legend may name it.
NEVER_RAN = "sdpa_flash"
# flex fails at the largest shape of the tuned variant: a gap, named under the figure.
FAILED = ("tuned", 4096, "flex")
RULE = Rule.of({})  # the policy's defaults


def result(variant: str, shape: dict, template: dict) -> dict:
    r = copy.deepcopy(template)
    r.update(variant=variant, shape=shape, shape_id=f"b{shape['batch']}-s{shape['seq']}-h{shape['heads']}"
                                                    f"-d{shape['head_dim']}")
    scale = (shape["seq"] / 512) ** 2 * shape["head_dim"] / 256 * (1 + 0.2 * VARIANTS.index(variant))
    for name, backend in r["backends"].items():
        if name == NEVER_RAN:
            backend.update(status="unavailable", reason="needs something else", stats=None)
        elif (variant, shape["seq"], name) == FAILED and shape["head_dim"] == 256:
            backend.update(status="failed", failure_kind="oom", reason="out of memory", stats=None)
        elif backend["status"] == "ok":
            if name == "flex":  # the variants differ in FlexAttention's config: its code differs per variant
                backend["kernel_config"]["kernel_options"]["num_stages"] = VARIANTS.index(variant) + 1
            for stat in (backend["stats"]["device_ms"], backend["stats"]["wall_mean_ms"]):
                stat["median"] *= scale
                stat["ci95"] = [value * scale for value in stat["ci95"]]
    return r


@pytest.fixture(scope="module")
def collected():
    template = json.loads(FIXTURE.read_text())
    return {"run": "three-variants", "results": [result(v, s, template) for v in VARIANTS for s in SHAPES]}


@pytest.fixture(scope="module")
def comparison(collected):
    """Two archived entries of the same results, the second 10% slower and unstable in one cell."""
    entries = [{"id": f"cuda-13.0/000{i}-0000000{i}"} for i in (1, 2)]
    rows = []
    for r in collected["results"]:
        for name, backend in r["backends"].items():
            cells = []
            for i, entry in enumerate(entries):
                stats = backend.get("stats") or {}
                factor = 1 + 0.1 * i
                scaled = {key: {"median": stats[key]["median"] * factor,
                                "ci95": [v * factor for v in stats[key]["ci95"]]} for key in ("device_ms", "wall_mean_ms")
                          } if stats else {}
                cells.append({"entry": entry["id"], "status": backend["status"], "stable": not (i and name == "sdpa"),
                              **scaled})
            rows.append({"variant": r["variant"], "shape_id": r["shape_id"], "shape": r["shape"], "backend": name,
                         "label": backend["label"], "cells": cells})
    return {"entries": entries, "rows": rows, "flags": []}


def drawn(fig):
    """The figure laid out and drawn, as it is saved."""
    fig.canvas.draw()
    return fig


def unshown_tick_labels(fig) -> set:
    """Labels of ticks outside their axis's limits: matplotlib keeps but never draws them."""
    unshown = set()
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low * (1 - 1e-9) <= tick.get_loc() <= high * (1 + 1e-9):
                    unshown.update({tick.label1, tick.label2})
    return unshown


def overlapping_labels(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts (titles, tick and axis labels, legend entries, value labels, notes)
    whose boxes overlap."""
    renderer = fig.canvas.get_renderer()
    unshown = unshown_tick_labels(fig)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t not in unshown]
    boxes = [(t.get_text(), t.get_window_extent(renderer).expanded(0.98, 0.9)) for t in texts]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def legend_labels(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_latency_has_a_panel_per_shape_family_and_variant_and_names_only_what_ran(collected):
    fig = drawn(latency_figure(collected))
    titles = [ax.get_title() for ax in fig.axes]
    for variant in VARIANTS:
        for family in ("head_dim 64 (batch 4, heads 8)", "head_dim 128 (batch 2, heads 16)",
                       "head_dim 256 (batch 4, heads 8)"):
            assert f"{variant}: {family}" in titles
    assert len(fig.axes) == 9
    d256 = fig.axes[titles.index("tuned: head_dim 256 (batch 4, heads 8)")]
    assert [t.get_text() for t in d256.get_xticklabels()] == ["512", "1024", "2048", "4096"]
    assert legend_labels(fig) == ["Native", "SDPA (cuDNN)", "FlexAttention", "SDPA"]
    assert "SDPA (flash)" not in legend_labels(fig)
    notes = [t.get_text() for t in fig.texts]
    assert any("FlexAttention at seq 4096 in tuned, head_dim 256 (oom)" in note.replace("\n", " ") for note in notes)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


def test_speedup_shows_every_variant_for_every_shape_family(collected):
    fig = drawn(speedup_figure(collected, RULE))
    assert [ax.get_title() for ax in fig.axes] == ["head_dim 64 (batch 4, heads 8)",
                                                   "head_dim 128 (batch 2, heads 16)",
                                                   "head_dim 256 (batch 4, heads 8)"]
    # cuDNN reads no variant config: the same code in every variant, a bar per variant all the same
    # (their differences are the run's noise, which the title's "every variant" promises: issue 40),
    # and a note says so.
    assert legend_labels(fig) == [f"SDPA (cuDNN), {variant}" for variant in VARIANTS] + [
        f"FlexAttention, {variant}" for variant in VARIANTS] + ["Native = 1x"]
    assert any("SDPA (cuDNN) ran the same code in every variant: its bars differ by run-to-run noise only"
               in t.get_text().replace("\n", " ") for t in fig.texts)
    d256 = fig.axes[2]
    values = [t.get_text() for t in d256.texts]
    assert len(values) == 6 * 4 and values.count("did not run") == 1  # (3 + 3 variants) x 4 seqs
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


def test_a_backend_that_never_ran_is_named_under_the_speedup_not_in_its_legend(collected):
    runs = copy.deepcopy(collected)
    for r in runs["results"]:
        if r["variant"] == "three-stages":
            r["backends"]["flex"].update(status="failed", failure_kind="error", reason="x", stats=None)
    fig = drawn(speedup_figure(runs, RULE))
    assert "FlexAttention, three-stages" not in legend_labels(fig)
    assert any("Did not run in any shape: FlexAttention, three-stages" in t.get_text() for t in fig.texts)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("variant", VARIANTS)
def test_versions_has_a_panel_per_shape_of_every_head_dim(comparison, variant):
    fig = drawn(versions_figure(comparison, variant))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == len(SHAPES)
    assert {ax.get_title() for ax in panels} >= {"seq 1024, head_dim 64 (batch 4, heads 8)",
                                                  "seq 1024, head_dim 128 (batch 2, heads 16)",
                                                  "seq 4096, head_dim 256 (batch 4, heads 8)"}
    labels = legend_labels(fig)
    assert "SDPA (flash)" not in labels and "CK" not in labels
    assert {"Native", "SDPA", "FlexAttention", UNSTABLE_LABEL} <= set(labels)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


def test_the_pngs_are_written(collected, comparison, tmp_path):
    paths = plots.write_run_plots(collected, tmp_path, RULE) + plots.write_version_plots(comparison, tmp_path)
    assert [p.name for p in paths] == ["latency.png", "speedup.png", "roofline.png"] + [f"versions-{v}.png" for v in VARIANTS]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_a_figure_drawn_in_a_forked_process_is_the_figure_drawn_here_and_its_error_is_raised_here(collected):
    """write_run_plots draws its figures side by side, each in a forked process, where the host has
    more cores than figures (plots.drawn_apart); one figure fewer than this host's cores is drawn so
    here. Blind side: the three at once are drawn apart only on a host of four cores or more (not
    this 2-core one), by the same code."""
    shown = plots.shown(collected)
    apart = plots.drawn_apart({"latency.png": lambda: plots.latency_png(shown)})
    assert apart == {"latency.png": plots.latency_png(shown)}

    def broken() -> bytes:
        raise ValueError("no figure: the drawing's own error")

    with pytest.raises(ValueError, match="the drawing's own error"):
        plots.drawn_apart({"broken.png": broken})


def test_the_overlap_check_sees_crowded_labels():
    fig, ax = matplotlib.pyplot.subplots(figsize=(2, 2))
    ax.set_xticks(range(20), [f"label {i}" for i in range(20)])  # twenty labels on 2 inches
    assert overlapping_labels(drawn(fig))
    matplotlib.pyplot.close(fig)


def many_entries(comparison, count: int, failed_at: int) -> dict:
    """`comparison`'s rows over `count` CPU-labelled entries; in entry `failed_at` SDPA and
    FlexAttention both failed at every shape (as in the new user's entry 0006)."""
    entries = [{"id": f"cpu-torch2.13.0+cpu/{i:04d}-{i:08x}"} for i in range(1, count + 1)]
    rows = []
    for row in comparison["rows"]:
        cells = [dict(row["cells"][0], entry=e["id"]) for e in entries]
        if row["backend"] in ("sdpa", "flex") and cells[failed_at]["status"] == "ok":
            cells[failed_at] = {"entry": entries[failed_at]["id"], "status": "failed"}
        rows.append({**row, "cells": cells})
    return {"entries": entries, "rows": rows, "flags": []}


def png_width(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")  # the IHDR chunk's width


@pytest.mark.parametrize("count", [2, 6, 12])
def test_the_versions_png_fits_a_page_and_shows_each_failed_backend(comparison, tmp_path, count):
    many = many_entries(comparison, count, failed_at=count - 2)
    [path] = plots.write_version_plots(many, tmp_path, ["default"])
    assert png_width(path) <= MAX_WIDTH_PX
    fig = drawn(versions_figure(many, "default"))
    assert overlapping_labels(fig) == []
    for ax in (ax for ax in fig.axes if ax.get_title()):
        crosses = [line.get_xdata()[0] for line in ax.get_lines() if line.get_marker() == "x"]
        assert len(crosses) == 2 and len(set(crosses)) == 2  # one cross each, side by side
        assert all(abs(x - (count - 2)) < 0.5 for x in crosses)  # both at the entry they failed in
    matplotlib.pyplot.close(fig)


# ------------------------------------------------------------ an unstable cell: no interval drawn, marked

def with_unstable(collected: dict, variant: str, seq: int, name: str, stable: bool = False) -> dict:
    """The run with one head_dim-256 cell's 95% CI widened to +-10% (a bar plainly drawn when it is
    drawn) and, unless `stable`, its trials marked unstable."""
    runs = copy.deepcopy(collected)
    for r in runs["results"]:
        if r["variant"] == variant and r["shape"]["seq"] == seq and r["shape"]["head_dim"] == 256:
            stats = r["backends"][name]["stats"]
            for metric in ("device_ms", "wall_mean_ms"):
                stats[metric]["ci95"] = [stats[metric]["median"] * 0.9, stats[metric]["median"] * 1.1]
            stats.update(stable=stable, unstable_reason=None if stable else "GPU clock throttled")
    return runs


def hollow_points(ax) -> list[tuple[float, float]]:
    return [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines()
            if line.get_marker() == "o" and line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))]


def hollow_colors(ax) -> list:
    return [line.get_markeredgecolor() for line in ax.get_lines()
            if line.get_marker() == "o" and line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))]


def interval_bars(ax, color=None) -> list[float]:
    """The x of each interval bar drawn in the panel (errorbar's segments of non-zero length), of one colour if given."""
    return [seg[0][0] for coll in ax.collections for seg in coll.get_segments()
            if len(seg) == 2 and seg[0][1] != seg[1][1]
            and (color is None or matplotlib.colors.same_color(coll.get_color()[0], color))]


def test_an_unstable_cell_is_drawn_without_its_interval_and_marked_in_the_latency(collected):
    plain = drawn(latency_figure(with_unstable(collected, "tuned", 2048, "sdpa", stable=True)))
    shaky = drawn(latency_figure(with_unstable(collected, "tuned", 2048, "sdpa")))
    title = "tuned: head_dim 256 (batch 4, heads 8)"
    before, after = (next(ax for ax in f.axes if ax.get_title() == title) for f in (plain, shaky))
    assert [x for x, _ in hollow_points(after)] == [2048] and hollow_points(before) == []
    # Its interval bar is drawn when stable, not when unstable.
    sdpa = hollow_colors(after)[0]  # the hollow marker is drawn in its backend's colour
    assert interval_bars(before, sdpa) == [2048] and interval_bars(after, sdpa) == []
    assert UNSTABLE_LABEL in legend_labels(shaky) and UNSTABLE_LABEL not in legend_labels(plain)
    assert overlapping_labels(shaky) == []
    matplotlib.pyplot.close(plain)
    matplotlib.pyplot.close(shaky)


def test_an_unstable_cell_is_drawn_hollow_and_marked_in_the_speedup(collected):
    fig = drawn(speedup_figure(with_unstable(collected, "tuned", 2048, "flex"), RULE))
    d256 = fig.axes[2]
    hollow = [bar for bar in d256.patches if bar.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert len(hollow) == 1 and hollow[0].get_height() > 0
    assert legend_labels(fig)[-1] == UNSTABLE_BAR  # no bar has an interval: none is said to be left out
    plain = drawn(speedup_figure(collected, RULE))
    assert UNSTABLE_BAR not in legend_labels(plain)
    matplotlib.pyplot.close(fig)
    matplotlib.pyplot.close(plain)


def test_an_unstable_cell_has_no_interval_bar_in_the_versions_figure(comparison):
    wide = copy.deepcopy(comparison)  # every interval +-10%: a bar plainly drawn where it is drawn
    for cell in (c for row in wide["rows"] for c in row["cells"] if c.get("device_ms")):
        cell["device_ms"]["ci95"] = [cell["device_ms"]["median"] * 0.9, cell["device_ms"]["median"] * 1.1]
    fig = drawn(versions_figure(wide, "default"))
    for ax in (ax for ax in fig.axes if ax.get_title()):
        # SDPA is unstable in the second entry (x = 1): hollow there, and no bar reaches x = 1 in its colour.
        assert [x for x, _ in hollow_points(ax)] == [1]
        [sdpa] = hollow_colors(ax)
        assert interval_bars(ax, sdpa) == [0]
    assert UNSTABLE_LABEL in legend_labels(fig)
    matplotlib.pyplot.close(fig)


def test_every_later_point_shows_the_policys_verdict_against_the_run_before(comparison):
    """Issue 40: a filled point 41% below the one before, bars apart, read as an improvement where the
    policy said "cannot tell (one process)". Each later point now carries its verdict."""
    judged = copy.deepcopy(comparison)
    verdicts = {"native": ("cannot tell", "one_process"), "sdpa_cudnn": ("same", "same"),
                "flex": ("changed", "improvement")}
    for row in judged["rows"]:
        verdict, code = verdicts.get(row["backend"], (None, None))
        if verdict:
            row["cells"][1]["vs_previous"] = {"entry": row["cells"][0]["entry"], "verdict": verdict, "code": code}
    fig = drawn(versions_figure(judged, "default"))
    assert {"cannot tell from the run before", "the same as the run before", "improvement"} <= set(legend_labels(fig))
    panel = next(ax for ax in fig.axes if ax.get_title())
    glyphs = {line.get_marker(): line.get_xdata()[0] for line in panel.get_lines() if str(line.get_marker()).startswith("$")}
    assert set(glyphs) == {"$?$", "$=$"} and all(x > 1 for x in glyphs.values())  # beside the second entry
    greens = [line for line in panel.get_lines() if line.get_markeredgecolor() == "green"]
    assert len(greens) == 1 and greens[0].get_xdata()[0] == 1
    plain = drawn(versions_figure(comparison, "default"))  # no verdicts recorded: no glyphs, no legend entries
    assert "cannot tell from the run before" not in legend_labels(plain)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)
    matplotlib.pyplot.close(plain)
