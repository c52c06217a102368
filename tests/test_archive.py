"""The archive, the cross-version comparison and the pictures, on real files.

Runs are built by support.runs (result format v2: trials and their statistics); the CLI runs as
a real process. Nothing here runs a benchmark.
"""

from __future__ import annotations

import csv
import re
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fabench.results.published import load_published
from fabench.results.archive_layout import ArchiveError
from fabench.results.archive_read import list_entries, load_entry, natural_key, resolve_entry, verify_entry
from fabench.results.archive_run_check import IncompleteRun
from fabench.results.archive_store import AlreadyArchived, archive_run, store_entry
from fabench.analysis.policy import Code, Rule, judge as compare_cell
from fabench.results.compare import V1_REASON, compare_entries, published_flags
from fabench.report.compare_markdown import render_markdown
from support.runs import (CPU, CUDA_13_0, ROCM_6_4, ROCM_7_0, edit_backend, make_run, read_results,
                          v2_schema, write_results, write_v2_schema)

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_YAML = REPO / "report" / "published" / "mi300x-2025-12-30.yaml"
SCHEMA = v2_schema()
OLD, NEW = "rocm-6.4.43482", "rocm-7.0.51831"
CELL = ("tuned", "b4-s1024-h8-d256", "triton")
RULE = Rule.of({})  # the policy's defaults, what a config without `comparison` gets


def archive(run_dir: Path, root: Path, **kwargs) -> Path:
    return archive_run(run_dir, root, schema=SCHEMA, **kwargs)


@pytest.fixture
def two_runs(tmp_path):
    """An MI300X run on ROCm 6.4 and one on ROCm 7.0, not yet archived."""
    old = make_run(tmp_path / "results-a", "mi300x", versions=ROCM_6_4, seed=1)
    new = make_run(tmp_path / "results-b", "mi300x", versions=ROCM_7_0, seed=2)
    return old, new, tmp_path / "archive"


def compared(old: Path, new: Path, root: Path, **kwargs) -> dict:
    archive(old, root)
    archive(new, root)
    return compare_entries(list_entries(root), kwargs.pop("rule", RULE), **kwargs)


def row(comparison: dict, variant: str, shape: str, backend: str) -> dict:
    return next(r for r in comparison["rows"]
                if (r["variant"], r["shape_id"], r["backend"]) == (variant, shape, backend))


def flags_of(comparison: dict, kind: str) -> list[tuple]:
    return sorted({(f["variant"], f["shape_id"], f["backend"]) for f in comparison["flags"] if f["code"] == kind})


# ---------------------------------------------------------------- storing

def test_entry_named_by_platform_version_with_checksums_and_record(two_runs):
    old, _, root = two_runs
    entry = archive(old, root)
    assert entry.parent == root / OLD and entry.name.startswith("0001-")
    stored = sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file())
    assert stored == ["SHA256SUMS", "aiter-config/default.json", "aiter-config/default.meta.json",
                      "aiter-config/tuned.json", "aiter-config/tuned.meta.json", "config.json", "record.json",
                      "report.md", "results.json"]
    check = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=entry, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    record = json.loads((entry / "record.json").read_text())
    assert record["run"] == "mi300x" and record["label"] == OLD and record["run_id"] == entry.name
    assert record["device"] == "AMD Instinct MI300X" and record["platform"] == "rocm"
    assert record["versions"]["hip"] == "6.4.43482" and record["versions"]["aiter_commit"] == ROCM_6_4["aiter_commit"]
    assert record["versions"]["torch"] == "2.7.1+rocm6.4" and record["versions"]["triton"] == "3.3.1"
    assert record["config_sha256"] and record["project_commit"] and record["started"] and record["finished"]
    assert record["jobs"] == 10 and entry.name.endswith(record["measurements_sha256"][:8])
    assert verify_entry(entry) == []


@pytest.mark.parametrize("versions, label", [(CUDA_13_0, "cuda-13.0"), (CPU, "cpu-torch2.13.0+cpu")])
def test_label_on_cuda_and_cpu(tmp_path, versions, label):
    entry = archive(make_run(tmp_path / "results", "r", versions=versions), tmp_path / "archive")
    assert entry.parent.name == label


