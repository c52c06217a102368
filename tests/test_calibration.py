"""The comparison rule's calibration as data (src/fabench/analysis/calibrations.yaml): per hardware
identity, with the fit and the archived runs it came from; verdicts the rule makes on hardware
without one say so, and the comparison page names that hardware in one line."""

from __future__ import annotations

import json

import pytest

from fabench.analysis import analyse_run, calibration, noise, policy
from fabench.analysis.identity import hardware_identity, hardware_key
from fabench.analysis.policy import Rule
from fabench.report.compare_markdown import render_markdown
from fabench.results.archive_read import list_entries
from fabench.results.compare import compare_entries
from workflow_util import REPO

H200 = REPO / "examples" / "h200" / "archive"
MI300X = {"platform": "rocm", "device": "AMD Instinct MI300X", "arch": "gfx942", "cards": ["GPU-x"]}


def analysed(entry: str) -> list[dict]:
    return analyse_run(json.loads((H200 / entry / "results.json").read_text()))["results"]


def test_the_policys_defaults_are_the_calibrated_values():
    """Rule's margin and the noise model's floor are what the fits say: one changed without the other fails."""
    fits = list(calibration.calibrations().values())
    assert fits and all(fit["margin"] == Rule().margin and fit["floor"] == noise.FLOOR for fit in fits)


def test_every_calibration_names_real_runs_and_at_least_one_of_its_own_hardware():
    for key, fit in calibration.calibrations().items():
        own = []
        for run in fit["runs"]:
            entry = REPO / run["archive"] / run["entry"]
            results = json.loads((entry / "results.json").read_text())["results"]
            assert (entry / "SHA256SUMS").is_file() and str(run["measured"]) in results[0]["method"]["process_exits"][0]["started"]
            own.append(hardware_key(hardware_identity(results)) == key)
        assert any(own), key  # a calibration fitted on other hardware only would be none


def test_a_verdict_by_the_rule_says_whether_its_hardware_is_calibrated():
    old, new = analysed("cuda-13.0/0001-d37d7e44"), analysed("cuda-13.0/0002-7a004542")
    h200 = hardware_identity(old)
    pairs = [(a["backends"][name], b["backends"][name]) for a, b in zip(old, new) for name in a["backends"]
             if a["backends"][name]["status"] == "ok"]
    by_rule = [policy.judge(a, b, Rule(), hardware=(h200, h200)) for a, b in pairs]
    by_rule = [v for v in by_rule if "calibrated" in v]
    assert by_rule and all(v["calibrated"] is True and v["hardware_key"] == list(hardware_key(h200)) for v in by_rule)
    elsewhere = [policy.judge(a, b, Rule(), hardware=(MI300X, MI300X)) for a, b in pairs]
    elsewhere = [v for v in elsewhere if "calibrated" in v]
    assert len(elsewhere) == len(by_rule)
    assert all(v["calibrated"] is False and v["hardware_key"] == ["rocm", "AMD Instinct MI300X", "gfx942"]
               for v in elsewhere)


def test_the_comparison_names_uncalibrated_hardware_in_one_line():
    comparison = compare_entries(list_entries(H200), Rule())
    assert comparison["calibration"]["uncalibrated"] == [] and comparison["calibration"]["line"] is None
    assert "Uncalibrated" not in render_markdown(comparison)
    comparison["calibration"] = calibration.coverage([comparison["entries"][0]["hardware"], MI300X])
    assert comparison["calibration"]["uncalibrated"] == ["rocm AMD Instinct MI300X gfx942"]
    lines = [line for line in render_markdown(comparison).splitlines() if "Uncalibrated" in line]
    assert len(lines) == 1 and "AMD Instinct MI300X" in lines[0]


def test_a_broken_calibration_file_is_refused_naming_the_entry(tmp_path, monkeypatch):
    bad = tmp_path / "calibrations.yaml"
    bad.write_text("fits: {f: {margin: 0.01}}\ncalibrations: []\n")
    monkeypatch.setattr(calibration, "CALIBRATIONS", bad)
    calibration.calibrations.cache_clear()
    try:
        with pytest.raises(calibration.CalibrationError, match=r"^calibrations.yaml: fits.f: floor missing"):
            calibration.calibrations()
    finally:
        calibration.calibrations.cache_clear()
