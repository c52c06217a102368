"""Every file the workflow reads back beside the measurements (the compile ahead's record, the
workflow's start, the archive receipt, the compile ahead's stamps, the digests of what the report
wrote) is checked before use (fabench.side_files); a bad one is left out with a note and
never costs the run's good outputs. A file of the report changed or deleted after it was written
is noticed and made again (fabench.results.output_digests), never "Nothing to be done".

The workflow tests run the real Snakemake on the CPU test experiment (.test/config-cpu), once for
the module, each test on its own copy. Blind side: a GPU run reads the same files through the same
code (the compile ahead's record is a GPU run's, written here by hand in its format)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabench.measure.launch.launcher import no_result
from fabench.measure.spec import job_spec
from fabench.results.merge import merge_files
from fabench.side_files import (COMPILE_AHEAD, OUTPUT_DIGESTS, RECEIPT, STAMP, WORKFLOW_STARTED,
                                        SideFileError, read_side_file)
from fabench.shapes import parse_shape_id
from workflow_util import REPO, snakemake, tiny_config

RUN = "tiny"
CELL = "default/b1-s64-h2-d32.json"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished CPU run of the test experiment (its report written), in a folder of its own."""
    where = tmp_path_factory.mktemp("finished")
    proc = snakemake(where, "--cores", "1", "report", config=tiny_config())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return where


@pytest.fixture
def run_copy(finished, tmp_path) -> Path:
    where = tmp_path / "w"
    shutil.copytree(finished, where, symlinks=True)
    return where


def good_record(started: float) -> dict:
    return {"format": "fabench-compile-ahead-run/1", "started_at": started, "leased_at": started + 0.5,
            "ended_at": started + 30.5, "host": "h", "gpu": "0", "gpu_uuid": "GPU-a", "parallel": 2,
            "workers_started": 0, "cached": [],
            "processes": [{"variant": "default", "shape_id": "b1-s64-h2-d32", "spawned_at": started + 1,
                           "exited_at": started + 20, "exit_code": 0,
                           "backends": {"flex": {"status": "compiled", "seconds": 18.0}}}]}


# ---------------------------------------------------------------- the checks themselves

FUTURE = time.time() + 3600
BAD_RECORDS = [
    ("not JSON", "{", "not readable JSON"),
    ("NaN", '{"started_at": NaN}', "not a finite number"),
    ("a list", "[]", "(top level): [] is not of type 'object'"),
    ("ended before it was leased", json.dumps({**good_record(FUTURE), "ended_at": FUTURE - 259448}),
     "ended_at:"),
    ("processes a string", json.dumps({**good_record(FUTURE), "processes": "x"}), "processes: 'x' is not of type"),
    ("a backend's status unknown", json.dumps({**good_record(FUTURE), "processes": [
        {**good_record(FUTURE)["processes"][0], "backends": {"flex": {"status": "warm"}}}]}),
     "processes.0.backends.flex.status"),
    ("another format", json.dumps({**good_record(FUTURE), "format": "x/9"}), "format:"),
]


@pytest.mark.parametrize("what, text, words", BAD_RECORDS, ids=[b[0] for b in BAD_RECORDS])
def test_a_bad_compile_ahead_record_is_one_line_naming_the_file_and_key(tmp_path, what, text, words):
    path = tmp_path / "compile-ahead.json"
    path.write_text(text)
    with pytest.raises(SideFileError) as caught:
        read_side_file(path, COMPILE_AHEAD)
    assert str(caught.value).startswith(str(path)) and words in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("kind, value, words", [
    (RECEIPT, {"entry": "../../x/0001-abcdef12", "path": "p", "content_sha256": None, "sha256sums": "0" * 64}, "entry:"),
    (RECEIPT, {"entry": "cpu/0001-abcdef12"}, "'path' is a required property"),
    (WORKFLOW_STARTED, {"started_at": -5}, "started_at:"),
    (WORKFLOW_STARTED, {"started_at": "yesterday"}, "started_at:"),
    (STAMP, {"variant": "default", "shape_id": "x", "compiled_at": 1, "backends": []}, "backends:"),
    (OUTPUT_DIGESTS, {"format": "fabench-output-digests/1", "files": {"a": "zz"}}, "files.a:"),
])
def test_every_kind_of_side_file_is_checked_against_its_schema(tmp_path, kind, value, words):
    path = tmp_path / "side.json"
    path.write_text(json.dumps(value))
    with pytest.raises(SideFileError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        read_side_file(path, kind)


@pytest.mark.parametrize("plant", ["fifo", "link", "folder", "device"])
def test_a_side_file_that_is_not_a_regular_file_is_refused_without_waiting_or_following(tmp_path, plant):
    path = tmp_path / "compile-ahead.json"
    if plant == "fifo":
        os.mkfifo(path)  # open without O_NONBLOCK would wait for a writer forever
    elif plant == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps(good_record(FUTURE)))
        path.symlink_to(tmp_path / "elsewhere.json")
    elif plant == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    began = time.monotonic()
    with pytest.raises(SideFileError) as caught:
        read_side_file(path, COMPILE_AHEAD)
    assert time.monotonic() - began < 5 and str(path) in str(caught.value)