def test_plots_and_extra_files_are_kept(two_runs, tmp_path):
    old, _, root = two_runs
    (old / "plots").mkdir()
    (old / "plots" / "latency.png").write_bytes(b"\x89PNG fake")
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"tag": "fabench:3f2a9c1b"}')
    entry = archive(old, root, extra_files={"image-manifest.json": manifest})
    assert (entry / "plots" / "latency.png").read_bytes() == b"\x89PNG fake"
    assert (entry / "image-manifest.json").read_text() == manifest.read_text()
    assert verify_entry(entry) == []


def test_archiving_a_run_twice_is_refused_and_numbers_are_never_reused(two_runs, tmp_path):
    old, _, root = two_runs
    first = archive(old, root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(AlreadyArchived, match=f"already archived as {OLD}/{first.name}"):
        archive(old, root)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written
    again = make_run(tmp_path / "again", "rocm64", versions=ROCM_6_4, seed=99)  # another run, same label
    second = archive(again, root)
    assert (first.name[:4], second.name[:4]) == ("0001", "0002")
    shutil.rmtree(second)
    assert archive(again, root).name.startswith("0003-")  # a deleted entry's number is not given again


def test_concurrent_archiving_never_shares_a_number(two_runs, tmp_path):
    _, _, root = two_runs
    runs = [make_run(tmp_path / f"r{i}", "rocm64", versions=ROCM_6_4, seed=100 + i) for i in range(6)]
    made, errors = [], []

    def one(run):
        try:
            made.append(archive(run, root).name)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=one, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(n[:4] for n in made) == [f"{i:04d}" for i in range(1, 7)]
    assert not [p for p in (root / OLD).iterdir() if p.name.startswith(".staging")]


def test_writing_into_an_existing_entry_is_refused_and_changes_nothing(two_runs):
    old, _, root = two_runs
    entry = archive(old, root)
    before = {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()}
    with pytest.raises(ArchiveError, match="exists: an entry is written once"):
        store_entry(entry, {"results.json": b"{}", "extra.txt": b"x"})
    assert {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()} == before
    assert verify_entry(entry) == []


@pytest.mark.parametrize("damage, reason", [
    (lambda d: (d / "results.json").unlink(), "results.json missing"),
    (lambda d: (d / "report.md").unlink(), "report.md missing"),
    (lambda d: edit_results(d, lambda c: c["results"][0]["backends"]["ck"].update(status="broken")),
     "results.json $.results[0].backends.ck.status: 'broken' is not one of"),
    (lambda d: edit_results(d, lambda c: c["results"].pop(3)), "1 job(s) missing from results.json: default/b4-s4096-h8-d256"),
    (lambda d: (d / "results.json").write_text("{"), "results.json: not readable JSON"),
])
def test_incomplete_run_is_refused_with_the_reason(two_runs, damage, reason):
    old, _, root = two_runs
    damage(old)
    with pytest.raises(IncompleteRun) as info:
        archive(old, root)
    assert reason in str(info.value)
    assert not (root / OLD).exists() or not [p for p in (root / OLD).iterdir() if not p.name.startswith(".")]


def test_expected_jobs_from_the_caller(two_runs):
    old, _, root = two_runs
    with pytest.raises(IncompleteRun, match="tuned/b4-s8192-h8-d256"):
        archive(old, root, expected_jobs={("tuned", "b4-s8192-h8-d256"), ("tuned", "b4-s512-h8-d256")})


def edit_results(run_dir: Path, change) -> None:
    collected = read_results(run_dir)
    change(collected)
    write_results(run_dir, collected)


def test_label_ordering_is_by_version():
    labels = ["rocm-7.0.1", "rocm-6.10.0", "rocm-6.4.3", "rocm-6.4.10"]
    assert sorted(labels, key=natural_key) == ["rocm-6.4.3", "rocm-6.4.10", "rocm-6.10.0", "rocm-7.0.1"]


# ---------------------------------------------------------------- integrity

def tamper_changed(entry: Path) -> str:
    path = entry / "results.json"
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[200] = ord("7") if data[200] != ord("7") else ord("8")
    path.write_bytes(bytes(data))
    return "results.json: changed"


def tamper_shortened(entry: Path) -> str:
    """A shorter file: an edit as likely as a cut, so it is "changed", never "truncated"."""
    path = entry / "report.md"
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes()[:10])
    return "report.md: changed (does not match its digest in SHA256SUMS; 10 bytes,"


