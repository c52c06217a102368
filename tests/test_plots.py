"""The run and archive figures follow the data: every shape family (head_dim), every variant, a
legend of only what was drawn, and no two labels overlapping in the drawn figure."""

import copy
import itertools
import json
from pathlib import Path

import matplotlib
import pytest
from matplotlib.text import Text

from fabench.report import plots

FIXTURE = Path(__file__).parent / "fixtures" / "h200-run" / "default-512.json"
VARIANTS = ("default", "tuned", "three-stages")
SHAPES = [{"batch": 4, "seq": seq, "heads": 8, "head_dim": 256} for seq in (512, 1024, 2048, 4096)] + [
    {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 64}, {"batch": 4, "seq": 2048, "heads": 8, "head_dim": 64},
    {"batch": 2, "seq": 1024, "heads": 16, "head_dim": 128}]
# sdpa_flash never runs (unavailable everywhere): no legend may name it.
NEVER_RAN = "sdpa_flash"
# flex fails at the largest shape of the tuned variant: a gap, named under the figure.
FAILED = ("tuned", 4096, "flex")


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
    fig = drawn(plots.latency_figure(collected))
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
    fig = drawn(plots.speedup_figure(collected))
    assert [ax.get_title() for ax in fig.axes] == ["head_dim 64 (batch 4, heads 8)",
                                                   "head_dim 128 (batch 2, heads 16)",
                                                   "head_dim 256 (batch 4, heads 8)"]
    # cuDNN reads no variant config: the same code in every variant, so one bar, not one per variant.
    assert legend_labels(fig) == ["SDPA (cuDNN), every variant (same code)"] + [
        f"FlexAttention, {variant}" for variant in VARIANTS] + ["Native = 1x"]
    d256 = fig.axes[2]
    values = [t.get_text() for t in d256.texts]
    assert len(values) == 4 * 4 and values.count("did not run") == 1  # (1 + 3 variants) x 4 seqs
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


def test_a_backend_that_never_ran_is_named_under_the_speedup_not_in_its_legend(collected):
    runs = copy.deepcopy(collected)
    for r in runs["results"]:
        if r["variant"] == "three-stages":
            r["backends"]["flex"].update(status="failed", failure_kind="error", reason="x", stats=None)
    fig = drawn(plots.speedup_figure(runs))
    assert "FlexAttention, three-stages" not in legend_labels(fig)
    assert any("Did not run in any shape: FlexAttention, three-stages" in t.get_text() for t in fig.texts)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("variant", VARIANTS)
def test_versions_has_a_panel_per_shape_of_every_head_dim(comparison, variant):
    fig = drawn(plots.versions_figure(comparison, variant))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == len(SHAPES)
    assert {ax.get_title() for ax in panels} >= {"seq 1024, head_dim 64 (batch 4, heads 8)",
                                                  "seq 1024, head_dim 128 (batch 2, heads 16)",
                                                  "seq 4096, head_dim 256 (batch 4, heads 8)"}
    labels = legend_labels(fig)
    assert "SDPA (flash)" not in labels and "CK" not in labels
    assert {"Native", "SDPA", "FlexAttention", "unstable trials (not flagged)"} <= set(labels)
    assert overlapping_labels(fig) == []
    matplotlib.pyplot.close(fig)


def test_the_pngs_are_written(collected, comparison, tmp_path):
    paths = plots.write_run_plots(collected, tmp_path) + plots.write_version_plots(comparison, tmp_path)
    assert [p.name for p in paths] == ["latency.png", "speedup.png"] + [f"versions-{v}.png" for v in VARIANTS]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


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
    assert png_width(path) <= plots.MAX_WIDTH_PX
    fig = drawn(plots.versions_figure(many, "default"))
    assert overlapping_labels(fig) == []
    for ax in (ax for ax in fig.axes if ax.get_title()):
        crosses = [line.get_xdata()[0] for line in ax.get_lines() if line.get_marker() == "x"]
        assert len(crosses) == 2 and len(set(crosses)) == 2  # one cross each, side by side
        assert all(abs(x - (count - 2)) < 0.5 for x in crosses)  # both at the entry they failed in
    matplotlib.pyplot.close(fig)
