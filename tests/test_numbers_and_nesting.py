"""Numbers that are not numbers, and JSON nested past reason, are refused by every reader with one
line naming the file and the field (issue 26): archive store and read, the result schema check,
collect and compare. Real runs, real files, real `fabench` processes."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from fabench.files import JsonReadError, loads_json
from fabench.results.archive_layout import measurements_sha256
from fabench.results.archive_read import load_entry
from fabench.results.archive_store import _write_entry
from fabench.results.bounds import bounds_problem
from fabench.results.collect import ResultError, collect, result_schema, schema_problems
from fabench.results.merge import ProcessFileError, read_process_file
from fabench.results.published import PublishedError, load_published
from fabench.results.results_csv import results_csv
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


# ---------------------------------------------------------------- finite, but no measurement (issue 32)

# Numbers JSON and the schema accept that no measurement can be, each at a field of the native
# backend: (where under the backend, the value, what the error line says of it).
ABSURD = {
    "trial of 1e308 ms": ("trials[0].wall_mean_ms", 1e308, "1e+308 ms is not a time a measurement can take"),
    "trial of 1e-300 ms": ("trials[0].wall_mean_ms", 1e-300, "1e-300 ms is not a time a measurement can take"),
    "negative trial": ("trials[0].wall_mean_ms", -0.5, "-0.5 ms is not a time a measurement can take"),
    "median of 10^200 ms": ("stats.wall_mean_ms.median", 1e200, "1e+200 ms is not a time a measurement can take"),
    "negative device sample": ("trials[0].device_ms", -1e-3, "-0.001 ms is not a time a measurement can take"),
    "host overhead of -1e300 ms": ("host_overhead_ms", -1e300, "-1e+300 ms is not a difference of two times"),
    "negative count": ("trials[0].iters", -3, "-3 is not a count"),
    "integer of 200 digits": ("trials[0].index", 10**200, "1e+200 is beyond any measurement"),
}


def with_absurd(result: dict, member: str) -> tuple[dict, str]:
    """`result` (one job's) with the member's value put at its field; the field's JSON path."""
    where, value, _ = ABSURD[member]
    node = result["backends"]["native"]
    parts = where.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        node = node[int(part) if part.isdigit() else part]
    node[parts[-1]] = value
    return result, f"$.backends.native.{where}"


def short(line: str) -> bool:
    """An error line prints no number with hundreds of digits."""
    return not re.search(r"\d{25}", line)


@pytest.mark.parametrize("member", list(ABSURD))
def test_collect_refuses_a_number_no_measurement_can_be(run, member):
    job = run / "default" / "b4-s512-h8-d256.json"
    result, field = with_absurd(json.loads(job.read_text()), member)
    job.write_text(json.dumps(result))
    with pytest.raises(ResultError) as info:
        collect([job], schema=json.loads(write_v2_schema(run / "s.json").read_text()))
    assert f"{job}: {field}: {ABSURD[member][2]}" in str(info.value) and short(str(info.value))


@pytest.mark.parametrize("member", list(ABSURD))
def test_merge_refuses_a_process_file_with_a_number_no_measurement_can_be(run, member):
    process = run / "process-0.json"
    result, field = with_absurd(json.loads((run / "default" / "b4-s512-h8-d256.json").read_text()), member)
    process.write_text(json.dumps(result))
    with pytest.raises(ProcessFileError) as info:
        read_process_file(process)
    assert f"{field}: {ABSURD[member][2]}" in str(info.value) and short(str(info.value))


@pytest.mark.parametrize("member", ["trial of 1e308 ms", "negative trial", "median of 10^200 ms"])
def test_archive_store_refuses_a_number_no_measurement_can_be(run, tmp_path, member):
    collected = read_results(run)
    collected["results"][0], field = with_absurd(collected["results"][0], member)
    (run / "results.json").write_text(json.dumps(collected))
    root = tmp_path / "archive"
    done = fabench("archive", "store", str(run), "--root", str(root), "--schema",
                   str(write_v2_schema(tmp_path / "schema.json")), cwd=tmp_path)
    line = one_line(done.stderr)
    assert done.returncode == 1 and f"$.results[0]{field[1:]}: {ABSURD[member][2]}" in line and short(line), line
    assert not root.exists()


@pytest.mark.parametrize("member", list(ABSURD))
def test_an_archived_absurd_number_leaves_the_entry_out_of_compare_naming_the_field(run, tmp_path, member):
    """An entry written before this check (as _write_entry can) is broken, not printed in digits."""
    collected = read_results(run)
    collected["results"][0], field = with_absurd(collected["results"][0], member)
    text = json.dumps(collected, indent=2)
    label_dir = tmp_path / "archive" / "old"
    _write_entry(label_dir, collected, measurements_sha256(collected), {"results.json": text.encode()})
    entry = load_entry(next(label_dir.glob("0001-*")))
    [problem] = entry.problems
    assert problem.startswith(f"results.json: $.results[0]{field[1:]}: {ABSURD[member][2]}") and short(problem)
    other = make_run(tmp_path / "b", "b", versions=ROCM_6_4, seed=5)
    _write_entry(tmp_path / "archive" / "new", read_results(other), measurements_sha256(read_results(other)),
                 {"results.json": (other / "results.json").read_bytes()})
    done = fabench("compare", "--root", str(tmp_path / "archive"), "--out-json", str(tmp_path / "c.json"),
                   "--out-md", str(tmp_path / "c.md"), cwd=tmp_path)
    assert f"left out {entry.id}: results.json:" in done.stderr, done.stderr
    assert short((tmp_path / "c.md").read_text()) and "inf" not in (tmp_path / "c.json").read_text().lower()


def test_the_csv_refuses_a_number_no_measurement_can_be(run):
    collected = read_results(run)
    assert "inf" not in results_csv(collected)
    collected["results"][0], field = with_absurd(collected["results"][0], "trial of 1e-300 ms")
    with pytest.raises(ValueError, match=re.escape(f"$.results[0]{field[1:]}: 1e-300 ms is not a time")):
        results_csv(collected)


PUBLISHED = Path(__file__).resolve().parents[1] / "report" / "published" / "mi300x-2025-12-30.yaml"


@pytest.mark.parametrize("value,words", [(1e308, "1e+308 ms is not a time"), (1e-300, "1e-300 ms is not a time"),
                                         (1e200, "1e+200 ms is not a time")])
def test_the_published_file_refuses_a_time_no_measurement_can_be(tmp_path, value, words):
    published = yaml.safe_load(PUBLISHED.read_text())
    published["variants"]["default"]["results"][1]["ms"]["native"] = value
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump(published))
    with pytest.raises(PublishedError) as info:
        load_published(path)
    line = str(info.value)
    assert line.startswith(f"{path}: variants.default.results.1.ms.native: {words}") and "\n" not in line, line


@pytest.mark.parametrize("value", [1e300, -2.0])
def test_the_published_file_refuses_a_speedup_no_ratio_of_times_can_be(tmp_path, value):
    published = yaml.safe_load(PUBLISHED.read_text())
    published["variants"]["tuned"]["results"][0]["speedup"]["ck"] = value
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump(published))
    with pytest.raises(PublishedError, match=r"variants\.tuned\.results\.0\.speedup\.ck: .* is not a ratio of two times"):
        load_published(path)


def test_the_bounds_take_every_committed_result_and_published_file():
    """The bounds refuse no real measurement: every result and published file in the checkout."""
    repo = Path(__file__).resolve().parents[1]
    for path in [*repo.glob("examples/**/results.json"), *repo.glob("tests/fixtures/**/*.json")]:
        assert bounds_problem(json.loads(path.read_text())) is None, path
    for path in repo.glob("report/published/*.yaml"):
        assert bounds_problem(yaml.safe_load(path.read_text())) is None, path