def tamper_deleted(entry: Path) -> str:
    (entry / "aiter-config" / "tuned.json").unlink()
    return "aiter-config/tuned.json: missing"


def tamper_extra(entry: Path) -> str:
    (entry / "notes.txt").write_text("added later")
    return "notes.txt: extra file, not in SHA256SUMS"


@pytest.mark.parametrize("tamper", [tamper_changed, tamper_shortened, tamper_deleted, tamper_extra])
def test_tampered_entry_is_detected_naming_the_file_and_left_out(two_runs, tamper):
    old, new, root = two_runs
    archive(old, root)
    entry = archive(new, root)
    expected = tamper(entry)
    problems = verify_entry(entry)
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    listed = {e.id: e for e in list_entries(root)}
    assert not listed[f"{NEW}/{entry.name}"].ok
    comparison = compare_entries(listed.values(), RULE)
    assert [e["id"] for e in comparison["entries"]] == [f"{OLD}/{next((root / OLD).glob('0*')).name}"]
    assert comparison["left_out"][0]["id"] == f"{NEW}/{entry.name}"
    markdown = render_markdown(comparison)
    assert "## Left out" in markdown and expected in markdown


def test_missing_checksums_make_an_entry_broken(two_runs):
    old, _, root = two_runs
    entry = archive(old, root)
    (entry / "SHA256SUMS").unlink()
    assert verify_entry(entry) == ["SHA256SUMS: missing (nothing in the entry can be checked)"]


# ---------------------------------------------------------------- comparing

def test_two_labels_compare_with_the_right_rows(two_runs):
    old, new, root = two_runs
    comparison = compared(old, new, root)
    assert [e["label"] for e in comparison["entries"]] == [OLD, NEW]
    assert comparison["baseline"] == comparison["entries"][0]["id"]
    keys = [(r["variant"], r["shape_id"], r["backend"]) for r in comparison["rows"]]
    # every variant x shape x backend that ran; other platforms' backends are not rows
    assert len(keys) == 2 * 5 * 3 and {k[2] for k in keys} == {"native", "ck", "triton"}
    assert keys[:4] == [("default", "b4-s512-h8-d256", "native"), ("default", "b4-s512-h8-d256", "ck"),
                        ("default", "b4-s512-h8-d256", "triton"), ("default", "b4-s1024-h8-d256", "native")]
    assert keys[12][1] == "b4-s1024-h8-d64"  # the other head_dim after the main one
    cells = row(comparison, *CELL)["cells"]
    assert cells[1]["vs_previous"]["entry"] == cells[0]["entry"] and cells[1]["vs_previous"]["metric"] == "device_ms"
    assert cells[1]["vs_baseline"] is None  # previous is the baseline
    assert comparison["flags"] == []
    assert "beyond the two runs' noise" in render_markdown(comparison)


def test_regression_beyond_the_noise_is_flagged(two_runs):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.12)
    comparison = compared(old, new, root)
    assert flags_of(comparison, "regression") == [CELL]
    found = row(comparison, *CELL)["cells"][1]["vs_previous"]
    assert found["code"] == Code.REGRESSION and 1.10 < found["ratio"] < 1.14 and found["interval"][0] > 1.0135
    markdown = render_markdown(comparison)
    assert "**Regressions** (1):" in markdown and "**regression**" in markdown


def test_improvement_is_flagged(two_runs):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=0.8)
    assert flags_of(compared(old, new, root), "improvement") == [CELL]


def test_same_change_inside_the_noise_is_not_flagged(two_runs):
    old, new, root = two_runs
    edit_backend(old, *CELL, noise=0.30, seed=3)
    edit_backend(new, *CELL, factor=1.12, noise=0.30, seed=4)
    comparison = compared(old, new, root)
    found = row(comparison, *CELL)["cells"][1]["vs_previous"]
    # +12% injected under ±30% trial noise: the verdict cannot tell, and says why.
    assert found["verdict"] == "cannot tell" and found["code"] in (Code.NOISY, Code.UNSTABLE) and found["why"]
    assert flags_of(comparison, "regression") == []


