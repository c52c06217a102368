"""The detector check (fabench detector-check), through the command a user runs on their archives.

Two kinds of runs, kept apart by the calibration (src/fabench/analysis/calibrations.yaml):
- the runs the fit was made on (examples/h200/archive, examples/h100-2026-11-25/archive): the check
  there is in-sample, a regression golden (examples/h200/detector-check.md), and the noise
  components it estimates are the fit's values;
- the runs held out of every fit (examples/h100-x2-2026-11-25, examples/h200-x2-2026-11-27): issue
  36's acceptance is measured there, every row as issued, and docs/archive.md's trade-off table
  is the command's output on them.
Blind side: the held-out runs are seven runs on two GPU models of one driver and software stack;
they say nothing of another driver, another model or another experiment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fabench.analysis.detector import binomial_bound, injected
from fabench.analysis import analyse_run
from support.shared_runs import h100_archive

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "h200"


def run_cli(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def detector_check(tmp_path, *roots: Path) -> tuple[dict, str]:
    md, js = tmp_path / "check.md", tmp_path / "check.json"
    done = run_cli(tmp_path, "detector-check", *(f"--root={root}" for root in roots), "--out-md", str(md),
                   "--out-json", str(js))
    assert done.returncode == 0, done.stderr
    return json.loads(js.read_text()), md.read_text()


def unpacked(tmp_path, *archives: Path) -> list[Path]:
    """Each committed archive tarball unpacked into a folder of its own: its archive root."""
    roots = []
    for i, archive in enumerate(archives):
        with tarfile.open(archive) as tar:
            tar.extractall(tmp_path / f"held-{i}", filter="data")
        roots.append(tmp_path / f"held-{i}" / "archive")
    return roots


def test_the_check_on_the_fits_own_runs_is_in_sample_and_gives_the_fits_components(tmp_path):
    from fabench.analysis import calibration
    from fabench.analysis.components import between_runs
    from fabench.results.archive_read import list_entries
    from fabench.results.compare import usable_results

    fits = {fit["name"]: fit for fit in calibration.calibrations().values()}
    fitted = {(REPO / run["archive"] / run["entry"]).resolve() for fit in fits.values() for run in fit["runs"]}
    checked = {p.parent.resolve() for root in (EXAMPLE / "archive", h100_archive()) for p in root.glob("*/*/results.json")}
    assert checked == fitted and len(fits) == 1
    check, markdown = detector_check(tmp_path, EXAMPLE / "archive", h100_archive())
    assert check["acceptance_on"] == "in-sample" and {r["scope"] for r in check["runs"]} == {"fitted"}
    assert {p["scope"] for p in check["pairs"]} == {"in-sample"}
    # The fit's between-run and between-card components are what the components give on its runs,
    # pooled over both GPU models' pairs (calibrations.yaml `pooled`), to the fourth decimal.
    runs = [(e.id + str(root), analyse_run({"results": usable_results(e)[0]})["results"])
            for root in (EXAMPLE / "archive", h100_archive()) for e in list_entries(root)]
    found = between_runs(runs)
    (fit,) = fits.values()
    assert (round(found["between_run"], 4), round(found["between_card"], 4)) == (fit["between_run"], fit["between_card"])
    assert found["pairs"] == {"same card": 2, "other card": 2}
    assert check["rule"]["margin"] == fit["margin"] and check["rule"]["fit"] == fit["name"]
    assert all(p["other_code"] == [] for p in check["pairs"])  # identical software: every cell a repeat
    # The committed output is this command's output on these runs.
    assert markdown == (EXAMPLE / "detector-check.md").read_text()


def test_the_held_out_acceptance_as_issued_and_the_trade_off_in_the_docs(tmp_path):
    """Issue 36's acceptance on the seven runs no fit named, every row as issued (no row dropped,
    no limit loosened). Rows that do not hold are asserted at their measured values, with the
    trade-off that shows no design tried meets them all; docs/archive.md holds that table as the
    command writes it."""
    from fabench.analysis.detector import DONE_WHEN

    roots = unpacked(tmp_path, REPO / "examples" / "h100-x2-2026-11-25" / "archive-0001.tar.gz",
                     REPO / "examples" / "h200-x2-2026-11-27" / "archive.tgz")
    md, js = tmp_path / "held.md", tmp_path / "held.json"
    done = run_cli(tmp_path, "detector-check", *(f"--root={root}" for root in roots), "--trade-off",
                   "--out-md", str(md), "--out-json", str(js))
    assert done.returncode == 0, done.stderr
    check = json.loads(js.read_text())
    assert len(check["runs"]) == 7 and {r["scope"] for r in check["runs"]} == {"held out"}
    assert check["acceptance_on"] == "held out" and len(check["pairs"]) == 9  # 6 H100 pairs, 3 H200
    rows = {item["name"]: item for item in check["done_when"]}
    assert list(rows) == list(DONE_WHEN)  # every row as issued
    assert {name: (item["limit"], item["holds"]) for name, item in rows.items() if name != "pi_misses"} == {
        "answered": (0.90, False), "flagged": (0, False), "unstable_per_run": (0.05, False),
        "+2%": (0.90, False), "+5%": (0.95, False), "+5% stable": (1.0, False)}
    # Measured (the lead reports these): the prediction interval holds; the rest do not.
    assert rows["pi_misses"]["holds"] and rows["pi_misses"]["value"] == 44 and rows["pi_misses"]["limit"] == 66
    # Of 540 cells: Triton default (4,2048,8,256) m6 against w6 and c6, SDPA default (4,1024,8,64) m6 against w6.
    assert rows["flagged"]["value"] == 3
    assert rows["answered"]["value"] == pytest.approx(316 / 540)
    assert rows["unstable_per_run"]["value"] == pytest.approx(0.15)  # c1, the run disturbed by the GPU tests
    assert rows["+2%"]["value"] == pytest.approx(807 / 1080) and rows["+5%"]["value"] == pytest.approx(931 / 1080)
    # No design of the trade-off meets every row, and none flags nothing with +2% flagged in 90%.
    assert check["trade_off"] and not any(row["holds"] for row in check["trade_off"])
    assert not any(row["figures"]["flagged"] == 0 and row["figures"]["+2%"] >= 0.9 for row in check["trade_off"])
    # docs/archive.md's tables are this command's output, on both archives and on the H200's alone.
    docs = (REPO / "docs" / "archive.md").read_text()
    alone = run_cli(tmp_path, "detector-check", f"--root={roots[1]}", "--trade-off", "--out-md", str(tmp_path / "h200.md"))
    assert alone.returncode == 0, alone.stderr
    for markdown in (md.read_text(), (tmp_path / "h200.md").read_text()):
        for title, end in (("| Figure | Measured", "\n\n## Summary"), ("| Design |", "\n\n## Pairs")):
            table = markdown[markdown.index(title):markdown.index(end)]
            assert table in docs, title
    table = md.read_text()[md.read_text().index("| Hardware | Runs |"):md.read_text().index("\n\n## Acceptance")]
    assert table in docs


def test_the_check_measures_the_rule_of_the_users_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("comparison:\n  margin: 0.05\n")
    check, markdown = detector_check(tmp_path, EXAMPLE / "archive")
    wide = json.loads(run_cli(tmp_path, "detector-check", "--root", str(EXAMPLE / "archive"), "--configfile",
                              str(config), "--out-md", str(tmp_path / "w.md"), "--out-json",
                              str(tmp_path / "w.json")).returncode == 0 and (tmp_path / "w.json").read_text())
    assert wide["rule"]["margin"] == 0.05 and "margin 5.00%" in (tmp_path / "w.md").read_text()
    # A 5% margin cannot flag +2%: the check measures the rule the config sets, not a rule of its own.
    assert wide["summary"]["+2%"]["flagged_share"]["ours"] < 0.1 < check["summary"]["+2%"]["flagged_share"]["ours"]
    retired = tmp_path / "old.yaml"
    retired.write_text("archive:\n  threshold: 0.05\n")
    refused = run_cli(tmp_path, "detector-check", "--root", str(EXAMPLE / "archive"), "--configfile", str(retired))
    assert refused.returncode == 2 and "archive.threshold is no longer read: set comparison.margin" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


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
    from fabench.analysis.policy import Rule
    from fabench.results.archive_read import list_entries
    from fabench.results.compare import compare_entries

    comparison = compare_entries(list_entries(EXAMPLE / "archive"), Rule.of({}))  # the policy's defaults
    steps = {(s["variant"], s["shape_id"], s["backend"]): s for s in comparison["steps"]}
    step = steps[("default", "b4-s4096-h8-d256", "sdpa")]
    assert step["before"].endswith("0002-7a004542") and step["after"].endswith("0003-25eb76a9")
    assert step["card_changed"] and 1.01 < step["ratio"] < 1.03 and step["runs"] == 3
    assert all(s["card_changed"] for s in steps.values())  # no step where only the software moved
