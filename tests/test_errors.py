"""Errors caused by input or environment, seen as a user sees them: the package's commands run as
processes, each bad input answered by one line naming the file or key and what was expected, a
non-zero exit code, and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from workflow_util import REPO

PUBLISHED = REPO / "report" / "published" / "mi300x-2025-12-30.yaml"


def run_module(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=environment,
                          cwd=cwd, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The process failed with exactly one line on stderr, and no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- the merge of a job's process files -----------------------------------------------------------
def process_file(directory, index: int, **changes) -> dict:
    """A process result with what the merge reads (a real one is made by test_runner's jobs)."""
    result = {"run": "r", "variant": "v", "shape_id": "b1-s64-h2-d32", "platform": "cpu", "flops": 1,
              "method": {"process_exits": [{"index": index, "exit_code": 0, "wrote_result": True}],
                         "stable_spread": 0.03, "cross_check": {"tolerance": 0.03}},
              "backends": {}, "reference": {"status": "ok"}, "provenance": {"process": index, "finished": "2026-11-23T00:00:00+00:00"}}
    result.update(changes)
    (directory / f"process-{index}.json").write_text(json.dumps(result))
    return result


@pytest.mark.parametrize("content, expected", [
    (b'{"run": "r", "backends": ', "is not a process result (not JSON: Expecting value at line 1, column 26)"),
    (b"\xff\xfe\x00garbage", "is not a process result (not JSON"),
    (b"[]", "is not a process result (a JSON list)"),
    (b'{"run": "r"}', "is not a process result (without variant, shape_id, platform"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "is not a process result (nested too deeply to read)",
                 id="nested too deeply"),
    (b'{"run": "r", "flops": NaN}', "is not a process result ($.flops: nan is not a finite number)"),
    (b'{"run": "r", "flops": 1e999}', "is not a process result ($.flops: inf is not a finite number)"),
])
def test_a_corrupt_process_file_is_named(tmp_path, content, expected):
    process_file(tmp_path, 0)
    (tmp_path / "process-1.json").write_bytes(content)
    proc = run_module("fabench.results.merge", "--out", str(tmp_path / "job.json"),
                      str(tmp_path / "process-0.json"), str(tmp_path / "process-1.json"))
    line = one_line_error(proc)
    assert line.startswith(f"python -m fabench.results.merge: error: {tmp_path / 'process-1.json'} "), line
    assert expected in line and line.endswith("delete it and run the same command to measure that process again")
    assert not (tmp_path / "job.json").exists()


def test_a_process_file_of_another_job_is_named(tmp_path):
    process_file(tmp_path, 0)
    process_file(tmp_path, 1, variant="other")
    proc = run_module("fabench.results.merge", "--out", str(tmp_path / "job.json"),
                      str(tmp_path / "process-0.json"), str(tmp_path / "process-1.json"))
    assert "process-1.json: variant 'other' differs from 'v' of" in one_line_error(proc)


def test_a_process_file_cut_inside_is_reported_with_the_job_files(tmp_path):
    process_file(tmp_path, 0)
    process_file(tmp_path, 1, provenance={"process": 1})  # no "finished"
    proc = run_module("fabench.results.merge", "--out", str(tmp_path / "job.json"),
                      str(tmp_path / "process-0.json"), str(tmp_path / "process-1.json"))
    assert "do not merge (KeyError: 'finished')" in one_line_error(proc)


def test_the_merge_of_good_process_files_still_works(tmp_path):
    process_file(tmp_path, 0)
    process_file(tmp_path, 1)
    proc = run_module("fabench.results.merge", "--out", str(tmp_path / "job.json"),
                      str(tmp_path / "process-0.json"), str(tmp_path / "process-1.json"))
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "job.json").read_text())
    assert [e["index"] for e in merged["method"]["process_exits"]] == [0, 1]


