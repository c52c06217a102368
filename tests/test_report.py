"""The report renderer: golden test against the published report, plus data-driven behaviour."""

from __future__ import annotations

import re
import statistics
import copy
import json
from pathlib import Path

import jsonschema
import pytest

from fabench.results import contract
from fabench.results.collect import collect, result_schema
from fabench.report.format import FAILURE_WORDS, fmt_sig, md_code, md_text
from fabench.report.model import Run
from fabench.results.published import load_published
from support.published_run import as_collected
from fabench.report.render import render

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXPECTED = FIXTURES / "expected"
PUBLISHED_YAML = ROOT / "report" / "published" / "mi300x-2025-12-30.yaml"
# The published report's own text (its Results section and appendix, verbatim): the expected
# blocks in tests/fixtures/expected must be exactly what it says.
PUBLISHED_MD = FIXTURES / "published" / "mi300x-report-excerpt.md"


# ------------------------------------------------------------ block extraction (both sides)

def _start(lines: list[str], first_line: str) -> int:
    assert first_line in lines, f"{first_line!r} not found"
    return lines.index(first_line)


def table_block(text: str, heading: str) -> str:
    """From the heading line to the last row of the first table under it."""
    lines = text.splitlines()
    start = _start(lines, heading)
    row = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    while row < len(lines) and lines[row].startswith("|"):
        row += 1
    return "\n".join(lines[start:row]) + "\n"


def fenced_block(text: str, heading: str) -> str:
    """From the heading line to the closing fence of the first code block under it."""
    lines = text.splitlines()
    start = _start(lines, heading)
    fences = [i for i in range(start, len(lines)) if lines[i].startswith("```")]
    return "\n".join(lines[start:fences[1] + 1]) + "\n"


def list_block(text: str, heading: str) -> str:
    """The heading line and the "- " list right under it."""
    lines = text.splitlines()
    end = start = _start(lines, heading)
    while end + 1 < len(lines) and lines[end + 1].startswith("- "):
        end += 1
    return "\n".join(lines[start:end + 1]) + "\n"


BLOCKS = {
    "before-tuning": (table_block, "#### Before Tuning (Default Triton Config)"),
    "after-tuning": (table_block, "#### After Tuning (Optimized Triton Config)"),
    "key-improvements": (list_block, "**Key Improvements**:"),
    "full-benchmark-output": (fenced_block, "### Appendix: Full Benchmark Output"),
}


def extract(text: str, block: str) -> str:
    function, heading = BLOCKS[block]
    return function(text, heading)


def expected(block: str) -> str:
    return (EXPECTED / f"{block}.md").read_text()


# ------------------------------------------------------------ inputs

@pytest.fixture(scope="module")
def published() -> dict:
    return load_published(PUBLISHED_YAML)


def render_published(published: dict) -> str:
    collected, config = as_collected(published)
    return render(collected, config, published)


@pytest.fixture(scope="module")
def fixture_run() -> tuple[dict, dict]:
    config = json.loads((FIXTURES / "config.json").read_text())
    collected = collect(sorted((FIXTURES / "results").glob("*/*.json")), list(config["variants"]))
    return collected, config


@pytest.fixture(scope="module")
def cpu_run() -> tuple[dict, dict]:
    """A real run on a CPU host (results/local): no device timer, most backends unavailable."""
    return (json.loads((FIXTURES / "cpu-run" / "results.json").read_text()),
            json.loads((FIXTURES / "cpu-run" / "config.json").read_text()))


@pytest.fixture(scope="module")
def h200_run() -> tuple[dict, dict]:
    """Four real jobs on an NVIDIA H200: CUDA-event device times, FlexAttention's ignored keys."""
    config = json.loads((FIXTURES / "config.json").read_text())
    return collect(sorted((FIXTURES / "h200-run").glob("*.json")), list(config["variants"])), config


