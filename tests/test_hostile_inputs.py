"""Odd but legal input, and hostile input, at every door the command line and the tools open: one
clear line and the documented exit status, never a traceback, never a file written outside its
folder or through a link, and no gate that passes on no evidence.

Real processes and files: the archives are stored by `fabench archive store` from runs written by
support.runs (the analysis' own derivation of each figure), the compare runs through fabench's CLI.
Blind side: the far-apart CPU runs are scaled copies (tools/scale_run.py) rather than two runs on a
busy host; the comparison reads them the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabench.cli import common as cli  # the exit codes
from fabench.cli import main
from fabench.analysis import calibration
from fabench.report.wall_clock import SETTINGS, largest_item
from fabench.files import OutputPathError
from fabench.report.plots import version_plot_path
from fabench.results.archive_layout import RECORD, SUMS, content_sha256, sha256_hex, sums_text
from fabench.results.archive_read import verify_entry
from support.runs import CPU, CUDA_13_0, SHAPES, make_run
from workflow_util import REPO

ENTRY = REPO / "examples/h200/archive/cuda-13.0/0003-25eb76a9"  # a real run's entry, intact


def fabench(*args, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "fabench.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def last_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def reseal(entry: Path) -> None:
    """An entry edited by hand, its digests made to match again: it verifies (a hostile archive)."""
    files = {p.relative_to(entry).as_posix(): p.read_bytes() for p in entry.rglob("*")
             if p.is_file() and p.name not in (RECORD, SUMS)}
    record = json.loads((entry / RECORD).read_text())
    record["files"] = {name: {"bytes": len(data), "sha256": sha256_hex(data)} for name, data in sorted(files.items())}
    record["content_sha256"] = content_sha256({name: sha256_hex(data) for name, data in files.items()})
    (entry / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    (entry / SUMS).write_text(sums_text({**files, RECORD: (entry / RECORD).read_bytes()}))


def stored(tmp_path: Path, *runs: tuple[str, dict]) -> Path:
    """An archive under tmp_path/archive holding each run (name, make_run keywords), stored by the CLI."""
    for name, kwargs in runs:
        run_dir = make_run(tmp_path / "results", name, **kwargs)
        proc = fabench("archive", "store", run_dir, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    return tmp_path / "archive"


# ---------------------------------------------------------------- gates

@pytest.mark.parametrize("gate", [["--fail-on", "regression"], ["--min-answered", "0.5"],
                                  ["--fail-on", "regression", "--min-answered", "0"]])
def test_a_gate_over_runs_that_share_no_cell_fails_no_evidence_is_no_pass(tmp_path, gate):
    """Before: exit 0 ("0 cells judged: none") under --fail-on regression."""
    stored(tmp_path, ("one", {"versions": CUDA_13_0, "shapes": SHAPES[:2]}),
           ("two", {"versions": CUDA_13_0, "shapes": SHAPES[2:], "seed": 1}))
    proc = fabench("compare", *gate, "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == cli.TOO_FEW_ANSWERED, proc.stderr
    assert "the gate has no evidence and does not pass" in last_line(proc)


def test_without_a_gate_runs_that_share_no_cell_are_shown_and_pass(tmp_path):
    stored(tmp_path, ("one", {"versions": CUDA_13_0, "shapes": SHAPES[:2]}),
           ("two", {"versions": CUDA_13_0, "shapes": SHAPES[2:], "seed": 1}))
    proc = fabench("compare", "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == 0 and "0 cells judged" in last_line(proc)


def test_a_gate_over_a_first_run_alone_passes_nothing_to_compare_it_with_yet(tmp_path):
    stored(tmp_path, ("one", {"versions": CUDA_13_0}))
    proc = fabench("compare", "--fail-on", "regression", "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == 0 and "nothing to compare it with yet" in proc.stderr, proc.stderr


def test_a_gate_over_runs_of_one_experiment_still_passes(tmp_path):
    stored(tmp_path, ("one", {"versions": CUDA_13_0}), ("two", {"versions": CUDA_13_0, "seed": 1}))
    proc = fabench("compare", "--fail-on", "regression", "--min-answered", "0", "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("text, words", [
    ("comparison: []\n", "comparison: [] is not of type 'object'"),
    ("comparison: null\n", "comparison: None is not of type 'object'"),
    ("comparison: 5\n", "comparison: 5 is not of type 'object'"),
    ("comparison: {margin: 2}\n", "comparison.margin: 2 is greater than or equal to the maximum of 1"),
    ("comparison: {margin: .nan}\n", "comparison.margin: nan is not a finite number"),
    ("comparison: {unseen_noise: 'yes'}\n", "comparison.unseen_noise: 'yes' is not of type 'boolean'"),
    ("comparison: {surprise: 1}\n", "comparison: Additional properties are not allowed ('surprise' was unexpected)"),
])
def test_compare_configfile_checks_the_comparison_block_as_the_workflow_does(tmp_path, text, words):
    """Before: `comparison: []` was taken as no comparison key at all."""
    (tmp_path / "c.yaml").write_text(text)
    stored(tmp_path, ("one", {"versions": CUDA_13_0}), ("two", {"versions": CUDA_13_0, "seed": 1}))
    proc = fabench("compare", "--configfile", tmp_path / "c.yaml", "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == cli.USAGE and words in last_line(proc), proc.stderr
    assert last_line(proc).startswith(f"fabench compare: error: --configfile {tmp_path / 'c.yaml'}: ")


@pytest.mark.parametrize("plant", ["fifo", "device", "folder", "too large"])
def test_archive_store_extra_reads_a_bounded_regular_file_only(tmp_path, plant):
    """Before: a FIFO waited for a writer forever, /dev/zero was read without end."""
    run_dir = make_run(tmp_path / "results", "r", versions=CUDA_13_0)
    extra = tmp_path / "extra"
    if plant == "fifo":
        os.mkfifo(extra)
    elif plant == "device":
        extra = Path("/dev/zero")
    elif plant == "folder":
        extra.mkdir()
    else:
        with open(extra, "wb") as handle:
            handle.truncate(65 * 1024 * 1024)  # sparse: larger than the bound, no disk used
    began = time.monotonic()
    proc = fabench("archive", "store", run_dir, "--extra", f"x.json={extra}", cwd=tmp_path, timeout=60)
    assert time.monotonic() - began < 60
    assert proc.returncode == cli.INTEGRITY and last_line(proc).startswith("fabench archive store: refused: extra "
                                                                           "file x.json: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob(f"archive/*/*/{RECORD}"))


def test_archive_store_extra_still_keeps_a_regular_file(tmp_path):
    run_dir = make_run(tmp_path / "results", "r", versions=CUDA_13_0)
    (tmp_path / "m.json").write_text('{"image": "x"}')
    proc = fabench("archive", "store", run_dir, "--extra", f"image-manifest.json={tmp_path / 'm.json'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / proc.stdout.strip() / "image-manifest.json").read_text() == '{"image": "x"}'


# ---------------------------------------------------------------- no traceback on ordinary input

def test_compare_of_cpu_runs_far_apart_is_judged_not_a_traceback(tmp_path):
    """CPU runs have no calibration: runs on a busy host far apart (x2, x0.5). Before: the archive's
    own repeats gave a between-run noise beyond the policy's bound, and a RuleError traceback; now
    the fallback fit's values judge them and the comparison is made."""
    archive = stored(tmp_path, ("one", {"versions": CPU}))
    [entry] = list(archive.glob("*/[0-9]*"))
    for factor in ("2", "0.5"):
        scaled = subprocess.run([sys.executable, str(REPO / "tools" / "scale_run.py"), entry, tmp_path / f"r{factor}",
                                 "--factor", factor, "--run", f"r{factor.replace('.', '')}"], capture_output=True,
                                text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, timeout=300)
        assert scaled.returncode == 0, scaled.stderr
        assert fabench("archive", "store", tmp_path / f"r{factor}", cwd=tmp_path).returncode == 0
    proc = fabench("compare", "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    retired = tmp_path / "c.yaml"
    retired.write_text("comparison: {between_run: 0.4}\n")
    proc = fabench("compare", "--configfile", retired, "--out-md", os.devnull, cwd=tmp_path)
    assert proc.returncode == cli.USAGE and "comparison.between_run is no longer read" in last_line(proc), proc.stderr


def test_a_missing_calibrations_file_is_one_line(tmp_path, monkeypatch, capsys):
    stored(tmp_path, ("one", {"versions": CUDA_13_0}), ("two", {"versions": CUDA_13_0, "seed": 1}))
    monkeypatch.setattr(calibration, "CALIBRATIONS", tmp_path / "calibrations.yaml")
    calibration.calibrations.cache_clear()
    try:
        with pytest.raises(calibration.CalibrationError, match="calibrations.yaml: cannot be read at"):
            calibration.calibrations()
        code = main(["compare", "--root", str(tmp_path / "archive"), "--out-md", os.devnull])
        err = capsys.readouterr().err
        assert code == cli.USAGE and "calibrations.yaml: cannot be read at" in err and "Traceback" not in err
    finally:
        monkeypatch.undo()
        calibration.calibrations.cache_clear()


def test_every_setting_the_time_line_can_name_has_its_sentence_in_the_report_template():
    """Before: a CPU run whose trials all ran their least calls named `cpu.trials`, which the
    template had no sentence for (a Jinja error, and no report)."""
    template = (REPO / "src/fabench/report/templates/sections/timeline.md.j2").read_text()
    cuts = template.split("{% set cuts = {", 1)[1].split("} %}", 1)[0]
    shape_cuts = template.split("{% set shape_cuts = {", 1)[1].split("} %}", 1)[0]
    named = set()
    for group in SETTINGS:
        for cpu in (False, True):
            for at_minimum in (False, True):
                for stops in (None, {"timeout": 1}):
                    for workers in (0, 1):
                        item = largest_item([{"group": group, "seconds": 1.0, "share": 1.0}], cpu, stops, workers,
                                            at_minimum)
                        named.add((item["group"], item["setting"]))
    assert ("measuring: timed loops", "cpu.trials") in named
    for group, setting in named:
        if setting == "shapes":
            assert f'"{group}":' in shape_cuts, group
        elif setting:
            assert f'"{setting}":' in cuts, setting


# ---------------------------------------------------------------- paths named by data

def forged_archive(tmp_path: Path, variant: str) -> Path:
    """A copy of a real entry whose results name `variant` for one variant, sealed again."""
    entry = tmp_path / "archive" / ENTRY.parent.name / ENTRY.name
    shutil.copytree(ENTRY, entry)
    for path in [entry, *entry.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    collected = json.loads((entry / "results.json").read_text())
    first = collected["results"][0]["variant"]
    for result in collected["results"]:
        if result["variant"] == first:
            result["variant"] = variant
    (entry / "results.json").write_text(json.dumps(collected))
    reseal(entry)
    return entry


@pytest.mark.parametrize("variant", ["../../../escaped", "a/b", "/tmp/abs", ".hidden", "x\ny"])
def test_a_forged_variant_name_in_an_archived_entry_leaves_it_out_and_writes_nowhere_else(tmp_path, variant):
    """Before: the variant's name (no part of the entry's identity) reached the figure's file name,
    and `compare --plots` wrote outside its folder."""
    entry = forged_archive(tmp_path, variant)
    assert verify_entry(entry) != []  # its results fail the result schema: not an intact entry
    for other in ("0001-d37d7e44", "0002-7a004542"):  # two intact entries beside it, compared
        shutil.copytree(ENTRY.parent / other, entry.parent / other)
    (tmp_path / "plots").mkdir()
    before = {p for p in tmp_path.rglob("*")}
    proc = fabench("compare", "--plots", tmp_path / "plots", "--out-md", os.devnull, cwd=tmp_path)
    assert "Traceback" not in proc.stderr and proc.returncode == cli.INTEGRITY, proc.stderr
    assert f"left out {ENTRY.parent.name}/{ENTRY.name}: results.json: results[0]: $.variant:" in proc.stderr
    made = {p for p in tmp_path.rglob("*")} - before
    assert all(p.parent == tmp_path / "plots" for p in made), made


@pytest.mark.parametrize("variant", ["a/b", "../x", "../../../etc/x", "x\0y"])
def test_a_figure_named_by_a_variant_is_one_file_in_its_folder(tmp_path, variant):
    with pytest.raises(OutputPathError):
        version_plot_path(tmp_path, variant)


def test_a_figure_named_by_a_variant_is_never_written_through_a_link(tmp_path):
    (tmp_path / "outside.png").write_bytes(b"mine")
    (tmp_path / "versions-default.png").symlink_to(tmp_path / "outside.png")
    with pytest.raises(OutputPathError, match="symbolic link"):
        version_plot_path(tmp_path, "default")
    assert version_plot_path(tmp_path, "tuned") == tmp_path / "versions-tuned.png"


@pytest.mark.parametrize("plant", ["report.md", "plots", "plots/latency.png", "example folder"])
def test_render_examples_writes_nothing_through_a_link(tmp_path, plant):
    """Before: an example's report.md or figure that was a link had its target rewritten."""
    examples = tmp_path / "examples"
    example = examples / "ex"
    shutil.copytree(ENTRY.parent.parent, example / "archive")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("not the example's")
    if plant == "report.md":
        (example / "report.md").symlink_to(outside / "kept")
    elif plant == "plots":
        (example / "plots").symlink_to(outside)
    elif plant == "plots/latency.png":
        (example / "plots").mkdir()
        (example / "plots" / "latency.png").symlink_to(outside / "kept")
    else:
        shutil.move(example, outside / "ex")
        example.symlink_to(outside / "ex")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "render_examples.py"), "--examples", examples,
                           *(["ex"] if plant == "example folder" else [])], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")}, timeout=600)
    assert proc.returncode == 1 and "symbolic link" in last_line(proc), proc.stderr
    assert (outside / "kept").read_text() == "not the example's"
    assert sorted(p.name for p in outside.iterdir()) == sorted(["kept"] + (["ex"] if plant == "example folder" else []))