def test_a_process_measured_again_later_is_the_jobs_finish(tmp_path):
    """Process 0 measured again after process 1 (its file deleted, say): the job finished when it did."""
    process_file(tmp_path, 0, provenance={"process": 0, "finished": "2026-11-24T09:30:00+00:00"})
    process_file(tmp_path, 1, provenance={"process": 1, "finished": "2026-11-23T00:00:00+00:00"})
    proc = run_module("fabench.results.merge", "--out", str(tmp_path / "job.json"),
                      str(tmp_path / "process-0.json"), str(tmp_path / "process-1.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "job.json").read_text())["provenance"]["finished"] == "2026-11-24T09:30:00+00:00"


# --- fabench compare --published ------------------------------------------------------------------
@pytest.mark.parametrize("content, expected", [
    (b"\x00\x01\xff\xfe", "is not a text file (expected YAML like mi300x-2025-12-30.yaml)"),
    (b"- 1\n- 2\n", ": (top level): [1, 2] is not of type 'object'"),
    (b"source: {title: x}\n", ": (top level): 'method' is a required property"),
    (b"a: [1\n", "is not YAML: line 2, column 1: expected ',' or ']', but got '<stream end>'"),
])
def test_compare_names_a_published_file_it_cannot_read(tmp_path, content, expected):
    bad = tmp_path / "numbers.yaml"
    bad.write_bytes(content)
    proc = run_module("fabench.cli", "compare", "--root", str(tmp_path / "archive"), "--published", str(bad))
    line = one_line_error(proc)
    assert line.startswith(f"fabench compare: error: --published {bad}") and expected in line, line
    assert proc.returncode == 2  # a usage error, as the CLI documents


def test_compare_quotes_one_line_of_a_published_file_not_the_whole_file(tmp_path):
    bad = tmp_path / "numbers.yaml"
    bad.write_text(PUBLISHED.read_text().replace("labels: {", "labels: {{", 1))
    line = one_line_error(run_module("fabench.cli", "compare", "--published", str(bad)))
    # The parser notices the unclosed mapping on the next line, and quotes that line alone.
    assert line.endswith("""line 35, column 1: expected ',' or '}', but got '<scalar>': """
                         """'kernel_config_path: "aiter/ops/triton/configs/gfx942-MHA-DEFAULT.json"'"""), line


# --- the runner's job spec ------------------------------------------------------------------------
def tiny_spec() -> dict:
    """A job spec as the workflow makes it: the tiny CPU config with the schema's defaults."""
    from snakemake.utils import validate

    from fabench.measure.spec import job_spec
    from workflow_util import tiny_config

    config = tiny_config()
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    return json.loads(job_spec(config, "default", config["shapes"][0]).to_json())


def without(spec: dict, dotted: str) -> dict:
    *parents, last = dotted.split(".")
    node = spec = json.loads(json.dumps(spec))
    for part in parents:
        node = node[part]
    del node[last]
    return spec


@pytest.mark.parametrize("change, expected", [
    (lambda s: {}, "the spec: missing run, variant, shape, triton, settings"),
    (lambda s: without(s, "settings"), "the spec: missing settings"),
    (lambda s: without(s, "settings.timing"), "settings: missing timing (expected the keys dtype, causal"),
    (lambda s: without(s, "settings.tolerance"), "settings: missing tolerance"),
    (lambda s: without(s, "settings.timing.clear_l2"), "settings.timing: missing clear_l2"),
    (lambda s: without(s, "shape.head_dim"), "shape: missing head_dim"),
    (lambda s: {**s, "shape": {**s["shape"], "batch": "2"}}, "shape.batch: '2' is not an integer"),
    (lambda s: {**s, "settings": []}, "settings: [] is not an object"),
])
def test_a_runner_spec_missing_a_block_is_named_before_any_process(tmp_path, change, expected):
    out = tmp_path / "result.json"
    proc = run_module("fabench.measure", "--spec", json.dumps(change(tiny_spec())), "--out", str(out))
    line = one_line_error(proc)
    assert line.startswith("python -m fabench.measure: error: argument --spec: ") and expected in line, line
    assert proc.returncode == 2 and not out.exists() and proc.stdout == ""  # no process was started


@pytest.mark.parametrize("content, expected", [
    (None, "no-config.json: No such file or directory"),
    (b'{"fwd": ', "no-config.json is not JSON (Expecting value: line 1 column 9 (char 8))"),
    (b"[]", "no-config.json holds a JSON list, not aiter's config object"),
])
def test_a_runner_aiter_config_it_cannot_read_is_named(tmp_path, content, expected):
    config = tmp_path / "no-config.json"
    if content is not None:
        config.write_bytes(content)
    proc = run_module("fabench.measure", "--spec", json.dumps(tiny_spec()), "--aiter-config", str(config),
                      "--out", str(tmp_path / "result.json"))
    line = one_line_error(proc)
    assert line.startswith("python -m fabench.measure: error: argument --aiter-config: ") and line.endswith(expected)


def test_a_runner_spec_that_is_not_json_is_named(tmp_path):
    proc = run_module("fabench.measure", "--spec", "{run: x}", "--out", str(tmp_path / "result.json"))
    assert one_line_error(proc).endswith("argument --spec: not JSON (Expecting property name enclosed in double "
                                         "quotes at column 2)")


def test_a_spec_without_roles_for_this_platform_stops_with_one_line(tmp_path):
    """Roles are needed only for the platform a job runs on: this CPU host needs roles.cpu."""
    spec = without(tiny_spec(), "settings.roles.cpu")
    out = tmp_path / "result.json"
    proc = run_module("fabench.measure", "--spec", json.dumps(spec), "--out", str(out), "--process", "0")
    assert one_line_error(proc).startswith("python -m fabench.measure: error: roles.cpu: the jobs run on cpu, "
                                           "and the config gives no baseline/vendor/triton roles for it")
    assert proc.returncode == 2 and not out.exists()


# --- the Docker engine ----------------------------------------------------------------------------
def test_no_docker_engine_stops_a_docker_run_before_any_job_saying_how_to_point_at_one(tmp_path):
    from workflow_util import snakemake, tiny_config

    nowhere = f"unix://{tmp_path}/no-engine.sock"
    config = tiny_config(runtime="docker")
    env = {"DOCKER_HOST": nowhere}
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config, env=env, timeout=300)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("runtime docker:")]
    assert lines == [f"runtime docker: no Docker engine answers at {nowhere}: No such file or directory; start "
                     "one (dockerd), or point DOCKER_HOST at it (e.g. DOCKER_HOST=unix:///run/user/$UID/docker.sock "
                     "or tcp://HOST:2375), or run without containers: --config runtime=local"], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "build").exists()  # no job ran
    # The plan itself needs no engine.
    assert snakemake(tmp_path, "-n", "report", config=config, env=env, timeout=300).returncode == 0