def test_small_change_with_tight_intervals_is_flagged_and_a_rerun_is_the_same(two_runs):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.03)  # the fixture's noise is 0.4%: a 3% step is beyond it
    comparison = compared(old, new, root)
    found = row(comparison, *CELL)["cells"][1]["vs_previous"]
    assert found["code"] == Code.REGRESSION and found["detectable"] < 0.03
    untouched = row(comparison, "default", CELL[1], "native")["cells"][1]["vs_previous"]
    assert untouched["verdict"] == "same" and untouched["code"] == Code.SAME
    assert 1 / 1.0135 < untouched["interval"][0] < untouched["interval"][1] < 1.0135


def test_a_real_change_below_the_margin_is_named_and_is_no_regression(two_runs):
    old, new, root = two_runs
    # beyond the fixture's 0.4% noise and the unseen noise of runs whose cards are not recorded
    # (judged as of two hosts), within that kind of pair's margin
    edit_backend(new, *CELL, factor=1.02)
    comparison = compared(old, new, root)
    found = row(comparison, *CELL)["cells"][1]["vs_previous"]
    assert found["verdict"] == "same" and found["code"] == Code.SMALL_CHANGE and found["interval"][0] > 1
    assert flags_of(comparison, "regression") == []


def test_the_margin_is_configurable(two_runs):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.03)
    assert flags_of(compared(old, new, root, rule=Rule(margin=0.05)), "regression") == []
    assert flags_of(compare_entries(list_entries(root), Rule(margin=0.02)), "regression") == [CELL]


def test_another_experiment_is_named_and_judged_nowhere(two_runs):
    old, new, root = two_runs
    collected = read_results(new)
    for result in collected["results"]:
        result["tolerance"] = {**result["tolerance"], "max_abs_err": 0.5}
    write_results(new, collected)
    edit_backend(new, *CELL, factor=1.12)
    comparison = compared(old, new, root)
    assert flags_of(comparison, "regression") == [] and flags_of(comparison, "other_experiment")
    found = row(comparison, *CELL)["cells"][1]["vs_previous"]
    assert found["code"] == Code.OTHER_EXPERIMENT and found["values"]["differences"] == ["tolerance.max_abs_err: 0.02 -> 0.5"]
    assert comparison["experiments"][0]["differences"] == ["tolerance.max_abs_err: 0.02 -> 0.5"]


def test_unstable_cell_is_never_flagged(two_runs):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.5, unstable_reason="GPU clock throttled during trial 3")
    comparison = compared(old, new, root)
    assert flags_of(comparison, "regression") == []
    assert flags_of(comparison, "unstable") == [CELL]
    unstable = row(comparison, *CELL)["cells"][1]["vs_previous"]["values"]["unstable"]
    assert list(unstable.values()) == ["GPU clock throttled during trial 3"]


def test_ok_to_failed_is_a_regression_with_the_reason_and_back_an_improvement(tmp_path):
    runs = [make_run(tmp_path / f"r{i}", "mi300x", versions={**ROCM_7_0, "hip": f"7.{i}.0"}, seed=i) for i in range(3)]
    edit_backend(runs[1], "default", "b4-s4096-h8-d256", "ck", status="failed", failure_kind="oom",
                 reason="HIP out of memory. Tried to allocate 2.00 GiB")
    root = tmp_path / "archive"
    for run in runs:
        archive(run, root)
    comparison = compare_entries(list_entries(root), RULE)
    cells = row(comparison, "default", "b4-s4096-h8-d256", "ck")["cells"]
    assert cells[1]["vs_previous"]["code"] == Code.REGRESSION
    assert cells[1]["vs_previous"]["values"]["new"] == {"status": "failed", "failure_kind": "oom",
                                                        "reason": "HIP out of memory. Tried to allocate 2.00 GiB"}
    assert cells[2]["vs_previous"]["code"] == Code.IMPROVEMENT
    assert cells[2]["vs_previous"]["values"]["old"]["status"] == "failed"
    assert cells[2]["vs_baseline"]["code"] == Code.SAME  # back where it was in the baseline


