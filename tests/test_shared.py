"""Backends measured once per shape (fabench.results.shared): a backend whose kernel reads no variant
config is measured in the first variant's job alone, kept once in results.json, and shown in every
variant's table and plot, the report saying so.

Blind side: that native and SDPA really read no variant config is their registration's word
(reads_variant_config); these tests check what follows from the flag, not the flag itself."""

from __future__ import annotations

import copy
import json

import pytest

from fabench.measure import timeline
from fabench.measure.backends.registry import BACKENDS
from fabench.measure.job import run_job, shared_here
from fabench.measure.spec import job_spec
from fabench.report.model import Run
from fabench.report.render import render
from fabench.results.collect import ResultError, collect
from fabench.results.shared import SHARED_KEY, measured_once, shared_problems, shown
from fabench.report.wall_clock import trial_stops
from support.runs import CUDA_13_0, config_for, make_result
from workflow_util import tiny_config

SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
SHAPES = [{"batch": 4, "seq": 512, "heads": 8, "head_dim": 256}, {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 256}]


def test_the_registration_says_which_backends_read_the_variant_config():
    reads = {name: backend.reads_variant_config for name, backend in BACKENDS.items()}
    assert not any(reads[n] for n in ("native", "sdpa", "sdpa_cudnn", "sdpa_flash", "fa4"))
    assert reads["triton"] and reads["flex"]  # aiter's patched file; FlexAttention's kernel_options


def test_the_plan_shares_from_the_first_variant_only():
    from test_plan import cpu_plan

    plan = cpu_plan()
    first, *others = plan.variants
    specs = {v: json.loads(plan.job_spec_json(next(iter(plan.runs)), v, next(iter(plan.shapes)))) for v in plan.variants}
    assert specs[first]["shared_from"] is None and others
    assert all(specs[v]["shared_from"] == first for v in others)


def test_a_job_that_shares_leaves_those_backends_out_and_makes_no_inputs_when_nothing_is_left():
    config = tiny_config(backends=["native", "sdpa", "triton"])  # aiter's Triton kernel reads the variant's config
    spec = job_spec(config, "tuned", SHAPE, shared_from="default")
    assert shared_here(spec) == ["native", "sdpa"]
    result = run_job(spec, None, "test")
    assert list(result["backends"]) == ["triton"] and result["backends"]["triton"]["status"] == "unavailable"
    assert result[SHARED_KEY] == {"measured_in": "default", "backends": ["native", "sdpa"]}
    phases = {p["phase"] for p in timeline.current().record()["phases"]}  # this job's, just recorded
    assert "device set-up" in phases and "inputs and fp32 reference" not in phases  # triton cannot run here: no fp32 reference made for nothing


def test_the_measuring_job_measures_every_backend():
    config = tiny_config(backends=["native", "ck"])
    result = run_job(job_spec(config, "default", SHAPE), None, "test")
    assert result["backends"]["native"]["status"] == "ok" and SHARED_KEY not in result


def shared_run(tmp_path, drop_from_default: bool = False) -> list:
    """Result files of a CUDA run whose tuned jobs share native and SDPA's two pinned backends."""
    paths = []
    for variant in ("default", "tuned"):
        for shape in SHAPES:
            result = make_result("h200", variant, shape, CUDA_13_0)
            if variant == "tuned":
                for name in ("native", "sdpa_cudnn"):
                    del result["backends"][name]
                result[SHARED_KEY] = {"measured_in": "default", "backends": ["native", "sdpa_cudnn"]}
            elif drop_from_default:
                del result["backends"]["sdpa_cudnn"]
            path = tmp_path / variant / f"{result['shape_id']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result))
            paths.append(path)
    return paths


