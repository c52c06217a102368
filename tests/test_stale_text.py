"""Text that must say what is true (issue 26): the time line of a report rendered again after its
run, and config.yaml's word for a cell's interval. (The merged provenance.finished: test_errors.py;
an edited archive file called "changed": test_archive.py.)"""

from __future__ import annotations

import re

import pytest
import torch
import yaml

from fabench.analysis import analyse_run
from fabench.report.wall_clock import run_time_line
from fabench.report.render import render
from test_runner import run_job
from workflow_util import REPO, tiny_config


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[dict, dict]:
    """A real CPU job with its time line, collected as a run, and its config."""
    config = tiny_config()
    result, _ = run_job(tmp_path_factory.mktemp("job"), config)
    return analyse_run({"run": result["run"], "results": [result]}), config


def span(collected: dict) -> tuple[float, float]:
    [exit_record] = collected["results"][0]["method"]["process_exits"]
    return exit_record["spawned_at"], exit_record["exited_at"]


def time_line_text(report: str) -> str:
    return report.split("### Where the run's time went", 1)[1].split("\n\n", 2)[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="times the CPU path")
def test_a_report_rendered_again_later_says_the_measurements_are_earlier(measured):
    collected, config = measured
    spawned, exited = span(collected)
    later = exited + 51.0  # a re-render, started after the run ended
    line = run_time_line(collected["results"], later, later + 2)
    assert line["before_first_process_s"] is None and line["measured_before_workflow"]
    text = time_line_text(render(collected, config, None, started_at=later))
    assert not re.search(r"-\d+(\.\d+)? s before", text), text
    assert "the measurements are an earlier Snakemake's" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="times the CPU path")
def test_the_run_that_measured_still_says_how_long_before_its_first_process(measured):
    collected, config = measured
    spawned, _ = span(collected)
    text = time_line_text(render(collected, config, None, started_at=spawned - 3.0))
    assert re.search(r"Snakemake ran 3\.\d s before the first measuring process started", text), text


def test_config_yaml_calls_the_interval_what_the_analysis_computes(measured):
    """Not the trials' [min, max]: the analysis's pooled 95% CI, as its ci_method says."""
    collected, _ = measured
    text = (REPO / "config.yaml").read_text()
    method = collected["results"][0]["backends"]["native"]["stats"]["ci_method"]
    assert "pooled" in method and "95%" in method
    comment = text.split("\ncpu:", 1)[0].rsplit("\n\n", 1)[1]
    assert "[min, max]" not in comment and "95% CI" in comment and "pooled" in comment
    assert yaml.safe_load(text)["cpu"]["trials"] == 2  # the count the comment speaks of
