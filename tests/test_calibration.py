"""The comparison rule's calibration as data (src/fabench/analysis/calibrations.yaml): per hardware
identity, with the fit and the archived runs it came from; verdicts the rule makes on hardware
without one say so, and the comparison page names that hardware in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import os

import pytest

from fabench.analysis import analyse_run, calibration, policy
from fabench.analysis.identity import PairType, hardware_identity, hardware_key
from fabench.analysis.policy import Rule
from fabench.report.compare_markdown import render_markdown
from fabench.results.archive_read import list_entries
from fabench.results.compare import compare_entries
from workflow_util import REPO

H200 = REPO / "examples" / "h200" / "archive"
MI300X = {"platform": "rocm", "device": "AMD Instinct MI300X", "arch": "gfx942", "cards": ["GPU-x"]}


def analysed(entry: str) -> list[dict]:
    return analyse_run(json.loads((H200 / entry / "results.json").read_text()))["results"]


def yaml_with(tmp_path, monkeypatch, edit) -> None:
    """calibrations.yaml as shipped, changed by `edit` (on its data), read in its place."""
    import yaml

    data = yaml.safe_load(calibration.CALIBRATIONS.read_text())
    edit(data)
    path = tmp_path / "calibrations.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(calibration, "CALIBRATIONS", path)
    calibration.calibrations.cache_clear()


@pytest.fixture(autouse=True)
def _read_again():
    calibration.calibrations.cache_clear()
    yield
    calibration.calibrations.cache_clear()


def same_card_margin(data: dict, margin: float) -> None:
    data["fits"][data["fallback"]]["pair_types"]["same card"]["steady"]["margin"] = margin


def test_the_rule_takes_its_fitted_values_from_the_calibration_and_a_margin_there_changes_verdicts(tmp_path, monkeypatch):
    old, new = analysed("cuda-13.0/0001-d37d7e44"), analysed("cuda-13.0/0002-7a004542")
    h200 = hardware_identity(old)
    fit = calibration.calibration_for(h200)
    rule = Rule.of({}, h200)
    assert rule.fit == fit["name"] and rule.margin is None
    for kind in PairType:
        values = calibration.pair_values(fit, str(kind))
        pair = rule.for_pair(kind)
        assert (pair.steady.margin, pair.steady.scale, pair.steady.variance) == (
            values["steady"]["margin"], values["steady"]["scale"], values["steady"]["noise"] ** 2)
        assert (pair.capped.margin, pair.capped.variance) == (values["capped"]["margin"], values["capped"]["noise"] ** 2)
    entry = next(b for r in new for b in r["backends"].values() if b["status"] == "ok" and b["stats"].get("stable"))
    slower = json.loads(json.dumps(entry))
    for figure in ("device_ms", "wall_mean_ms", "device_cycles"):  # a slower kernel, in cycles too
        if slower["stats"].get(figure):
            slower["stats"][figure]["median"] *= 1.03
    assert policy.judge(entry, slower, Rule.of({}), hardware=(h200, h200))["code"] == policy.Code.REGRESSION
    # The same +3% under a fit whose same-card margin is 5%: within it. Nothing else read the value.
    yaml_with(tmp_path, monkeypatch, lambda d: same_card_margin(d, 0.05))
    verdict = policy.judge(entry, slower, Rule.of({}), hardware=(h200, h200))
    assert verdict["code"] != policy.Code.REGRESSION and verdict["values"]["margin"] == 0.05
    assert verdict["calibrated"] is True


def test_the_noise_floor_is_read_from_the_calibration(tmp_path, monkeypatch):
    before = analysed("cuda-13.0/0001-d37d7e44")
    yaml_with(tmp_path, monkeypatch, lambda d: d["fits"][d["fallback"]].update(floor=0.05))
    after = analysed("cuda-13.0/0001-d37d7e44")
    sigma = [[e["stats"][e["stats"]["judged"]]["noise"]["sigma"] for r in run for e in r["backends"].values()
              if e["status"] == "ok" and e["stats"][e["stats"]["judged"]].get("noise")] for run in (before, after)]
    assert all(b < 0.05 <= a for b, a in zip(*sigma))


def test_calibrated_only_when_the_rule_is_the_fits():
    old, new = analysed("cuda-13.0/0001-d37d7e44"), analysed("cuda-13.0/0002-7a004542")
    h200 = hardware_identity(old)
    pairs = [(a["backends"][n], b["backends"][n]) for a, b in zip(old, new) for n in a["backends"]
             if a["backends"][n]["status"] == "ok"]
    fit = Rule.of({})
    by_hand = Rule.of({"comparison": {"margin": 0.2}})  # what `--margin 0.2` makes
    for rule, expected in ((fit, True), (by_hand, False)):
        marks = {v.get("calibrated") for v in (policy.judge(a, b, rule, hardware=(h200, h200)) for a, b in pairs)
                 if "calibrated" in v}
        assert marks == {expected}
    # A margin given by hand replaces every pair type's fitted one: not the fit's rule, whatever its value.
    same = Rule.of({"comparison": {"margin": fit.for_pair(PairType.SAME_CARD).margin}})
    assert fit.calibrated_on(h200) and not same.calibrated_on(h200) and not by_hand.calibrated_on(h200)
    assert not fit.calibrated_on(MI300X)


def test_no_fitted_value_is_copied_into_the_source():
    """Each fitted value lives in calibrations.yaml only (a literal of it in src/ would be a second
    source). Blind side: a value written another way (1.35e-2) is not found."""
    values = {repr(v[key]) for fit in calibration.calibrations().values() for kind in fit["pair_types"].values()
              for v in kind.values() for key in ("margin", "noise", "scale") if v[key] not in (0, 0.0, 1.0)}
    values |= {repr(fit["floor"]) for fit in calibration.calibrations().values()}
    found = [(path.name, value) for path in (REPO / "src").rglob("*.py") for value in values
             if re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])", path.read_text())]
    assert values and found == []


def test_every_calibration_names_real_runs_and_at_least_one_of_its_own_hardware(tmp_path):
    from fabench.results.named_runs import named_runs

    for key, fit in calibration.calibrations().items():
        runs = named_runs(fit["runs"] + fit["validation"], REPO, tmp_path)
        assert len(runs) == len(fit["runs"]) + len(fit["validation"])
        for named, (_, results) in zip(fit["runs"] + fit["validation"], runs):
            assert str(named["measured"]) in results[0]["method"]["process_exits"][0]["started"]
        own = [hardware_key(hardware_identity(results)) == key for _, results in runs[:len(fit["runs"])]]
        assert any(own), key  # a calibration fitted on other hardware only would be none


def test_runs_are_fitted_validation_or_test_until_a_fit_names_them(tmp_path, monkeypatch):
    from fabench.analysis.detector import scope_of

    (fit,) = {fit["name"]: fit for fit in calibration.calibrations().values()}.values()
    seen = {run["entry"].split("/")[-1] for run in fit["validation"]}
    assert len(seen) == 8 and {calibration.run_scopes()[r] for r in seen} == {"validation"}
    assert scope_of("cuda-13.0/0009-0123abcd") == "test"  # any run no fit names: a test run
    # A fit that names one of them among its runs makes it fitted (and may not also list it as seen).
    def name_one(data):
        chosen = data["fits"][data["fallback"]]
        chosen["runs"].append(chosen["validation"].pop())
    yaml_with(tmp_path, monkeypatch, name_one)
    assert sorted(calibration.run_scopes().values()).count("fitted") == len(fit["runs"]) + 1


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


def noise_lines(markdown: str) -> list[str]:
    """The page's lines that state each judged pair's kind, margin and noise, with their source."""
    block = markdown.split("**Kinds of pair**", 1)[1].split("\n\n", 1)[0]
    return [line for line in block.splitlines() if line.startswith("- ")]


def test_the_comparison_says_once_per_pair_where_its_values_were_fitted():
    comparison = compare_entries(list_entries(H200), Rule())
    assert comparison["calibration"]["uncalibrated"] == [] and comparison["calibration"]["line"] is None
    lines = noise_lines(render_markdown(comparison))
    assert len(lines) == len(comparison["pairs"]) == 3
    assert all("fitted on this hardware" in line and "other hardware" not in line for line in lines)
    comparison["calibration"] = calibration.coverage([MI300X])  # as if the H200 had no fit of its own
    lines = noise_lines(render_markdown(comparison))
    assert all("fitted on other hardware" in line and "this hardware" not in line for line in lines)


STEADY = "pair_types.same card.steady"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["fits"][d["fallback"]].pop("floor"), "fits.h200-h100-trimmed-mean-2026-11-28: 'floor' is a required property"),
    (lambda d: same_card_margin(d, "1.35%"), f"fits.h200-h100-trimmed-mean-2026-11-28.{STEADY}.margin: '1.35%' is not of type 'number'"),
    (lambda d: same_card_margin(d, 2), f"fits.h200-h100-trimmed-mean-2026-11-28.{STEADY}.margin: 2 is greater than or equal"),
    (lambda d: d["fits"][d["fallback"]]["pair_types"]["same card"]["steady"].update(noise=-0.01),
     f"fits.h200-h100-trimmed-mean-2026-11-28.{STEADY}.noise: -0.01 is less than"),
    (lambda d: d["fits"][d["fallback"]]["pair_types"].pop("same card"), f"fits.h200-h100-trimmed-mean-2026-11-28.pair_types: 'same card' is a required property"),
    (lambda d: d["fits"][d["fallback"]]["pair_types"].update({"next door": {}}), "fits.h200-h100-trimmed-mean-2026-11-28.pair_types: 'next door' is not one of"),
    (lambda d: d["fits"][d["fallback"]].update(runs=[]), "fits.h200-h100-trimmed-mean-2026-11-28.runs: [] should be non-empty"),
    (lambda d: d["fits"][d["fallback"]].update(extra=1), "fits.h200-h100-trimmed-mean-2026-11-28: Additional properties"),
    (lambda d: d.update(fallback="nowhere"), "fallback: 'nowhere' is not a fit named under fits"),
    (lambda d: d["calibrations"][0].update(fit="nowhere"), "calibrations[0].fit: 'nowhere' is not a fit"),
    (lambda d: d["calibrations"][1]["hardware"].pop("arch"), "calibrations[1].hardware: 'arch' is a required property"),
    (lambda d: d["fits"][d["fallback"]]["validation"].append(d["fits"][d["fallback"]]["runs"][0]),
     "validation: cuda-13.0/0001-d37d7e44 is also a run"),
])
def test_a_broken_calibration_file_is_refused_on_one_line_naming_the_key(tmp_path, monkeypatch, edit, message):
    yaml_with(tmp_path, monkeypatch, edit)
    with pytest.raises(calibration.CalibrationError) as err:
        calibration.calibrations()
    assert str(err.value).startswith("calibrations.yaml: ") and message in str(err.value) and "\n" not in str(err.value)


def test_the_command_says_a_broken_calibration_file_in_one_line(tmp_path):
    """Through the installed file's place: a copy of the package with a file missing its floor."""
    import shutil

    package = tmp_path / "src" / "fabench"
    shutil.copytree(REPO / "src" / "fabench", package)
    path = package / "analysis" / "calibrations.yaml"
    path.write_text(path.read_text().replace("    floor: 0.001\n", "", 1))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    done = subprocess.run([sys.executable, "-m", "fabench.cli", "compare", "--root", str(H200), "--out-md",
                           str(tmp_path / "c.md")], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "fabench compare: error: calibrations.yaml: fits.h200-h100-trimmed-mean-2026-11-28: 'floor' is a required property"]