def test_baseline_entry_is_compared_with_every_later_one(tmp_path):
    runs = [make_run(tmp_path / f"r{i}", "mi300x", versions={**ROCM_7_0, "hip": f"7.{i}.0"}, seed=i) for i in range(3)]
    edit_backend(runs[1], *CELL, factor=1.04)
    edit_backend(runs[2], *CELL, factor=1.04 * 1.001)  # +4% on the first step only
    root = tmp_path / "archive"
    for run in runs:
        archive(run, root)
    comparison = compare_entries(list_entries(root), RULE)
    cells = row(comparison, *CELL)["cells"]
    assert cells[2]["vs_previous"]["code"] == Code.SAME
    assert cells[2]["vs_baseline"]["code"] == Code.REGRESSION and cells[2]["vs_baseline"]["entry"] == "rocm-7.0.0/" + \
        next((root / "rocm-7.0.0").glob("0*")).name
    middle = comparison["entries"][1]["id"]
    rebased = compare_entries(list_entries(root), RULE, baseline=middle)
    assert row(rebased, *CELL)["cells"][0]["vs_baseline"]["entry"] == middle


def test_device_time_preferred_wall_time_otherwise():
    noise = {"sigma": 0.002, "df": 16, "replicates": 2}
    stat = {"median": 1.0, "noise": noise}
    ok = {"status": "ok", "stats": {"stable": True, "wall_mean_ms": stat, "device_ms": stat}}
    slower = {"status": "ok", "stats": {**ok["stats"], "device_ms": {"median": 1.2, "noise": noise}}}
    assert compare_cell(ok, slower, RULE)["metric"] == "device_ms"
    without = {"status": "ok", "stats": {**slower["stats"], "device_ms": None}}
    assert compare_cell(ok, without, RULE)["metric"] == "wall_mean_ms"


def test_schema_v1_entry_is_refused_with_the_reason(tmp_path):
    run = tmp_path / "h200"
    shutil.copytree(REPO / "tests" / "fixtures" / "v1-run", run)  # an H200 run archived with result schema 1
    (run / "report.md").write_text("# report\n")
    root = tmp_path / "archive"
    v1 = archive_run(run, root)  # a valid v1 run is archived as it is
    assert v1.parent.name == "cuda-13.0"
    v2 = archive(make_run(tmp_path / "r", "h200", versions=CUDA_13_0), root)
    comparison = compare_entries(list_entries(root), RULE)
    assert comparison["left_out"] == [{"id": f"cuda-13.0/{v1.name}", "path": str(v1), "problems": [V1_REASON]}]
    assert [e["id"] for e in comparison["entries"]] == [f"cuda-13.0/{v2.name}"]
    assert "archived with schema v1: no trials" in render_markdown(comparison)


def test_published_vs_reproduced(two_runs):
    _, new, _ = two_runs
    edit_backend(new, "tuned", "b4-s4096-h8-d256", "triton", factor=1.2)
    results = read_results(new)["results"]
    flags = {(f["variant"], f["shape_id"], f["backend"]): f
             for f in published_flags(results, load_published(PUBLISHED_YAML), RULE)}
    assert flags[("tuned", "b4-s4096-h8-d256", "triton")]["flag"] == "slower"
    slower = flags[("tuned", "b4-s4096-h8-d256", "triton")]
    assert slower["inside"] is False and not slower["interval"][0] <= slower["published_ms"] <= slower["interval"][1]
    assert flags[("tuned", "b4-s512-h8-d256", "ck")]["flag"] == "matches"
    assert flags[("default", "b4-s1024-h8-d256", "native")]["flag"] == "matches"


def test_published_section_skips_other_hardware(tmp_path):
    root = tmp_path / "archive"
    archive(make_run(tmp_path / "r", "h200", versions=CUDA_13_0), root)
    comparison = compare_entries(list_entries(root), RULE, published=load_published(PUBLISHED_YAML))
    assert "published on AMD Instinct MI300X" in comparison["published"]["entries"][0]["skipped"]
    assert "Only one run: nothing to compare" in render_markdown(comparison)


def test_resolve_entry_forms(two_runs, tmp_path):
    old, _, root = two_runs
    other = make_run(tmp_path / "other", "rocm64", versions=ROCM_6_4, seed=7)
    first, second = archive(old, root), archive(other, root)
    assert resolve_entry(f"{OLD}/{first.name}", root) == first
    assert resolve_entry(f"{OLD}/2", root) == second
    assert resolve_entry(OLD, root) == second
    assert resolve_entry(str(first), root) == first
    with pytest.raises(ArchiveError, match="no such archive entry"):
        resolve_entry("rocm-9.9", root)
    assert load_entry(first).ok