# ---------------------------------------------------------------- the report step

@pytest.mark.parametrize("what, text, words", [BAD_RECORDS[0], BAD_RECORDS[3], BAD_RECORDS[4]],
                         ids=["not JSON", "ended before it was leased", "processes a string"])
def test_a_bad_compile_ahead_record_is_left_out_of_the_report_with_a_note_and_costs_nothing(run_copy, what, text,
                                                                                            words):
    """Before: read unchecked into results.json and the report ("spanned -259448 s"), or a crash of
    the report step, after which Snakemake deleted the run's outputs."""
    run = run_copy / "results" / RUN
    (run / "compile-ahead.json").write_text(text)
    proc = snakemake(run_copy, "--cores", "1", "report", "--forcerun", "write_report", config=tiny_config())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"results/{RUN}/compile-ahead.json: " in proc.stderr and words in proc.stderr and "left out" in proc.stderr
    collected = json.loads((run / "results.json").read_text())
    assert "compile_ahead" not in collected and len(collected["results"]) == 4
    assert "-259448" not in (run / "report.md").read_text()
    for name in ("report.md", "report.html", "results.csv", "plots/latency.png", CELL):
        assert (run / name).is_file(), name


def test_a_good_compile_ahead_record_still_reaches_the_report(run_copy):
    run = run_copy / "results" / RUN
    (run / "compile-ahead.json").write_text(json.dumps(good_record(FUTURE)))
    proc = snakemake(run_copy, "--cores", "1", "report", "--forcerun", "write_report", config=tiny_config())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "results.json").read_text())["compile_ahead"] == good_record(FUTURE)


# ---------------------------------------------------------------- changed or deleted outputs

@pytest.mark.parametrize("damage", ["a job's result corrupted", "results.json deleted", "results.json edited",
                                    "a figure cut", "the digests corrupted"])
