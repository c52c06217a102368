"""The report renderer: golden test against the published report, plus data-driven behaviour."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from fabench.collect import collect, result_schema
from fabench.published import as_collected, load_published
from fabench.report import main as report_main
from fabench.report import render

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXPECTED = FIXTURES / "expected"
PUBLISHED_YAML = ROOT / "report" / "published" / "mi300x-2025-12-30.yaml"
# The published report lives outside the repository (../shared); the expected blocks are also
# kept in tests/fixtures/expected so the golden test runs without it.
PUBLISHED_MD = ROOT.parent / "shared" / "reference" / "published-mi300x-report.md"


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
    if PUBLISHED_MD.is_file():
        return extract(PUBLISHED_MD.read_text(), block)
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


def table_rows(text: str, heading: str) -> list[list[str]]:
    lines = table_block(text, heading).splitlines()
    rows = [line for line in lines if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


# ------------------------------------------------------------ golden test

@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_published_numbers_render_as_the_published_text(published, block):
    assert extract(render_published(published), block) == expected(block)


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_fixture_copy_matches_the_published_report(block):
    if not PUBLISHED_MD.is_file():
        pytest.skip("published report not present (../shared)")
    assert (EXPECTED / f"{block}.md").read_text() == extract(PUBLISHED_MD.read_text(), block)


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
    assert rows[0] == ["(4, 512, 8, 256)", "0.342", "0.069", "failed: out of resources [1]", "4.96x", "n/a"]
    assert ("- [1] FlexAttention (`flex`): failed: out of resources: out of shared memory: "
            "Required: 262144 Hardware limit: 232448") in text
    assert "| needs ROCm (this host: cuda) |" in text  # unavailable backends in the all-backends table


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
    assert "| Tuned config | (4, 512, 8, 256) | triton | Triton | 0.162 | FlexAttention | 0.106 | -34.6% |" in text
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


def test_cli_writes_the_report(tmp_path, fixture_run):
    collected, config = fixture_run
    (tmp_path / "results.json").write_text(json.dumps(collected))
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "report.md"
    assert report_main(["--results", str(tmp_path / "results.json"), "--config", str(tmp_path / "config.json"),
                        "--published", str(PUBLISHED_YAML), "--out", str(out)]) == 0
    assert out.read_text() == render(collected, config, load_published(PUBLISHED_YAML))