# ---------------------------------------------------------------- pictures

def is_png(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_run_and_version_plots_are_drawn(two_runs, tmp_path):
    from fabench.report.latency_plot import latency_png
    from fabench.report.plots import write_run_plots, write_version_plots
    from fabench.report.speedup_plot import speedup_png

    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.12)
    edit_backend(new, "default", "b4-s2048-h8-d256", "ck", status="failed", failure_kind="oom", reason="OOM")
    collected = read_results(new)
    assert is_png(latency_png(collected)) and is_png(speedup_png(collected, RULE))
    paths = write_run_plots(collected, tmp_path / "plots", RULE)
    paths += write_version_plots(compared(old, new, root), tmp_path / "plots")
    assert [p.name for p in paths] == ["latency.png", "speedup.png", "roofline.png", "versions-default.png",
                                       "versions-tuned.png"]
    assert all(is_png(p.read_bytes()) for p in paths)


def test_plots_of_a_cpu_run_without_device_time(tmp_path):
    from fabench.report.latency_plot import latency_png
    from fabench.report.speedup_plot import speedup_png

    collected = read_results(make_run(tmp_path / "r", "cpu", versions=CPU))
    assert is_png(latency_png(collected)) and is_png(speedup_png(collected, RULE))


# ---------------------------------------------------------------- the command line, as a process