def test_a_report_file_changed_or_deleted_since_is_made_again_not_nothing_to_be_done(run_copy, damage):
    run = run_copy / "results" / RUN
    before = json.loads((run / CELL).read_text())
    if damage == "a job's result corrupted":
        (run / CELL).write_text("{")
    elif damage == "results.json deleted":
        (run / "results.json").unlink()
    elif damage == "results.json edited":
        collected = json.loads((run / "results.json").read_text())
        collected["results"] = collected["results"][:1]
        (run / "results.json").write_text(json.dumps(collected))
    elif damage == "a figure cut":
        (run / "plots" / "latency.png").write_bytes((run / "plots" / "latency.png").read_bytes()[:100])
    else:
        (run / "output-digests.json").write_text("[]")
    dry = snakemake(run_copy, "-n", "--cores", "1", "report", config=tiny_config())
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" not in dry.stdout + dry.stderr
    assert "write_report" in dry.stdout and "measure" not in dry.stdout.split("Job stats:")[1].split("total")[0]
    proc = snakemake(run_copy, "--cores", "1", "report", config=tiny_config())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / CELL).read_text())["backends"].keys() == before["backends"].keys()
    assert len(json.loads((run / "results.json").read_text())["results"]) == 4
    again = snakemake(run_copy, "-n", "--cores", "1", "report", config=tiny_config())
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.parametrize("damage", ["not JSON", "a FIFO"])
def test_a_process_file_corrupted_since_is_measured_again_and_the_report_written(run_copy, damage):
    """Before: the report step failed on it (asking to delete it by hand), and Snakemake deleted
    the run's report with it. Now it is moved aside (a dry run too: the plan it shows is the one
    that runs) and its process measured again."""
    run = run_copy / "results" / RUN
    process = run / "default" / "b1-s64-h2-d32" / "process-0.json"
    process.unlink()
    if damage == "not JSON":
        process.write_text("{")
    else:
        os.mkfifo(process)  # read as it was, the merge would wait on it for ever
    dry = snakemake(run_copy, "-n", "--cores", "1", "report", config=tiny_config(), timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert f"results/{RUN}/default/b1-s64-h2-d32/process-0.json" in dry.stderr
    assert "its process is measured again" in dry.stderr
    [aside] = list(process.parent.glob("process-0.json.unreadable-*"))  # kept, not deleted
    assert "Job stats:" in dry.stdout, dry.stdout[-3000:] + dry.stderr[-3000:]
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert "measure" in stats and "write_report" in stats
    proc = snakemake(run_copy, "--cores", "1", "report", config=tiny_config(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(process.read_text())["variant"] == "default" and aside.exists()
    assert len(json.loads((run / "results.json").read_text())["results"]) == 4


def test_an_untouched_run_is_still_nothing_to_be_done(run_copy):
    dry = snakemake(run_copy, "-n", "--cores", "1", "report", config=tiny_config())
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]


# ---------------------------------------------------------------- archive

def test_snakemake_archive_with_a_preview_config_ends_well_and_names_no_receipt(tmp_path):
    """Before: a traceback reading the receipt a preview never has (results/<run>/archived.json)."""
    config = tiny_config(preview=True, run="preview")
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = snakemake(tmp_path, "--cores", "1", "archive", config=config)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "results/preview is a preview" in proc.stderr
    assert "this config's run(s) in the archive: none" in proc.stderr


def test_a_corrupted_receipt_is_named_not_a_traceback(run_copy):
    proc = snakemake(run_copy, "--cores", "1", "archive", config=tiny_config())
    assert proc.returncode == 0, proc.stderr[-2000:]
    receipt = run_copy / "results" / RUN / "archived.json"
    assert read_side_file(receipt, RECEIPT)["entry"].startswith("cpu-")
    receipt.write_text(json.dumps({**read_side_file(receipt, RECEIPT), "entry": 5}))
    os.utime(receipt, (time.time() + 60,) * 2)  # newer than its inputs: Snakemake does not make it again
    proc = snakemake(run_copy, "--cores", "1", "archive", config=tiny_config())
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "archived.json: entry: 5 is not of type 'string'" in proc.stderr


# ---------------------------------------------------------------- a lost process beside shared backends

def test_a_lost_process_of_a_job_with_shared_backends_merges_with_its_measured_one(finished, tmp_path):
    """The launcher's record of a lost process names every configured backend; the job's measured
    process names its own only (the others are measured once, in the default variant's job).
    Before: "backends ... differ ...; delete it and run the same command" of the good file, and the
    report failed. The lost record is the launcher's own (no_result), the measured one a real run's."""
    measured = finished / "results" / RUN / "tuned" / "b1-s64-h2-d32" / "process-0.json"
    result = json.loads(measured.read_text())
    assert result["shared_backends"]["backends"]
    spec = job_spec(tiny_config(), "tuned", parse_shape_id("b1-s64-h2-d32"), platform="cpu", shared_from="default")
    lost = no_result(spec, "cpu", None, None, [{"index": 1, "exit_code": -9, "wrote_result": False}])
    (tmp_path / "process-1.json").write_text(json.dumps(lost))
    merged = merge_files([measured, tmp_path / "process-1.json"])
    # On a CPU the tuned job measures nothing of its own (Triton needs ROCm, FlexAttention is left
    # out): every backend it has is what its measured process said, the lost one is in its exits.
    assert set(merged["backends"]) == set(result["backends"])
    assert {n: b["status"] for n, b in merged["backends"].items()} == \
        {n: b["status"] for n, b in result["backends"].items()}
    assert [e["index"] for e in merged["method"]["process_exits"]] == [0, 1]


# ---------------------------------------------------------------- compile-ahead stamps

def compile_ahead(where: Path) -> subprocess.CompletedProcess:
    spec = job_spec(tiny_config(), "default", parse_shape_id("b1-s64-h2-d32"), platform="cpu")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
           "FABENCH_LEASE_DIR": str(where / "leases"), "FABENCH_WORKER_DIR": str(where / "workers")}
    return subprocess.run([sys.executable, "-m", "fabench.measure.launch.precompile", "--spec", spec.to_json(),
                           "--out", str(where / "compile-ahead.json")], cwd=where, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("plant", ["dangling link", "link to a folder", "a file"])
def test_a_stamps_folder_that_is_a_link_or_a_file_is_used_for_nothing_and_the_compile_ahead_ends_well(tmp_path,
                                                                                                       plant):
    """Before: a dangling link there ended the compile ahead in a traceback, after its work."""
    from fabench.measure.launch.precompile import STAMPS

    stamps = tmp_path / STAMPS
    stamps.parent.mkdir(parents=True)
    outside = tmp_path / "outside"
    if plant == "dangling link":
        stamps.symlink_to(tmp_path / "nowhere")
    elif plant == "link to a folder":
        outside.mkdir()
        stamps.symlink_to(outside)
    else:
        stamps.write_text("not a folder")
    proc = compile_ahead(tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "the stamps' folder is not used" in proc.stdout
    assert read_side_file(tmp_path / "compile-ahead.json", COMPILE_AHEAD)["processes"]
    assert not (tmp_path / "nowhere").exists() and not (outside.exists() and list(outside.iterdir()))


def test_a_corrupted_or_foreign_stamp_is_no_stamp(tmp_path):
    from fabench.measure.launch.precompile import STAMPS

    first = compile_ahead(tmp_path)
    assert first.returncode == 0, first.stderr
    [stamp] = list((tmp_path / STAMPS).glob("*.json"))
    assert compile_ahead(tmp_path).returncode == 0
    assert json.loads((tmp_path / "compile-ahead.json").read_text())["processes"] == []  # stamped: nothing to do
    stamp.write_text('{"variant": "tuned", "shape_id": "b1-s64-h2-d32", "compiled_at": 1, "backends": {}}')
    again = compile_ahead(tmp_path)
    assert json.loads((tmp_path / "compile-ahead.json").read_text())["processes"], again.stdout  # another job's
    stamp.write_text("{")
    again = compile_ahead(tmp_path)
    assert "not a stamp, compiled again" in again.stdout and "Traceback" not in again.stderr
    assert json.loads((tmp_path / "compile-ahead.json").read_text())["processes"]
