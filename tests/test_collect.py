"""The collector: schema validation with useful messages, one run, report order."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from fabench.results.collect import REPO_SCHEMA, ResultError, collect, main, result_schema
from fabench.report.render import render

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
    assert result_schema(REPO_SCHEMA) == result_schema()


def test_fixture_results_are_valid():
    validator = jsonschema.Draft202012Validator(result_schema())
    for path in RESULTS:
        validator.validate(json.loads(path.read_text()))


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
    with pytest.raises(ResultError, match=rf"{bad}: cannot read JSON"):
        collect([bad])


def test_one_result_per_variant_and_shape(tmp_path):
    twin = write_variant(tmp_path, "twin.json", lambda r: None)
    with pytest.raises(ResultError, match="already collected from"):
        collect([ONE, twin])


def test_results_of_one_run_only(tmp_path):
    other = write_variant(tmp_path, "other.json", lambda r: r.update(run="elsewhere", variant="x"))
    with pytest.raises(ResultError, match=r"\$\.run: 'elsewhere' differs"):
        collect([ONE, other])


def test_cli_writes_results_in_config_order(tmp_path):
    out = tmp_path / "run" / "results.json"
    assert main(["--out", str(out), "--config", str(FIXTURES / "config.json"), *map(str, RESULTS)]) == 0
    collected = json.loads(out.read_text())
    assert order_of(collected)[0] == ("default", "b4-s512-h8-d256")
    assert len(collected["results"]) == len(RESULTS)


def test_cli_reports_bad_files_and_fails(tmp_path, capsys):
    bad = write_variant(tmp_path, "bad.json", lambda r: r["backends"]["native"].pop("label"))
    out = tmp_path / "results.json"
    assert main(["--out", str(out), str(bad)]) == 1
    assert f"{bad}: $.backends.native: 'label' is a required property" in capsys.readouterr().err
    assert not out.exists()


def test_a_result_written_by_the_runner_is_accepted(tmp_path):
    """The runner's real output meets the schema (on this machine's CPU, one tiny job)."""
    pytest.importorskip("torch")
    from fabench.measure.job import run_job

    config = json.loads((FIXTURES / "config.json").read_text())
    config.update(warmup=1, iters=2, cpu={"warmup": 0, "iters": 1}, backends=["native", "ck", "sdpa"])
    shape = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
    path = tmp_path / "b1-s64-h2-d32.json"
    path.write_text(json.dumps(run_job(config, "tuned", shape, None, "test")))
    collected = collect([path])
    assert collected["results"][0]["backends"]["ck"]["status"] == "unavailable"
    if collected["results"][0]["platform"] == "cpu":  # the Triton role (flex) was not run at all
        assert "| not run [1] |" in render(collected, config, None)
