"""Numbers that are not numbers, and JSON nested past reason, are refused by every reader with one
line naming the file and the field (issue 26): archive store and read, the result schema check,
collect and compare. Real runs, real files, real `fabench` processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from fabench.files import JsonReadError, loads_json
from fabench.results.archive_layout import measurements_sha256
from fabench.results.archive_read import load_entry
from fabench.results.archive_store import _write_entry
from fabench.results.collect import ResultError, collect, result_schema, schema_problems
from support.runs import ROCM_6_4, make_run, read_results, write_v2_schema

FIELD = "$.results[0].backends.native.trials[0].wall_mean_ms"
BAD_NUMBERS = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf", "1e999": "inf"}


def fabench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=os.environ, timeout=120)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def with_first_trial_time(collected: dict, spelled: str) -> str:
    """results.json's text with its first trial's wall_mean_ms spelled `spelled` (NaN, Infinity...)."""
    marker = 987654.321
    collected["results"][0]["backends"]["native"]["trials"][0]["wall_mean_ms"] = marker
    return json.dumps(collected, indent=2).replace(str(marker), spelled)


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "results", "mi300x", versions=ROCM_6_4, seed=1)


@pytest.mark.parametrize("spelled", list(BAD_NUMBERS))
def test_archive_store_refuses_a_trial_time_that_is_not_a_number(run, tmp_path, spelled):
    (run / "results.json").write_text(with_first_trial_time(read_results(run), spelled))
    schema = write_v2_schema(tmp_path / "schema.json")
    root = tmp_path / "archive"
    done = fabench("archive", "store", str(run), "--root", str(root), "--schema", str(schema), cwd=tmp_path)
    line = one_line(done.stderr)
    assert done.returncode == 1 and f"{FIELD}: {BAD_NUMBERS[spelled]} is not a finite number" in line, line
    assert not root.exists()


def test_an_archived_nan_is_left_out_of_compare_naming_the_field(run, tmp_path):
    """An entry written with a NaN (as fabench before this check could) is broken, not compared as nan."""
    collected = read_results(run)
    text = with_first_trial_time(collected, "NaN")
    nan_collected = json.loads(text)
    label_dir = tmp_path / "archive" / "old"
    _write_entry(label_dir, nan_collected, measurements_sha256(nan_collected), {"results.json": text.encode()})
    entry = load_entry(next(label_dir.glob("0001-*")))
    assert entry.problems == [f"results.json: {FIELD}: nan is not a finite number"]
    other = make_run(tmp_path / "b", "b", versions=ROCM_6_4, seed=5)
    _write_entry(tmp_path / "archive" / "new", read_results(other), measurements_sha256(read_results(other)),
                 {"results.json": (other / "results.json").read_bytes()})
    done = fabench("compare", "--root", str(tmp_path / "archive"), "--out-json", str(tmp_path / "c.json"),
                   cwd=tmp_path)
    assert f"left out {entry.id}: results.json: {FIELD}: nan is not a finite number" in done.stderr, done.stderr
    assert "nan" not in json.dumps(json.loads((tmp_path / "c.json").read_text())["rows"]).lower()


@pytest.mark.parametrize("spelled", list(BAD_NUMBERS))
def test_collect_refuses_a_job_file_with_a_time_that_is_not_a_number(run, spelled):
    job = run / "default" / "b4-s512-h8-d256.json"
    result = json.loads(job.read_text())
    result["backends"]["native"]["trials"][0]["wall_mean_ms"] = 987654.321
    job.write_text(json.dumps(result).replace("987654.321", spelled))
    with pytest.raises(ResultError) as info:
        collect([job], schema=json.loads(write_v2_schema(run / "s.json").read_text()))
    assert f"{job}: $.backends.native.trials[0].wall_mean_ms: {BAD_NUMBERS[spelled]} is not a finite number" in str(info.value)


def test_the_result_schema_check_refuses_nan_that_json_schema_lets_pass(run):
    result = read_results(run)["results"][0]
    result["backends"]["native"]["trials"][0]["wall_mean_ms"] = math.nan
    schema = result_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert list(validator.iter_errors(result)) == []  # what JSON Schema alone says: NaN >= 0
    assert schema_problems(result, validator) == ["$.backends.native.trials[0].wall_mean_ms: nan is not a finite number"]


DEEP = "[" * 200_000 + "]" * 200_000


def test_deep_nesting_is_one_line_not_a_recursion_error(run, tmp_path):
    with pytest.raises(JsonReadError, match="nested too deeply"):
        loads_json(DEEP, "x.json")
    with pytest.raises(JsonReadError, match=r"nested deeper than 100 levels"):
        loads_json("[" * 150 + "]" * 150, "x.json")  # parseable, still deeper than any fabench file
    (run / "results.json").write_text(json.dumps({"run": "mi300x", "results": json.loads("[" * 150 + "]" * 150)}))
    schema = write_v2_schema(tmp_path / "schema.json")
    done = fabench("archive", "store", str(run), "--root", str(tmp_path / "archive"), "--schema", str(schema),
                   cwd=tmp_path)
    assert done.returncode == 1 and "nested deeper than 100 levels" in one_line(done.stderr)
    (run / "results.json").write_text(DEEP)
    done = fabench("archive", "store", str(run), "--root", str(tmp_path / "archive"), "--schema", str(schema),
                   cwd=tmp_path)
    assert done.returncode == 1 and "results.json: nested too deeply to read" in one_line(done.stderr)
    job = run / "default" / "b4-s512-h8-d256.json"
    job.write_text(DEEP)
    with pytest.raises(ResultError, match="nested too deeply to read"):
        collect([job])
