"""The collector: schema validation with useful messages, one run, report order."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from fabench.config import sha256_json
from fabench.measure.spec import job_settings, job_spec
from fabench.report.render import render
from fabench.results.collect import ResultError, collect, json_path, result_schema, result_validator
from fabench.results.contract import SCHEMA_PATH

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RESULTS = sorted((FIXTURES / "results").glob("*/*.json"))
ONE = FIXTURES / "results" / "default" / "b4-s512-h8-d256.json"


def write_variant(tmp_path: Path, name: str, change) -> Path:
    """A copy of one fixture result, changed by `change(result)`, written under tmp_path."""
    result = json.loads(ONE.read_text())
    change(result)
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return path


def order_of(collected: dict) -> list[tuple[str, str]]:
    return [(r["variant"], r["shape_id"]) for r in collected["results"]]


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(result_schema())
    assert result_schema(SCHEMA_PATH) == result_schema()


def test_fixture_results_are_valid():
    validator = jsonschema.Draft202012Validator(result_schema())
    for path in RESULTS:
        validator.validate(json.loads(path.read_text()))


def test_the_one_pass_check_of_sample_arrays_finds_what_jsonschema_finds():
    """collect's validator checks arrays of numbers in one pass; on a real GPU result with bad items
    of every kind (below the minimum, a string, a bool, null) and good ones, its errors are
    jsonschema's own. Blind side: a schema whose number items carry keywords other than minimum
    take jsonschema's own path, which this does not exercise."""
    schema = result_schema()
    result = json.loads((FIXTURES / "h200-run" / "tuned-4096.json").read_text())
    key = "kernel_samples_ms"
    next(iter(result["backends"].values()))["trials"][0][key] = [0.25, -1.0, "x", True, None, 0.0]

    def problems(validator):
        return sorted(f"{json_path(e.absolute_path)}: {e.message}" for e in validator.iter_errors(result))

    found = problems(result_validator(schema))
    assert len(found) == 4 and all(f"{key}[" in line for line in found), found
    assert found == problems(jsonschema.validators.validator_for(schema)(schema))


def test_results_sorted_by_variant_order_then_shape():
    collected = collect(reversed(RESULTS), variant_order=["tuned", "default"])
    assert collected["run"] == "h200-fixture"
    assert order_of(collected) == [
        ("tuned", "b4-s512-h8-d256"), ("tuned", "b4-s1024-h8-d64"), ("tuned", "b4-s4096-h8-d256"),
        ("default", "b4-s512-h8-d256"), ("default", "b4-s4096-h8-d256"),
    ]


def test_without_an_order_variants_follow_first_appearance():
    collected = collect(RESULTS)  # default/ sorts before tuned/
    assert [v for v, _ in order_of(collected)][:2] == ["default", "default"]


@pytest.mark.parametrize("change, where, what", [
    (lambda r: r["backends"]["flex"].update(status="broken"), "$.backends.flex.status", "'broken'"),
    (lambda r: r["provenance"].pop("device"), "$.provenance", "'device' is a required property"),
    (lambda r: r["backends"]["flex"].update(failure_kind=None), "$.backends.flex.failure_kind", "None"),
    (lambda r: r["backends"]["native"].update(wall_mean_ms=-1.0), "$.backends.native.wall_mean_ms", "-1.0"),
    (lambda r: r["backends"]["flex"].update(failure_kind="timeout"), "$.backends.flex.failure_kind", "'timeout'"),
    (lambda r: r.update(platform="metal"), "$.platform", "'metal'"),
    (lambda r: r.update(shape_id="b4-s1024-h8-d256"), "$.shape_id", "does not match $.shape"),
    (lambda r: r.update(schema_version=1), "$.schema_version", "1 has no trials to analyse"),
    (lambda r: r["backends"]["native"]["trials"].append(dict(r["backends"]["native"]["trials"][0])),
     "$.backends.native.trials", "a (process, index) appears twice"),
    (lambda r: r["backends"]["native"].update(trials=[], stats=None), "$.backends.native.trials",
     "should be non-empty"),
    (lambda r: r["backends"]["native"]["stats"].update(stable=False), "$.backends.native.stats.unstable_reason",
     "None is not of type 'string'"),
])
def test_bad_result_is_rejected_naming_file_and_key(tmp_path, change, where, what):
    bad = write_variant(tmp_path, "bad.json", change)
    with pytest.raises(ResultError) as caught:
        collect([ONE.parent.parent / "tuned" / "b4-s512-h8-d256.json", bad])
    message = str(caught.value)
    assert f"{bad}: {where}: " in message and what in message


def test_unreadable_json_is_rejected(tmp_path):
    bad = tmp_path / "truncated.json"
    bad.write_text('{"schema_version": 1,')
    with pytest.raises(ResultError, match=rf"{bad}: not readable JSON"):
        collect([bad])


def test_one_result_per_variant_and_shape(tmp_path):
    twin = write_variant(tmp_path, "twin.json", lambda r: None)
    with pytest.raises(ResultError, match="already collected from"):
        collect([ONE, twin])


def test_results_of_one_run_only(tmp_path):
    other = write_variant(tmp_path, "other.json", lambda r: r.update(run="elsewhere", variant="x"))
    with pytest.raises(ResultError, match=r"\$\.run: 'elsewhere' differs"):
        collect([ONE, other])


