"""The detector check on the committed H200 runs (examples/h200/archive), through the command a
user runs on their own archive: its figures, and the committed output it reproduces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabench.analysis.detector import binomial_bound, injected
from fabench.analysis import analyse_run

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "h200"


def detector_check(tmp_path) -> tuple[dict, str]:
    md, js = tmp_path / "check.md", tmp_path / "check.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "fabench.cli", "detector-check", "--root", str(EXAMPLE / "archive"),
                           "--out-md", str(md), "--out-json", str(js)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(js.read_text()), md.read_text()


def test_on_the_committed_h200_runs_the_detector_holds_its_figures(tmp_path):
    check, markdown = detector_check(tmp_path)
    same = check["summary"]["same card"]
    assert same["pairs"] == 2 and same["cells"] == 100
    assert same["false_alarms_per_100"]["ours"] <= 1  # re-runs on one card: at most 1 cell in 100
    assert same["pi_within_bound"]  # the prediction interval holds on every same-card pair
    assert check["summary"]["+2%"]["flagged_share"]["ours"] >= 0.9  # +2% seen in 90% of stable cells
    assert check["summary"]["+5%"]["flagged_share"]["ours"] >= 0.99
    assert check["summary"]["+5%"]["flagged_share"]["asv"] == 0  # asv's 1.1 factor cannot see 5%
    assert "other card" in check["summary"]  # run 0003 is another card of the model: counted apart
    # The committed output is this command's output on the committed runs.
    assert markdown == (EXAMPLE / "detector-check.md").read_text()


def test_an_injected_change_scales_every_trial_and_the_run_is_analysed_again():
    trials = [{"process": p, "index": i, "iters": 100, "wall_mean_ms": 1.0 + i / 100, "device_ms": 0.5 + p / 1000,
               "warmup_iters": 10, "gpu_state": None} for p in (0, 1) for i in range(3)]
    result = {"schema_version": 3, "variant": "v", "shape_id": "b1-s1-h1-d1", "platform": "cuda", "flops": 1e9,
              "reference": {"status": "ok"}, "method": {"stable_spread": 0.03, "cross_check": {"tolerance": 0.03}},
              "backends": {"x": {"status": "ok", "trials": trials, "observations": {"notes": []}}},
              "provenance": {}}
    before = analyse_run({"results": [json.loads(json.dumps(result))]})["results"][0]["backends"]["x"]
    after = injected([result], 1.02)[0]["backends"]["x"]
    assert after["stats"]["device_ms"]["median"] / before["stats"]["device_ms"]["median"] == pytest.approx(1.02)
    assert [t["device_ms"] for t in after["trials"]] == [t["device_ms"] * 1.02 for t in trials]
    assert result["backends"]["x"]["trials"] == trials  # the run given is left as it was


def test_the_binomial_bound_of_a_calibrated_interval():
    assert binomial_bound(50) == 5  # P(Bin(50, 5%) > 5) = 3.8%, P(> 4) = 10.4%
    assert binomial_bound(0) == 0


def test_a_step_across_the_committed_runs_is_named_where_the_card_changed():
    from fabench.results.archive_read import list_entries
    from fabench.results.compare import compare_entries

    comparison = compare_entries(list_entries(EXAMPLE / "archive"))
    steps = {(s["variant"], s["shape_id"], s["backend"]): s for s in comparison["steps"]}
    step = steps[("default", "b4-s4096-h8-d256", "sdpa")]
    assert step["before"].endswith("0002-7a004542") and step["after"].endswith("0003-25eb76a9")
    assert step["card_changed"] and 1.01 < step["ratio"] < 1.03 and step["runs"] == 3
    assert all(s["card_changed"] for s in steps.values())  # no step where only the software moved