def fabench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_store_list_verify_compare(two_runs, tmp_path):
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.12)
    schema = str(write_v2_schema(tmp_path / "schema.json"))
    stored = [fabench("archive", "store", str(run), "--root", str(root), "--schema", schema, cwd=tmp_path)
              for run in (old, new)]
    assert [p.returncode for p in stored] == [0, 0], [p.stderr for p in stored]
    old_entry, new_entry = (Path(p.stdout.strip()) for p in stored)

    listing = fabench("archive", "list", "--root", str(root), cwd=tmp_path)
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:3] == ["LABEL", "RUN-ID", "DATE"]
    assert lines[1].split()[:2] == [OLD, old_entry.name] and lines[1].endswith("  ok")
    assert "AMD Instinct MI300X" in lines[2] and "2026-01-05 10:00" in lines[2]

    assert fabench("archive", "verify", f"{NEW}/{new_entry.name}", "--root", str(root), cwd=tmp_path).returncode == 0

    md, js, plots = tmp_path / "out" / "compare.md", tmp_path / "out" / "compare.json", tmp_path / "out" / "plots"
    (tmp_path / "out").mkdir()  # outputs never create their parent folders
    done = fabench("compare", OLD, f"{NEW}/1", "--root", str(root), "--margin", "5%", "--out-md", str(md),
                   "--out-json", str(js), "--plots", str(plots), "--published",
                   str(REPO / "report" / "published" / "mi300x-2025-12-30.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    comparison = json.loads(js.read_text())
    assert flags_of(comparison, "regression") == [CELL]
    assert "1 regression flag(s)" in done.stderr
    assert "## Published vs reproduced" in md.read_text()
    assert all(is_png(p.read_bytes()) for p in plots.glob("*.png")) and len(list(plots.glob("*.png"))) == 2

    # all entries by default, Markdown on standard output
    default = fabench("compare", "--root", str(root), cwd=tmp_path)
    assert default.returncode == 0 and default.stdout.startswith("# Flash attention across versions")

    # For CI: exit 3 on a regression when asked; one row per cell and entry as CSV, for pandas.
    table = tmp_path / "out" / "compare.csv"
    strict = fabench("compare", OLD, f"{NEW}/1", "--root", str(root), "--margin", "5%", "--fail-on", "regression",
                     "--out-md", str(md), "--out-csv", str(table), cwd=tmp_path)
    assert strict.returncode == 3 and "failing on 1 regression flag(s)" in strict.stderr
    rows = list(csv.DictReader(table.open()))
    assert {r["entry"] for r in rows} == {e["id"] for e in comparison["entries"]}
    flagged = [r for r in rows if r["previous_code"] == "regression"]
    assert [(r["variant"], r["shape_id"], r["backend"]) for r in flagged] == [CELL]
    assert float(flagged[0]["median_ms"]) > 0 and float(flagged[0]["previous_ratio"]) > 1.05
    calm = fabench("compare", OLD, "--root", str(root), "--fail-on", "regression", cwd=tmp_path)
    assert calm.returncode == 0, calm.stderr


def test_cli_integrity_problems_exit_1_naming_the_file(two_runs, tmp_path):
    old, new, root = two_runs
    archive(old, root)
    entry = archive(new, root)
    tamper_shortened(entry)
    spec = f"{NEW}/{entry.name}"
    verify = fabench("archive", "verify", spec, "--root", str(root), cwd=tmp_path)
    assert verify.returncode == 1 and f"{spec}: report.md: changed" in verify.stdout
    listing = fabench("archive", "list", "--root", str(root), cwd=tmp_path)
    assert listing.returncode == 1 and "broken: report.md: changed" in listing.stdout
    done = fabench("compare", "--root", str(root), "--out-md", str(tmp_path / "c.md"), cwd=tmp_path)
    assert done.returncode == 1 and f"left out {spec}: report.md: changed" in done.stderr
    assert "## Left out" in (tmp_path / "c.md").read_text()


def test_cli_refuses_an_incomplete_run_with_exit_1(two_runs, tmp_path):
    old, _, root = two_runs
    (old / "report.md").unlink()
    done = fabench("archive", "store", str(old), "--root", str(root), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("fabench archive store: refused:") and "report.md missing" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["compare", "--margin", "2"], "give a fraction between 0 and 1"),
    (["compare", "--threshold", "0.05"], "unrecognized arguments: --threshold"),
    (["compare", "nope/0001", "--root", "archive"], "nope/0001: no such archive entry"),
    (["archive", "verify", "rocm-1.0"], "rocm-1.0: no such archive entry"),
    (["archive", "store", "results/none"], "results/none: no such run directory"),
    (["archive", "list", "--root", "missing"], "missing: no such archive folder"),
    (["archive"], "the following arguments are required"),
])
def test_cli_usage_errors_exit_2_on_one_line(tmp_path, args, message):
    done = fabench(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_console_script_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert 'fabench = "fabench.cli:main"' in text and '"matplotlib==' in text




def test_the_record_and_the_comparison_name_the_card_where_the_results_do(tmp_path):
    """Runs on two cards of one model differ more than runs on one card: the comparison says which
    card each run measured on, and shows no GPU column for archives that never recorded it."""
    root = tmp_path / "archive"
    other_card = {**CUDA_13_0, "gpu_uuid": "GPU-0f0e0d0c-0000-4000-8000-000000000001"}
    first = archive(make_run(tmp_path / "a", "h200-a", versions=CUDA_13_0), root)
    second = archive(make_run(tmp_path / "b", "h200-b", versions=other_card, seed=3), root)
    assert json.loads((first / "record.json").read_text())["gpu"] == CUDA_13_0["gpu_uuid"]
    markdown = render_markdown(compare_entries(list_entries(root), RULE))
    header = next(line for line in markdown.splitlines() if line.startswith("| Entry |"))
    assert "| Device | GPU |" in header
    assert CUDA_13_0["gpu_uuid"] in markdown and other_card["gpu_uuid"] in markdown

    rocm_root = tmp_path / "rocm-archive"
    archive(make_run(tmp_path / "c", "mi300x", versions=ROCM_7_0), rocm_root)
    rocm_record = json.loads(next(rocm_root.glob("*/*/record.json")).read_text())
    assert rocm_record["gpu"] is None
    header = next(line for line in render_markdown(compare_entries(list_entries(rocm_root), RULE)).splitlines()
                  if line.startswith("| Entry |"))
    assert "GPU" not in header.split("|")[5]


def test_cli_compare_ends_with_one_result_line_and_takes_the_null_device(two_runs, tmp_path):
    """A CI log shows what was judged, also when the Markdown goes to a file or nowhere (issue 40):
    the newest two runs, the verdicts on their cells, where the page is."""
    old, new, root = two_runs
    edit_backend(new, *CELL, factor=1.12)
    for run in (old, new):
        archive(run, root)
    page = tmp_path / "compare.md"
    told = fabench("compare", "--root", str(root), "--margin", "5%", "--out-md", str(page), cwd=tmp_path)
    assert told.returncode == 0 and told.stdout == "", told.stderr
    [line] = [line for line in told.stderr.splitlines() if "archived runs;" in line]
    assert re.fullmatch(rf"fabench compare: 2 archived runs; {NEW}/0001-\w+ against {OLD}/0001-\w+: \d+ cells "
                        rf"judged: 1 regression, .*; see {re.escape(str(page))}", line), line
    quiet = fabench("compare", "--root", str(root), "--margin", "5%", "--out-md", os.devnull, "--out-json", os.devnull,
                    cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stderr
    assert "1 regression" in quiet.stderr and "see " not in quiet.stderr


def test_the_compare_summary_keeps_the_judged_pair_and_names_software_a_label_hides(tmp_path):
    """Issue 40: a third run of other shapes (the docs' FlexAttention recipe) joined the archive and
    the summary judged it against the second, 0 cells; a package installed between two runs of one
    label went unsaid. Now the summary keeps the newest pair that shares cells, names the run it
    passed over, and says what software differs under the label."""
    root = tmp_path / "archive"
    first = make_run(tmp_path / "a", "mi300x", versions=ROCM_6_4, seed=1)
    second = make_run(tmp_path / "b", "mi300x", versions={**ROCM_6_4, "triton": "3.6.0"}, seed=2)
    edit_backend(second, *CELL, factor=1.12)
    other = make_run(tmp_path / "c", "mi300x", versions={**ROCM_6_4, "triton": "3.6.0"}, seed=3,
                     shapes=[{"batch": 1, "seq": 256, "heads": 4, "head_dim": 64}])
    ids = [archive(run, root, label="one").name for run in (first, second, other)]
    comparison = compare_entries(list_entries(root), Rule.of({"comparison": {"margin": 0.05}}))
    markdown = render_markdown(comparison)
    summary = markdown.split("## Summary", 1)[1].split("## Runs", 1)[0]
    assert f"`one/{ids[1]}` against `one/{ids[0]}`" in summary and "1 regression" in summary, summary
    assert f"**Not judged against an earlier run**: `one/{ids[2]}`" in summary, summary
    assert "**Software differs under one label** `one`" in summary and "triton 3.3.1 → 3.6.0 → 3.6.0" in summary
    from fabench.report.compare_outputs import result_line
    assert f"one/{ids[1]} against one/{ids[0]}" in result_line(comparison)
    assert "label one holds runs of other software (triton 3.3.1 -> 3.6.0 -> 3.6.0)" in result_line(comparison)


def test_compare_names_the_command_that_stores_a_run_only_where_it_would(tmp_path):
    """Issue 40 (the tester's words): compare told the user `snakemake archive` stores a run that
    `snakemake archive` refuses. Each line now says what the store itself would do with the run."""
    from fabench.results.unarchived import STORE_COMMAND, store_unarchived, unarchived_lines

    results, root = tmp_path / "results", tmp_path / "archive"

    def run_in(name: str, runtime: str, seed: int) -> Path:
        run_dir = make_run(results, name, versions=ROCM_6_4, seed=seed)
        collected = read_results(run_dir)
        for result in collected["results"]:
            result["provenance"]["runtime"] = runtime
        write_results(run_dir, collected)
        return run_dir

    run_in("plain", "local", 1)
    run_in("boxed", "docker", 2)
    broken = run_in("broken", "local", 3)
    next((broken / "tuned").glob("*.json")).unlink()
    lines = {line.split(" ", 1)[0]: line for line in unarchived_lines(results, root)}
    assert lines[str(results / "plain")].endswith(f"`{STORE_COMMAND}` stores it")
    assert f"`{STORE_COMMAND}` does not store" in lines[str(results / "boxed")]
    assert "cannot be stored as it is" in lines[str(results / "broken")] and "missing" in lines[str(results / "broken")]
    # what the store then does agrees with each line
    outcome = {stored.run_dir.name: stored for stored in store_unarchived(results, root, schema=SCHEMA)}
    assert outcome["plain"].entry is not None
    assert outcome["boxed"].entry is None and outcome["broken"].entry is None