def test_results_come_in_the_given_variant_order():
    collected = collect(RESULTS, ["tuned", "default"])
    assert order_of(collected)[0] == ("tuned", "b4-s512-h8-d256")  # shapes by (B,S,H,D) within
    assert len(collected["results"]) == len(RESULTS)


def test_every_bad_file_is_named_with_its_problem(tmp_path):
    bad = write_variant(tmp_path, "bad.json", lambda r: r["backends"]["native"].pop("label"))
    with pytest.raises(ResultError) as err:
        collect([bad])
    assert f"{bad}: $.backends.native: 'label' is a required property" in str(err.value)


def test_an_ok_status_with_a_failed_correctness_check_is_refused(tmp_path):
    def lie(result):
        result["backends"]["native"]["correctness"]["passed"] = False

    with pytest.raises(ResultError, match=r"\$\.backends\.native: status ok although its correctness check failed"):
        collect([write_variant(tmp_path, "lie.json", lie)])


def expectations(config: dict, result: dict) -> dict:
    """What the workflow asks of the fixture's job (as workflow/rules/common.smk builds it)."""
    return {"run": result["run"], "settings_sha256": sha256_json(job_settings(config)),
            "iterations": {"gpu": {"warmup": config["warmup"], "iters": config["iters"]}, "cpu": config["cpu"]},
            "jobs": {f"{result['variant']}/{result['shape_id']}": config["variants"][result["variant"]]["triton"]}}


def matching_result(tmp_path, change=lambda r: None):
    """The fixture result made to be exactly what the fixture config asks for, then changed."""
    config = json.loads((FIXTURES / "config.json").read_text())

    def as_configured(result):
        result["run"] = config["run"]
        result["provenance"]["config_sha256"] = sha256_json(job_settings(config))
        result["method"].update(warmup=config["warmup"], iters=config["iters"])
        result["kernel_config"]["values"].update(config["variants"][result["variant"]]["triton"])
        change(result)

    path = write_variant(tmp_path, "job.json", as_configured)
    return config, path, json.loads(path.read_text())


def test_a_result_run_as_configured_is_accepted(tmp_path):
    config, path, result = matching_result(tmp_path)
    assert collect([path], expected=expectations(config, result))["results"][0]["variant"] == result["variant"]


@pytest.mark.parametrize("change, message", [
    (lambda r: r["method"].update(iters=7), r"\$\.method: ran \{'warmup': 10, 'iters': 7\}, the config asks for"),
    (lambda r: r["provenance"].update(config_sha256="0" * 64), r"ran with other settings than the config's"),
    (lambda r: r["kernel_config"]["values"].update(BLOCK_M=16), r"\$\.kernel_config\.values: measured \{'BLOCK_M': 16\}"),
])
def test_a_result_that_ran_otherwise_than_the_config_is_named(tmp_path, change, message):
    config, _, expected_of = matching_result(tmp_path)
    _, path, _ = matching_result(tmp_path, change)
    with pytest.raises(ResultError, match=message):
        collect([path], expected=expectations(config, expected_of))


def test_a_result_of_a_job_the_config_does_not_have_is_named(tmp_path):
    config, path, result = matching_result(tmp_path)
    expected = expectations(config, result)
    expected["jobs"] = {"other/b1-s1-h1-d8": {}}
    with pytest.raises(ResultError, match="is not a job of this config"):
        collect([path], expected=expected)


def test_a_result_written_by_the_runner_is_accepted(tmp_path):
    """The runner's real output meets the schema (on this machine's CPU, one tiny job)."""
    pytest.importorskip("torch")
    from fabench.measure.job import run_job
    from fabench.results.merge import merge
    from workflow_util import default_config

    config = json.loads((FIXTURES / "config.json").read_text())
    config.update(warmup=1, iters=2, cpu={"warmup": 0, "iters": 1, "trials": 2}, backends=["native", "ck", "sdpa"],
                  timing=default_config()["timing"])
    shape = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
    path = tmp_path / "b1-s64-h2-d32.json"
    one_process = run_job(job_spec(config, "tuned", shape), None, "test")
    path.write_text(json.dumps(merge([one_process], [{"index": 0, "exit_code": 0, "wrote_result": True}])))
    collected = collect([path])
    assert len(collected["results"][0]["backends"]["native"]["trials"]) == 2
    assert collected["results"][0]["backends"]["ck"]["status"] == "unavailable"
    if collected["results"][0]["platform"] == "cpu":  # the Triton role (flex) was not run at all
        assert "| not run [1] |" in render(collected, config, None)


def test_the_collected_figures_are_the_analysis_of_the_trials_not_what_the_file_says(tmp_path):
    """A figure written into a result file that its trials do not give is derived again from them."""
    def tamper(result):
        result["backends"]["native"]["wall_mean_ms"] = 99.0
        result["backends"]["native"]["stats"]["wall_mean_ms"]["median"] = 99.0

    tampered = write_variant(tmp_path, "tampered.json", tamper)
    entry = collect([tampered])["results"][0]["backends"]["native"]
    medians = sorted(t["wall_mean_ms"] for t in entry["trials"])
    assert entry["wall_mean_ms"] == entry["stats"]["wall_mean_ms"]["median"] != 99.0
    assert medians[0] <= entry["wall_mean_ms"] <= medians[-1]
    assert entry["stats"]["wall_mean_ms"]["pi95"] is not None or entry["stats"]["wall_mean_ms"]["noise"] is None