def test_collect_keeps_each_shared_cell_once_and_the_report_shows_it_in_every_table(tmp_path):
    collected = collect(shared_run(tmp_path), ["default", "tuned"])
    tuned = [r for r in collected["results"] if r["variant"] == "tuned"]
    assert all("native" not in r["backends"] for r in tuned)  # the intervals pooled it once
    view = shown(collected)
    for result in (r for r in view["results"] if r["variant"] == "tuned"):
        source = next(r for r in collected["results"] if r["variant"] == "default" and r["shape_id"] == result["shape_id"])
        assert list(result["backends"]) == list(source["backends"])  # the measuring job's order
        native = result["backends"]["native"]
        assert native["measured_in"] == "default" and native["stats"] == source["backends"]["native"]["stats"]
    assert collected["results"][-1]["backends"].get("native") is None  # shown() copies, never changes its input
    assert measured_once(collected) == {"default": ["native", "sdpa_cudnn"]}
    run = Run(collected, config_for("h200", SHAPES, ["default", "tuned"]))
    assert sum(1 for _, name, _ in run.ran_backends() if name == "native") == len(SHAPES)  # listed once per shape


def test_the_report_says_what_was_measured_once(tmp_path):
    collected = collect(shared_run(tmp_path), ["default", "tuned"])
    text = render(collected, config_for("h200", SHAPES, ["default", "tuned"]))
    assert ("**Measured once per shape**: Native (`native`), SDPA (cuDNN) (`sdpa_cudnn`) read no variant config, "
            "so each was measured once per shape, in the jobs of Default config") in text
    tuned_table = text.split("#### After Tuning")[1].split("\n\n")[2]
    assert tuned_table.startswith("| Config (B,S,H,D) | Native (ms) | SDPA (cuDNN) (ms) |")


def test_a_shared_backend_missing_from_its_measuring_result_is_named(tmp_path):
    with pytest.raises(ResultError, match=r"tuned/b4-s512-h8-d256: \$.shared_backends: sdpa_cudnn measured in 'default'"):
        collect(shared_run(tmp_path, drop_from_default=True), ["default", "tuned"])


def test_a_backend_both_measured_and_shared_is_named():
    default = make_result("h200", "default", SHAPES[0], CUDA_13_0)
    tuned = copy.deepcopy(make_result("h200", "tuned", SHAPES[0], CUDA_13_0))
    tuned[SHARED_KEY] = {"measured_in": "default", "backends": ["native"]}
    assert shared_problems([default, tuned]) == [
        "tuned/b4-s512-h8-d256: $.backends.native: measured here and shared from 'default'"]


def test_the_report_counts_each_trials_stop_once():
    default = make_result("h200", "default", SHAPES[0], CUDA_13_0)
    for trial in default["backends"]["native"]["trials"]:
        trial["stop"] = {"stopped": "timeout", "samples": 10, "settle_reachable": False}
    tuned = make_result("h200", "tuned", SHAPES[0], CUDA_13_0)
    del tuned["backends"]["native"]
    tuned[SHARED_KEY] = {"measured_in": "default", "backends": ["native"]}
    view = shown({"results": [default, tuned]})["results"]
    counts = trial_stops(view)
    assert counts["timeout"] == len(default["backends"]["native"]["trials"])
    assert counts["timeout_settle_out_of_reach"] == counts["timeout"]


def test_the_report_names_only_shared_backends_that_ran(tmp_path):
    """SDPA (`sdpa`) is unavailable in this fixture (not a role on cuda): shared, but never measured,
    so the sentence leaves it to the list of unavailable backends."""
    paths = shared_run(tmp_path)
    for path in paths:
        result = json.loads(path.read_text())
        if SHARED_KEY in result:
            del result["backends"]["sdpa"]
            result[SHARED_KEY]["backends"].append("sdpa")
            path.write_text(json.dumps(result))
    text = render(collect(paths, ["default", "tuned"]), config_for("h200", SHAPES, ["default", "tuned"]))
    line = next(line for line in text.splitlines() if line.startswith("**Measured once per shape**"))
    assert "Native (`native`), SDPA (cuDNN) (`sdpa_cudnn`) read" in line and "(`sdpa`)" not in line