def section(text: str, heading: str) -> str:
    """From the heading line to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    lines = text.splitlines()
    start = _start(lines, heading)
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("#") and len(lines[i].split(" ")[0]) <= len(level)), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def table_rows(text: str, heading: str) -> list[list[str]]:
    lines = table_block(text, heading).splitlines()
    rows = [line for line in lines if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


# ------------------------------------------------------------ golden test

@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_published_numbers_render_as_the_published_text(published, block):
    assert extract(render_published(published), block) == expected(block)


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_expected_blocks_are_the_published_text(block):
    assert expected(block) == extract(PUBLISHED_MD.read_text(), block)


@pytest.mark.parametrize("path, block", [
    (("variants", "tuned", "results", 1, "ms", "ck"), "after-tuning"),
    (("variants", "default", "results", 0, "speedup", "triton"), "before-tuning"),
    (("appendix", "ck_vs_triton", "ms", "triton"), "full-benchmark-output"),
])
def test_golden_fails_when_one_published_cell_changes(published, path, block):
    changed = copy.deepcopy(published)
    *parents, leaf = path
    holder = changed
    for key in parents:
        holder = holder[key]
    holder[leaf] = round(holder[leaf] + 0.5, 3)
    assert extract(render_published(changed), block) != expected(block)


def test_published_appendix_repeats_the_tuned_table(published):
    appendix = published["appendix"]["full_benchmark_output"]
    assert appendix["results"] == published["variants"][appendix["variant"]]["results"]


def test_published_numbers_recast_as_results_meet_the_schema(published):
    collected, _ = as_collected(published)
    validator = jsonschema.Draft202012Validator(result_schema())
    for result in collected["results"]:
        validator.validate(result)


def test_published_speedups_are_kept_verbatim(published):
    # 0.897 / 0.232 = 3.866..., printed 3.86x: the data's speedup wins over the ratio.
    rows = table_rows(render_published(published), "#### Before Tuning (Default Triton Config)")
    assert rows[1][4] == "3.86x"


# ------------------------------------------------------------ data-driven behaviour

def test_rows_and_columns_come_from_the_data(fixture_run):
    collected, config = fixture_run
    only = copy.deepcopy([r for r in collected["results"] if r["shape"]["head_dim"] == 256][:1])[0]
    results = []
    for seq in (256, 2048, 8192):
        result = copy.deepcopy(only)
        result.update(variant="probe", shape={"batch": 2, "seq": seq, "heads": 4, "head_dim": 64},
                      shape_id=f"b2-s{seq}-h4-d64")
        results.append(result)
    text = render({"run": "probe", "results": results}, {"variants": {}}, None)
    header = ("| Config (B,S,H,D) | Native (ms) | SDPA (cuDNN) (ms) | FlexAttention (ms) "
              "| SDPA (cuDNN) Speedup | FlexAttention Speedup |")
    assert header in text
    rows = table_rows(text, "#### probe")
    assert [row[0] for row in rows] == ["(2, 256, 4, 64)", "(2, 2048, 4, 64)", "(2, 8192, 4, 64)"]
    assert "**Key Improvements**" not in text  # one variant: nothing to compare against
    assert "(4, 512, 8, 256)" not in text


def test_failed_and_unavailable_cells_keep_the_row_and_give_the_reason(fixture_run):
    text = render(*fixture_run, None)
    rows = table_rows(text, "#### Before Tuning (Default Triton Config)")
    # One trial per cell: no noise estimate, so the policy cannot tell the speedup from noise (marked ~).
    assert rows[0] == ["(4, 512, 8, 256)", "0.342", "0.069", "failed: out of resources [1]", "4.96x ~", "n/a"]
    assert ("- [1] FlexAttention (`flex`): failed: out of resources: out of shared memory: "
            "Required: 262144 Hardware limit: 232448") in text
    assert text.count("- CK (`ck`): needs ROCm (this host: cuda)\n") == 1  # unavailable: listed once
    failed = [r for r in table_rows(text, "#### All measured backends") if r[2] == "FlexAttention (`flex`)"]
    assert failed[0][3] == "failed: out of resources" and failed[0][-1].startswith("out of shared memory")


def test_unavailable_role_cell_renders_with_footnote(fixture_run):
    collected, config = copy.deepcopy(fixture_run)
    for result in collected["results"]:
        result["roles"]["vendor"] = "ck"
    text = render(collected, config, None)
    row = table_rows(text, "#### After Tuning (Optimized Triton Config)")[0]
    assert row[2] == "unavailable [1]" and row[4] == "n/a" and len(row) == 6
    assert "- [1] CK (`ck`): unavailable: needs ROCm (this host: cuda)" in text


def test_first_variant_is_plain_and_later_ones_highlight_winners(published):
    changed = copy.deepcopy(published)
    changed["variants"]["default"]["results"][0]["ms"]["triton"] = 0.100  # Triton wins in the reference
    text = render_published(changed)
    assert "**" not in table_block(text, "#### Before Tuning (Default Triton Config)")
    row = table_rows(text, "#### After Tuning (Optimized Triton Config)")[0]
    assert row[3] == "**0.162**" and row[5] == "**1.71x**" and row[2] == "0.181"


def test_key_improvements_say_still_when_triton_already_won(published):
    changed = copy.deepcopy(published)
    changed["variants"]["default"]["results"][0]["ms"]["triton"] = 0.170
    text = render_published(changed)
    assert "- Triton still **beats CK** at seq=512 (0.162ms vs 0.181ms)" in text


def test_vendor_vs_triton_line_says_faster_when_the_vendor_is_faster(published):
    changed = copy.deepcopy(published)
    changed["appendix"]["ck_vs_triton"]["ms"] = {"ck": 0.100, "triton": 0.120}
    assert "  CK is 1.20x faster than Triton" in render_published(changed)


def test_reduced_iterations_are_stated(fixture_run):
    collected, config = copy.deepcopy(fixture_run)
    for result in collected["results"]:
        result["method"].update(warmup=1, iters=3, reduced=True)
    text = render(collected, config, load_published(PUBLISHED_YAML))
    assert "used 1 warm-up and 3 timed iterations per backend instead of the published 10 warm-up and 100" in text


def test_published_comparison_flags_other_hardware_and_backends(fixture_run):
    text = render(*fixture_run, load_published(PUBLISHED_YAML))
    assert "published on AMD Instinct MI300X, measured here on NVIDIA H200" in text
    assert "CK → SDPA (cuDNN)" in text
    assert "| Tuned config | (4, 512, 8, 256) | triton | Triton | 0.162 | FlexAttention | 0.106 | 1.53x faster ~ |" in text
    assert "`~` after a difference: this run's figure supports no claim (no noise estimate)" in text
    assert "| Default config | (4, 512, 8, 256) | triton | Triton | 0.436 | FlexAttention | failed: out of resources | n/a |" in text


def test_correctness_is_judged_against_the_tolerance(fixture_run):
    text = render(*fixture_run, None)
    assert ("| Tuned config | (4, 4096, 8, 256) | SDPA (flash) (`sdpa_flash`) | failed: wrong result "
            "| 5.00e-01 | 0.930000 | **FAIL** |") in text


def test_full_output_lists_main_head_dim_and_compares_the_others(fixture_run):
    block = extract(render(*fixture_run, None), "full-benchmark-output")
    assert "(4, 1024, 8, 64)" not in block
    assert "SDPA (cuDNN) vs FlexAttention comparison (seq=1024, d_k=64):" in block
    assert "  SDPA (cuDNN):  0.031 ms\n  FlexAttention: 0.038 ms\n" in block


# ------------------------------------------------------------ unavailable backends, once

def test_correctness_lists_only_backends_that_ran(cpu_run):
    text = render(*cpu_run, None)
    rows = table_rows(text, "### Correctness")
    assert {row[3] for row in rows} == {"ok"}
    assert {row[2] for row in rows} == {"Native (`native`)", "SDPA (`sdpa`)"}
    assert len(rows) == 2 * len(cpu_run[0]["results"])
    listed = section(text, "### Correctness")
    assert listed.count("- FlexAttention (`flex`): compiled FlexAttention generates Triton GPU kernels; "
                        "needs a GPU (this host: cpu)\n") == 1
    assert "- CK (`ck`): needs ROCm and AMD's aiter (this host: cpu)\n" in listed
    assert "unavailable" not in "\n".join(line for line in listed.splitlines() if line.startswith("|"))


def test_all_backends_table_leaves_unavailable_ones_to_the_list(cpu_run):
    text = render(*cpu_run, None)
    rows = table_rows(text, "#### All measured backends")
    assert {row[3] for row in rows} == {"ok"} and len(rows) == 20
    assert "needs CUDA (this host: cpu)" not in section(text, "#### All measured backends")
    assert text.count("needs CUDA (this host: cpu)") == 1


def test_backend_unavailable_in_some_jobs_only_says_how_many(h200_run):
    collected, config = copy.deepcopy(h200_run)
    collected["results"][0]["backends"]["sdpa_flash"].update(
        status="unavailable", reason="flash kernel not built", wall_mean_ms=None, device_ms=None,
        tflops=None, correctness=None)
    text = render(collected, config, None)
    assert "- SDPA (flash) (`sdpa_flash`): flash kernel not built (1 of 4 jobs)\n" in text
    assert len([r for r in table_rows(text, "### Correctness") if r[2] == "SDPA (flash) (`sdpa_flash`)"]) == 3


def test_role_backend_missing_from_results_is_listed_as_not_run(cpu_run):
    collected, config = copy.deepcopy(cpu_run)
    for result in collected["results"]:
        del result["backends"]["flex"]
    text = render(collected, config, None)
    assert "- `flex`: not run: not in the job's results\n" in text


# ------------------------------------------------------------ timing: CPU wall only, GPU device

@pytest.mark.parametrize("value, text", [
    (0.023612, "0.0236"), (0.0296, "0.0296"), (14.666, "14.7"), (7.5405, "7.54"), (90.36, "90.4"),
    (530.19, "530"), (99.96, "100"), (0.0, "0"), (None, "n/a"),
])
def test_tflops_have_three_significant_digits(value, text):
    assert fmt_sig(value) == text


def test_cpu_timing_says_no_device_timer_and_shows_wall_tflops(cpu_run):
    text = render(*cpu_run, None)
    timing = section(text, "### Device Timing and TFLOP/s")
    assert "No device timer on this platform (cpu): times are wall-clock only" in timing
    assert "Device median" not in timing and "Device timer:" not in timing
    header = next(line for line in timing.splitlines() if line.startswith("|"))
    # No interval these results can support is a 95% CI over processes: the column says "Interval".
    assert header == ("| Variant | Config (B,S,H,D) | Backend | Wall mean (ms) | Interval (ms) | Spread | Stable "
                      "| TFLOP/s (wall) |")
    assert re.search(r"\| Tuned config \| \(4, 4096, 8, 256\) \| Native \(`native`\) \| 11671.822 \| [^|]+ \| [^|]+ \| [^|]+ \| 0.0236 \|", timing)
    assert "| 0.0 |" not in text
    # The Triton role (FlexAttention) never ran on the CPU: no row of n/a's for it.
    assert "FlexAttention (`flex`)" not in "".join(l for l in timing.splitlines() if l.startswith("|"))


def test_gpu_timing_shows_device_median_percentiles_and_tflops(h200_run):
    text = render(*h200_run, None)
    timing = section(text, "### Device Timing and TFLOP/s")
    # Results from before the kernels' own time was the figure: their figure is named for what it was.
    assert "Device timer: cuda-events: events around each call" in timing and "kernel's own time" not in timing
    assert ("| Variant | Config (B,S,H,D) | Backend | Wall mean (ms) | Device median (ms) | Interval (ms) | Spread "
            "| Stable | Period (ms) | Second method | Host overhead (ms) | do_bench (ms) | TFLOP/s (device median) "
            "| TFLOP/s (wall) | Kernels (share) |") in timing
    assert "with its interval (no interval (too few repeats))" in timing
    # Schema 2: these fixtures hold one trial each (converted from schema 1): one trial has no
    # noise to estimate, so no interval is claimed.
    assert ("| Tuned config | (4, 4096, 8, 256) | FlexAttention (`flex`) | 1.244 | 1.020 | n/a "
            "| 0.0% | yes |") in timing
    assert ("| Default config | (4, 1024, 8, 64) | Native (`native`) | 0.598 | 0.570 | n/a | 0.0% "
            "| yes |") in timing
    assert "| 270 | 221 |" in timing and "| 7.54 | 7.19 |" in timing
    rows = table_rows(text, "### Device Timing and TFLOP/s")
    # Every figure is there; the interval column alone is n/a (one trial per cell in this fixture).
    assert len(rows) == 12 and all("n/a" not in row[:5] + row[6:8] and row[5] == "n/a" for row in rows)
    assert "| Tuned config | (4, 512, 8, 256) | FlexAttention (`flex`) | ok | 0.127 | 0.120 | 35.8 |  |" in text


def test_device_tflops_are_derived_when_not_recorded(h200_run):
    collected, config = copy.deepcopy(h200_run)
    for result in collected["results"]:
        for backend in result["backends"].values():
            backend["tflops"] = None
    row = [r for r in table_rows(render(collected, config, None), "### Device Timing and TFLOP/s")
           if r[:3] == ["Tuned config", "(4, 4096, 8, 256)", "FlexAttention (`flex`)"]][0]
    # 4*4*8*4096^2*256 / 2 FLOPs over 1.0196 ms and 1.2436 ms
    assert row[-3:-1] == ["270", "221"]


# ------------------------------------------------------------ published vs reproduced

def comparison(text: str) -> list[list[str]]:
    return table_rows(text, "### Published vs Reproduced")


def test_other_hardware_gives_a_ratio_not_a_percentage(cpu_run, h200_run, published):
    cpu = comparison(render(*cpu_run, published))
    # 144.982 / 0.274; results from before trials carry no noise estimate: no claim (~)
    assert cpu[0][6:] == ["144.982", "529x slower ~"]
    assert not any(row[7].endswith("%") for row in cpu)
    gpu = comparison(render(*h200_run, published))
    assert gpu[1][5:] == ["SDPA (cuDNN)", "0.039", "4.72x faster ~"]
    text = render(*cpu_run, published)
    assert "published on AMD Instinct MI300X, measured here on AMD EPYC" in text
    assert "Difference is therefore the ratio of the two times, not a %" in text


def test_same_device_keeps_the_percentage(published):
    changed = copy.deepcopy(published)
    changed["variants"]["tuned"]["results"][0]["ms"]["native"] = 0.300
    measured, config = as_collected(changed)
    text = render(measured, config, published)
    rows = comparison(text)
    assert rows[0][7] == "+0.0%"
    tuned = [r for r in rows if r[0] == "Tuned config" and r[1] == "(4, 512, 8, 256)" and r[2] == "baseline"]
    assert tuned[0][7] == "+7.9%"  # 0.300 vs 0.278
    assert "The hardware differs" not in text


# ------------------------------------------------------------ appendix columns

def column_starts(line: str, cells: list[str]) -> list[int]:
    starts, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        starts.append(at)
        at += len(cell)
    return starts


def test_appendix_widens_only_columns_that_do_not_fit(h200_run, cpu_run):
    lines = extract(render(*h200_run, None), "full-benchmark-output").splitlines()
    header = next(line for line in lines if line.startswith("Config "))
    labels = ["Config", "Native (ms)", "SDPA (cuDNN) (ms)", "FlexAttention (ms)", "SDPA (cuDNN) Speedup",
              "FlexAttention Speedup"]
    starts = column_starts(header, labels)
    assert starts[:3] == [0, 21, 37]  # fitting columns keep the published widths
    rows = [line for line in lines if line.startswith("(4, ")]
    # One trial per cell: the policy cannot tell the speedups from noise, so they carry its mark.
    assert [header_split(row, starts) for row in rows] == [
        ["(4, 512, 8, 256)", "0.336", "0.053", "0.127", "6.29x ~", "2.65x ~"],
        ["(4, 4096, 8, 256)", "17.073", "0.510", "1.244", "33.46x ~", "13.73x ~"],
    ]
    for row in rows:  # each value starts exactly under its label
        assert all(row[s - 1] == " " and row[s] != " " for s in starts[1:])
    # every column still has a gap of at least two spaces before the next one
    assert all(header[s - 2:s] == "  " for s in starts[1:])
    rule = next(line for line in lines if line.startswith("="))
    assert len(rule) == 90 + (19 - 15) + (20 - 15) + (22 - 12)
    cpu = extract(render(*cpu_run, None), "full-benchmark-output")
    assert "(4, 512, 8, 256)     136.760         164.183         unavailable          0.83x ~        n/a" in cpu


def header_split(line: str, starts: list[int]) -> list[str]:
    ends = starts[1:] + [len(line)]
    return [line[a:b].strip() for a, b in zip(starts, ends)]


# ------------------------------------------------------------ config keys the Triton role ignored

def test_ignored_config_keys_are_named_once_under_the_variant_tables(h200_run):
    text = render(*h200_run, None)
    note = ("**Config keys not used on this platform**: FlexAttention (`flex`), the Triton-role backend on cuda, "
            "did not use the config keys PRELOAD_V, num_ctas, waves_per_eu; it was given only BLOCK_M, BLOCK_N, "
            "num_warps, num_stages. The variants' difference in PRELOAD_V therefore cannot show in its times.")
    assert text.count(note) == 1
    lines = text.splitlines()
    assert lines.index(note) > lines.index("#### After Tuning (Optimized Triton Config)")
    assert lines.index(note) < lines.index("**Key Improvements**:")


def test_no_ignored_keys_no_note(fixture_run, published):
    assert "Config keys not used" not in render(*fixture_run, None)
    assert "Config keys not used" not in render_published(published)


def test_ignored_keys_note_with_one_variant_names_no_change(h200_run):
    collected, config = copy.deepcopy(h200_run)
    collected["results"] = [r for r in collected["results"] if r["variant"] == "tuned"]
    text = render(collected, config, None)
    assert "did not use the config keys PRELOAD_V, num_ctas, waves_per_eu" in text
    assert "therefore cannot show" not in text


# ------------------------------------------------------------ variant order: the config's, never alphabetical

def renamed(run: tuple[dict, dict], names: dict[str, str]) -> tuple[dict, dict]:
    """The run with its variants renamed, results in alphabetical order of the new names and
    the config's variants in the given order (the user's)."""
    collected, config = copy.deepcopy(run)
    for result in collected["results"]:
        result["variant"] = names[result["variant"]]
    collected["results"].sort(key=lambda r: r["variant"])
    config["variants"] = {new: dict(config["variants"][old], title=new.title(), label=new) for old, new in names.items()}
    return collected, config


def test_variants_come_in_the_config_order_not_alphabetical(h200_run):
    collected, config = renamed(h200_run, {"default": "stock", "tuned": "autotuned"})
    assert [r["variant"] for r in collected["results"]][0] == "autotuned"
    assert Run(collected, config).variants == ["stock", "autotuned"]
    text = render(collected, config, None)
    lines = text.splitlines()
    assert lines.index("#### Stock") < lines.index("#### Autotuned")
    assert "**" not in table_block(text, "#### Stock")  # the reference: the first in the config
    # One trial per cell: no noise estimate, so the run claims no change.
    improvement = next(line for line in lines if line.startswith("- FlexAttention at seq=512: "))
    assert improvement.startswith("- FlexAttention at seq=512: 0.241ms → 0.127ms, no change claimed: ")
    assert improvement.endswith("no noise estimate in both runs")
    assert "#### SDPA (cuDNN) vs FlexAttention: winner per sequence length (autotuned)" in lines
    assert "(4, 4096, 8, 256)" in extract(text, "full-benchmark-output")  # the last variant: autotuned


def test_variants_only_in_the_results_go_last(h200_run):
    collected, config = renamed(h200_run, {"default": "stock", "tuned": "autotuned"})
    extra = copy.deepcopy(collected["results"][0])
    extra["variant"] = "aardvark"
    collected["results"].insert(0, extra)
    assert Run(collected, config).variants == ["stock", "autotuned", "aardvark"]


# ------------------------------------------------------------ no published numbers: no word of a publication

def test_without_published_numbers_the_report_names_no_publication(fixture_run):
    collected, config = copy.deepcopy(fixture_run)
    for result in collected["results"]:
        result["method"].update(warmup=1, iters=3, reduced=True)
    text = render(collected, config, None)
    assert "publish" not in text.lower() and "reproduc" not in text.lower()
    assert ("used 1 warm-up and 3 timed iterations per backend instead of the configured 10 warm-up and 100 "
            "timed iterations") in text
    assert "Published vs Reproduced" in render(collected, config, load_published(PUBLISHED_YAML))


def setext_underlines(text: str) -> list[str]:
    """Lines outside code blocks that Markdown would take as a heading's underline: a text line
    directly followed by a line of only - or =."""
    found, fenced, previous = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.strip() and set(line.strip()) <= {"-"} | {"="} and previous.strip():
            found.append(f"{previous!r} over {line!r}")
        previous = line
    return found


@pytest.mark.parametrize("run", ["fixture_run", "cpu_run", "h200_run"])
@pytest.mark.parametrize("with_published", [False, True])
def test_every_rule_follows_a_blank_line(request, published, run, with_published):
    text = render(*request.getfixturevalue(run), published if with_published else None)
    assert setext_underlines(text) == []


def test_published_report_has_no_accidental_heading(published):
    assert setext_underlines(render_published(published)) == []


# ------------------------------------------------------------ config text is escaped where it lands

def test_config_text_cannot_break_tables_or_hide_as_html(fixture_run):
    collected, config = copy.deepcopy(fixture_run)
    config["variants"]["default"]["label"] = "<b>x</b> | y"
    config["variants"]["tuned"]["title"] = "Tuned <!-- hidden\nline"
    text = render(collected, config, None)
    label = "&lt;b&gt;x&lt;/b&gt; \\| y"
    assert "<b>" not in text and "<!--" not in text
    assert "#### Tuned &lt;!-- hidden line" in text.splitlines()
    assert f"{label}: `BLOCK_M=128, BLOCK_N=64, PRELOAD_V=false`" in text.splitlines()
    rows = table_rows(text, "### Correctness")
    assert {len(row) for row in rows} == {7}
    assert rows[0][0] == label
    variants = table_rows(text, "#### Variants")
    assert variants[1][1] == "Tuned &lt;!-- hidden line" and len(variants[1]) == 3


@pytest.mark.parametrize("raw, markdown", [
    ("<b>x</b> | y", "&lt;b&gt;x&lt;/b&gt; \\| y"),
    ("a <!-- b", "a &lt;!-- b"),
    ("R&D", "R&amp;D"),
    ("4*B*H", "4\\*B\\*H"),
    ("one\r\ntwo\nthree", "one two three"),
    ("back\\slash `tick`", "back\\\\slash \\`tick\\`"),
    ("[x](javascript:y)", "\\[x\\](javascript:y)"),
])
def test_md_text_escapes_markup(raw, markdown):
    assert md_text(raw) == markdown


@pytest.mark.parametrize("raw, markdown", [("run-1", "`run-1`"), ("a`b", "``a`b``"), ("`x", "`` `x ``")])
def test_md_code_cannot_be_closed_by_its_text(raw, markdown):
    assert md_code(raw) == markdown


# ------------------------------------------------------------ one vocabulary with the result contract

def test_failure_words_cover_exactly_the_contracts_failure_kinds():
    assert set(FAILURE_WORDS) == set(contract.FAILURE_KINDS)


def test_nothing_to_report_says_so(fixture_run):
    with pytest.raises(ValueError, match="nothing to report: the collected run has no results"):
        render({"run": "empty", "results": []}, fixture_run[1], None)


# ------------------------------------------------------------ how precise is this run

def test_precision_states_the_noise_floor_and_lists_unstable_cells_and_cross_checks(h200_run):
    collected, config = copy.deepcopy(h200_run)
    ok = [(r, n, b) for r in collected["results"] for n, b in r["backends"].items() if b["status"] == "ok"]
    for i, (_, _, backend) in enumerate(ok):  # spreads 1%, 2%, ... so the median and worst are known
        backend["stats"]["device_ms"]["spread"] = (i + 1) / 100
    result, name, backend = ok[-1]
    backend["stats"].update(stable=False, unstable_reason="trials spread 12% (more than 3%)")
    ok[0][2]["cross_check"] = {"do_bench_ms": 0.5, "agrees": False, "reason": "do_bench 9% slower"}
    ok[1][2]["cross_check"] = {"do_bench_ms": 0.4, "agrees": True, "reason": None}
    text = section(render(collected, config, None), "### How precise is this run")
    n = len(ok)
    median = statistics.median(range(1, n + 1))
    assert f"over {n} measured cells, the trials of a cell spread by {median:.2f}% (median) and at most {n:.2f}%" in text
    assert "**Unstable cells** (1)" in text and "trials spread 12% (more than 3%)" in text
    assert f"{backend['label']} (`{name}`)" in text.split("**Unstable cells**")[1]
    assert "do_bench confirmed 1 of 2 device medians" in text and "differs: do_bench 9% slower" in text


def test_published_numbers_recast_as_a_run_have_no_precision_section():
    collected, config = as_collected(load_published(PUBLISHED_YAML))
    assert "How precise is this run" not in render(collected, config, None)