def test_compare_states_each_pair_its_kind_and_the_smallest_change_it_can_see(tmp_path, monkeypatch):
    """One source per pair: the fit's margin for its kind (or the wider kind it falls back to), or
    the config's margin; never an estimate from the very runs judged."""
    fitted = compare_entries(list_entries(H200), Rule.of({}))
    fit = calibration.fallback()
    kinds = {(p["old"].split("/")[-1][:4], p["new"].split("/")[-1][:4]): p for p in fitted["pairs"]}
    assert kinds[("0001", "0002")]["kind"] == "same card" and kinds[("0002", "0003")]["kind"] == "other host"
    for pair in fitted["pairs"]:
        assert pair["margin"] == calibration.pair_values(fit, pair["kind"])["steady"]["margin"]
        assert pair["source"] == f"calibration {fit['name']}"
    markdown = render_markdown(fitted)
    lines = [line for line in markdown.splitlines() if line.startswith("- ") and "cannot be seen" in line]
    assert len(lines) == len(fitted["pairs"]) and "this archive's repeats" not in markdown
    assert all(f"(calibration {fit['name']}, fitted on this hardware)" in line for line in lines)
    verdicts = [c["vs_previous"] for row in fitted["rows"] for c in row["cells"] if c.get("vs_previous")
                and "pair" in c["vs_previous"]["values"]]
    assert verdicts and all(v["values"]["pair"]["kind"] in ("same card", "other host") for v in verdicts)
    chosen = compare_entries(list_entries(H200), Rule.of({"comparison": {"margin": 0.04}}))
    assert {p["margin"] for p in chosen["pairs"]} == {0.04}
    assert {p["source"] for p in chosen["pairs"]} == {"the config (comparison.margin)"}
    yaml_with(tmp_path, monkeypatch, lambda d: d["calibrations"].pop(0))  # the H200 has no fit now
    alone = compare_entries(list_entries(H200), Rule.of({}))
    verdicts = [c["vs_previous"] for row in alone["rows"] for c in row["cells"] if c.get("vs_previous")]
    assert {v.get("calibrated") for v in verdicts if "calibrated" in v} == {False}


def test_fabench_compare_with_a_margin_by_hand_is_not_calibrated(tmp_path):
    """`--margin 0.2` on the calibrated H200: every verdict by the rule says calibrated false; the
    same comparison without it, true."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    marks = []
    for extra in ([], ["--margin", "0.2"]):
        out = tmp_path / f"c{len(extra)}.json"
        done = subprocess.run([sys.executable, "-m", "fabench.cli", "compare", "--root", str(H200), "--out-json",
                               str(out), "--out-md", str(tmp_path / "c.md"), *extra], env=env, capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
        verdicts = [c["vs_previous"] for row in json.loads(out.read_text())["rows"] for c in row["cells"]
                    if c.get("vs_previous") and c["vs_previous"].get("calibrated") is not None]
        marks.append({v["calibrated"] for v in verdicts})
    assert marks == [{True}, {False}]
