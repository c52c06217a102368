"""`snakemake --cores 1 report` end to end on this CPU, on small shapes."""

import json

import pytest

from fabench.container.aiter_config import file_sha256
from workflow_util import snakemake, tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("workflow")
    config = tiny_config()
    proc = snakemake(directory, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return directory, config


def test_report_is_rendered_from_every_job(tiny_run):
    directory, config = tiny_run
    run_dir = directory / "results" / config["run"]
    collected = json.loads((run_dir / "results.json").read_text())
    jobs = {(r["variant"], r["shape_id"]) for r in collected["results"]}
    assert jobs == {(v, s) for v in ("default", "tuned") for s in ("b1-s64-h2-d32", "b1-s128-h2-d64")}
    report = (run_dir / "report.md").read_text()
    for title in (config["variants"]["default"]["title"], config["variants"]["tuned"]["title"]):
        assert f"#### {title}" in report
    assert "| Config (B,S,H,D) | Native (ms) | SDPA (ms) | FlexAttention (ms) |" in report
    assert "| (1, 64, 2, 32) |" in report and "| (1, 128, 2, 64) |" in report  # rows come from the results
    assert "(4, 512, 8, 256) |" not in report.split("### Published vs Reproduced")[0]  # no fixed shapes
    assert "needs a GPU" in report  # unavailable backends say why


def test_each_result_names_the_patched_config_it_measured(tiny_run):
    directory, config = tiny_run
    for variant in ("default", "tuned"):
        patched = directory / "results" / config["run"] / "aiter-config" / f"{variant}.json"
        result = json.loads((directory / "results" / config["run"] / variant / "b1-s64-h2-d32.json").read_text())
        assert result["kernel_config"]["sha256"] == file_sha256(patched)
        assert result["kernel_config"]["values"] == config["variants"][variant]["triton"]
        assert result["provenance"]["project_commit"] not in (None, "", "unknown")


def test_second_run_has_nothing_to_do(tiny_run):
    directory, config = tiny_run
    proc = snakemake(directory, "--cores", "1", "report", config=config)
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_a_title_change_rerenders_without_rerunning_benchmarks(tiny_run):
    directory, config = tiny_run
    config = json.loads(json.dumps(config))
    config["variants"]["tuned"]["title"] = "After tuning, renamed"
    proc = snakemake(directory, "-n", "report", config=config)
    assert proc.returncode == 0, proc.stderr
    assert "render_report" in proc.stdout and "rule benchmark" not in proc.stdout


def test_a_failing_backend_leaves_the_run_and_report_whole(tmp_path):
    config = tiny_config(tolerance={"max_abs_err": 1e-5, "min_cosine": 0.999},
                         shapes=[{"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}], variants={
                             "only": {"title": "Only variant", "triton": {"BLOCK_M": 64, "BLOCK_N": 32}}})
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()
    assert "| (1, 64, 2, 32) | " in report and "| failed: wrong result [1] |" in report
    assert "wrong numbers: max abs err" in report and "(tolerance 1e-05)" in report
    assert "### Appendix: Full Benchmark Output" in report  # the rest of the report is whole
