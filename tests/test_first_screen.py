"""The report's first screen says only what is true of its run, in the figure its tables show
(issue 48): backends measured once per shape are said to be one measurement shown in every table,
not run-to-run noise; the summary's leads are the ratios of the linked table's figures; the variant
whose jobs measured the cells is named; the speedup figure draws a shared measurement once; the
time line names the job that took the time; the summary says how many of its questions the run
decided and points to the judged example when not all. The findings are also data: results.json's
and compare.json's `summary`, valid against their schemas, and a CSV row for every table row.

Built on realistic CPU runs (support.runs) collected as the workflow collects them: the tuned jobs
share native and SDPA with the default ones, as the default CPU run does."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from fabench.analysis.policy import Rule
from fabench.report import findings
from fabench.report.model import Run
from fabench.report.render import render
from fabench.report.sections import compare_summary, summary
from fabench.report.plot_common import family
from fabench.report.speedup_plot import EVERY_VARIANT, speedup_series
from fabench.analysis import claims
from fabench.results.collect import collect
from fabench.results.published import load_published
from fabench.results.results_csv import results_csv
from fabench.results.shared import SHARED_KEY, shown
from fabench.resources import SCHEMA_DIR
from support.runs import CPU, SHAPES, config_for, make_result, not_ok_backend

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = load_published(ROOT / "report" / "published" / "mi300x-2025-12-30.yaml")
SHARED = ["native", "sdpa"]


def cpu_run(tmp_path: Path, processes: int = 3, seconds: dict | None = None) -> tuple[dict, dict]:
    """A CPU run collected from its job files: FlexAttention left out, the tuned jobs share native and
    SDPA with the default ones; `processes` keeps that many processes' trials; `seconds` {shape_id: span} sets a job's
    recorded finish that far after its start."""
    paths = []
    for variant in ("default", "tuned"):
        for shape in SHAPES:
            result = make_result("cpu", variant, shape, CPU)
            result["method"]["repeats"] = processes
            # As in the default CPU run: FlexAttention left out, so every backend that ran reads no variant config.
            result["backends"]["flex"] = not_ok_backend("flex", "unavailable", "left out by cpu.leave_out")
            for entry in result["backends"].values():
                if entry.get("trials"):
                    entry["trials"] = [t for t in entry["trials"] if t["process"] < processes]
            if variant == "tuned":
                for name in SHARED:
                    del result["backends"][name]
                result[SHARED_KEY] = {"measured_in": "default", "backends": list(SHARED)}
            span = (seconds or {}).get(result["shape_id"])
            if span is not None:
                result["provenance"]["finished"] = f"2026-01-05T10:{span // 60:02d}:{span % 60:02d}+00:00"
            path = tmp_path / variant / f"{result['shape_id']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result))
            paths.append(path)
    return collect(paths, ["default", "tuned"]), config_for("cpu", SHAPES, ["default", "tuned"])


def first_screen(report: str) -> str:
    """The title, the opening lines and the Summary: everything before Environment Setup."""
    return report.split("### Environment Setup")[0]


def summary_line(report: str, start: str) -> str:
    return next(line for line in first_screen(report).splitlines() if line.startswith(start))


def speedups(report: str, heading: str, column: str) -> list[str]:
    """The values of one speedup column of the variant table under `heading`, d_k=256 rows only."""
    table = report.split(heading, 1)[1].split("\n\n")[2].splitlines()
    index = [c.strip() for c in table[0].strip("|").split("|")].index(column)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    return [row[index].split()[0] for row in rows if row[0].endswith(", 256)")]


@pytest.mark.parametrize("processes", [1, 3])
def test_shared_backends_are_one_measurement_on_the_first_screen_not_noise(tmp_path, processes):
    collected, config = cpu_run(tmp_path, processes)
    report = render(collected, config, PUBLISHED)
    top = first_screen(report)
    assert "run-to-run noise" not in top  # nothing was measured twice to differ by noise
    assert ("Native and SDPA were measured once per shape, in the jobs of Default config: every variant's "
            "table below shows those same measurements.") in top
    # The two variant tables are indeed the same figures (the sentence's premise).
    assert speedups(report, "#### Before Tuning", "SDPA Speedup") == speedups(report, "#### After Tuning", "SDPA Speedup")
    fastest = summary_line(report, "- **Fastest at d_k=256**")
    assert "(4 shapes, Default config's jobs, one measurement shown in every variant's table;" in fastest
    assert "Tuned config" not in fastest


@pytest.mark.parametrize("processes", [1, 3])
def test_the_summarys_lead_is_the_ratio_the_table_shows_and_names_it(tmp_path, processes):
    collected, config = cpu_run(tmp_path, processes)
    report = render(collected, config, PUBLISHED)
    fastest = summary_line(report, "- **Fastest at d_k=256**")
    found = re.search(r"(\d+\.\d\d)x(?: to (\d+\.\d\d)x)?[^;]*?, the ratio of the table's wall-clock means", fastest)
    assert found, fastest
    table = [float(v.rstrip("x")) for v in speedups(report, "#### After Tuning", "SDPA Speedup")]
    low, high = float(found[1]), float(found[2] or found[1])
    # The table prints 3 significant digits: the same figures, rounded alike.
    assert (low, high) == pytest.approx((min(table), max(table)), rel=0.006), (fastest, table)


def test_the_speedup_figure_draws_a_shared_measurement_once(tmp_path):
    collected, _ = cpu_run(tmp_path)
    results = shown(collected)["results"]
    within = claims.WithinRun(results, Rule())
    group = family(SHAPES[0])
    series = speedup_series(results, ["default", "tuned"], group, within)
    vendor = [variant for role, variant, _ in series if role == "vendor"]
    assert vendor == [EVERY_VARIANT]  # SDPA and the baseline measured once: one bar, named so


def test_the_time_line_names_the_longest_job_from_its_own_record(tmp_path):
    collected, config = cpu_run(tmp_path, seconds={"b4-s4096-h8-d256": 73})
    report = render(collected, config, PUBLISHED)
    time = summary_line(report, "- **Time**")
    assert "the longest job, seq=4096 of Default config, took 73 s" in time
    assert "is cut by" not in time  # no setting named for time it did not take


def test_a_cpu_run_says_what_it_decided_and_points_to_the_judged_example(tmp_path):
    collected, config = cpu_run(tmp_path, processes=1)
    report = render(collected, config, PUBLISHED)
    line = summary_line(report, "- **Decided in this run**")
    page = summary.context(Run(collected, config), PUBLISHED)
    assert f"{page['decided']['answered']} of the {page['decided']['asked']} questions above" in line
    assert page["decided"]["answered"] < page["decided"]["asked"]
    assert summary.JUDGED_EXAMPLE["command"] in line and summary.JUDGED_EXAMPLE["report"] in line
    # The example it points to is in the checkout and decides every question its summary asks.
    example = ROOT / summary.JUDGED_EXAMPLE["report"]
    assert (ROOT / summary.JUDGED_EXAMPLE["command"].split("--root ")[1]).is_dir()
    decided = summary_line(example.read_text(), "- **Decided in this run**")
    asked = re.search(r"(\d+) of the (\d+) questions", decided)
    assert asked and asked[1] == asked[2] and "examples/h200" not in decided


def test_the_numbers_not_measured_in_this_run_are_named(tmp_path):
    collected, config = cpu_run(tmp_path)
    report = render(collected, config, PUBLISHED)
    opening = first_screen(report).split("\n\n")[1]
    fit = Run(collected, config).rule.fit
    assert f"from the calibration `{fit}` (fitted on other hardware)" in opening  # a CPU is not the fit's hardware
    assert f"from the calibration `{fit}`" in report.split("How precise is this run")[-1]  # the values it names


def validator(name: str) -> jsonschema.Validator:
    schema = json.loads((SCHEMA_DIR / name).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("processes", [1, 3])
def test_the_run_summary_is_data_valid_against_its_schema_and_agrees_with_the_page(tmp_path, processes):
    collected, config = cpu_run(tmp_path, processes)
    found = findings.run_summary(collected, config, PUBLISHED)
    validator("run_summary.schema.json").validate(found)
    shown_cells = {(r["variant"], r["shape_id"]) for r in shown(collected)["results"]}
    assert {(f["variant"], f["shape_id"]) for f in found["fastest"]} == shown_cells  # every table row's shape
    for item in found["fastest"]:
        result = next(r for r in shown(collected)["results"]
                      if (r["variant"], r["shape_id"]) == (item["variant"], item["shape_id"]))
        means = {n: b["wall_mean_ms"] for n, b in result["backends"].items() if b["status"] == "ok"}
        assert item["fastest"] == "sdpa" and item["ratio"] == pytest.approx(means[item["next"]] / means["sdpa"])
        assert item["measured_in"] == {"default": ["sdpa", "native"]}
    assert found["decided"] == {k: summary.context(Run(collected, config), PUBLISHED)["decided"][k]
                                for k in ("asked", "answered")}
    assert [c["id"] for c in found["claims"]] == [c["id"] for c in PUBLISHED["claims"]]
    assert all(c["outcome"] == "cannot tell" and c["cause"] == "untestable here" for c in found["claims"])


def test_the_compare_summary_counts_the_pages_verdicts_and_is_valid():
    comparison = json.loads((ROOT / "examples" / "h200" / "compare" / "compare.json").read_text())
    found = findings.compare_summary(comparison)
    validator("compare_summary.schema.json").validate(found)
    page = compare_summary.compare_context(comparison)
    assert found["pair"]["counts"] == page["counts"] and sum(found["pair"]["counts"].values()) == found["pair"]["cells"]
    assert len(found["flagged"]) == len(comparison["flags"])
    broken = {**found, "pair": {**found["pair"], "cells": -1}}
    with pytest.raises(jsonschema.ValidationError):  # the schema is not vacuous
        validator("compare_summary.schema.json").validate(broken)


def test_the_csv_has_a_row_for_every_row_the_tables_show(tmp_path):
    collected, _ = cpu_run(tmp_path)
    rows = list(csv.DictReader(io.StringIO(results_csv(collected))))
    expected = {(r["variant"], r["shape_id"], n) for r in shown(collected)["results"] for n in r["backends"]}
    assert {(r["variant"], r["shape_id"], r["backend"]) for r in rows} == expected and len(rows) == len(expected)
    tuned_sdpa = [r for r in rows if r["variant"] == "tuned" and r["backend"] == "sdpa"]
    assert tuned_sdpa and all(r["measured_in"] == "default" and r["status"] == "ok" for r in tuned_sdpa)
    assert all(r["measured_in"] == "" for r in rows if r["variant"] == "default")  # measured in its own jobs


def test_the_compare_page_states_one_source_per_judged_pair(tmp_path):
    """Two CPU runs archived: the page states the pair's kind, the smallest change it can see and
    the noise no run sees by itself once, with its one source (the fallback fit, fitted on other
    hardware); no value estimated from the very pair judged."""
    import subprocess
    import sys

    from fabench.report.compare_markdown import render_markdown
    from fabench.results.archive_read import list_entries
    from fabench.results.compare import compare_entries
    from support.runs import make_run

    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    for seed, run in enumerate(("a", "b")):
        run_dir = make_run(tmp_path / "results", run, versions=CPU, seed=seed)
        done = subprocess.run([sys.executable, "-m", "fabench.cli", "archive", "store", str(run_dir),
                               "--root", str(tmp_path / "archive")], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    comparison = compare_entries(list_entries(tmp_path / "archive"), Rule.of({}))
    page = render_markdown(comparison)
    head = page.split("## Summary")[0]
    (pair,) = comparison["pairs"]
    lines = [line for line in head.splitlines() if line.startswith("- ") and "cannot be seen" in line]
    assert len(lines) == 1 and f"changes below {pair['margin']:.2%} cannot be seen" in lines[0]
    assert "fitted on other hardware" in lines[0] and "archive's" not in head and "Uncalibrated" not in head
    assert not re.search(r"between-(run|card) noise of \d", head)  # no second value from elsewhere


def test_the_runs_terminal_line_is_its_findings_from_results_json(tmp_path):
    """The line a workflow ends with (fabench.report.last_lines): from results.json's summary, short,
    the same counts the summary holds."""
    from fabench.report.last_lines import run_line

    collected, config = cpu_run(tmp_path / "jobs", processes=1)
    collected["summary"] = findings.run_summary(collected, config, PUBLISHED)
    run_dir = tmp_path / "results" / "cpu"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps(collected))
    (run_dir / "report.md").write_text(render(collected, config, PUBLISHED))
    line = run_line(run_dir)
    decided = collected["summary"]["decided"]
    assert line.startswith("run cpu: 10 jobs, cells ")
    assert (f"; fastest by its median: sdpa at 5 of 5 shapes in tuned's table, 0 judged ahead beyond the noise; "
            f"decided {decided['answered']} of {decided['asked']} questions; report: {run_dir / 'report.md'}") in line
    assert len(line.split("; report: ")[0]) < 200 and "\n" not in line  # short before the paths


def test_the_workflows_last_lines_import_no_drawing_library_unless_a_comparison_was_written(tmp_path):
    """The Snakefile's onsuccess runs in Snakemake's own process after the report is written: it
    imported matplotlib (1.2 s on the CPU host) for a comparison's line a run does not have. A
    comparison written since the workflow started still gets its line."""
    probe = ("import sys; from fabench.report.last_lines import finished_lines; "
             "lines = finished_lines([], 0.0, results_root=__import__('pathlib').Path('results')); "
             "print('matplotlib' in sys.modules, lines)")
    (tmp_path / "compare").mkdir()
    quiet = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "False []", quiet.stdout + quiet.stderr
    (tmp_path / "compare" / "compare.json").write_text(json.dumps({"entries": [{"id": "cpu/0001-x"}]}))
    told = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert told.returncode == 0, told.stderr
    assert "compare: 1 archived run: nothing to compare it with yet; see compare/compare.md (compare/compare.html)" \
        in told.stdout, told.stdout
