"""The README's CI gate (`fabench compare OLD NEW --fail-on regression`) on real archived runs: it
passes on every committed pair of runs of unchanged code on one card, and fails (exit 3) on a run
made 5% slower with tools/scale_run.py and stored with `fabench archive store`, whichever of the two
entries the archive numbered first: the entries are judged in the order named.

Blind side: the unchanged pairs are the committed ones (two GPU models, one driver); a pair on
other cards passes at its own, wider margin, which these archives do not test for every kind."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabench.analysis import calibration, policy
from fabench.results.archive_read import list_entries
from fabench.results.compare import usable_results
from fabench.results.named_runs import archive_root

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "examples" / "h200" / "archive"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def same_card_pairs(tmp_path: Path) -> list[tuple[Path, str, str]]:
    """(archive root, old id, new id) of every committed pair of one experiment on one card whose
    cells ran the same code (unchanged software)."""
    (fit,) = {f["name"]: f for f in calibration.calibrations().values()}.values()
    roots = sorted({archive_root(run["archive"], REPO, tmp_path) for run in fit["runs"] + fit["validation"]}, key=str)
    found = []
    for root in roots:
        runs = [(e.id, usable_results(e)[0]) for e in list_entries(root)]
        for (i, a), (j, b) in itertools.combinations(runs, 2):
            ha, hb = policy.hardware_identity(a), policy.hardware_identity(b)
            if policy.pair_type(ha, hb) != policy.PairType.SAME_CARD or policy.experiment_differences(a, b):
                continue
            cells = lambda rs: {(r["variant"], r["shape_id"], n): e for r in rs for n, e in r["backends"].items()}
            x, y = cells(a), cells(b)
            if all(policy.same_code(x[k], y[k]) for k in set(x) & set(y) if x[k]["status"] == "ok" == y[k]["status"]):
                found.append((root, i, j))
    return found


def test_the_gate_passes_every_committed_unchanged_same_card_pair(tmp_path):
    pairs = same_card_pairs(tmp_path)
    assert len(pairs) >= 8
    failed = []
    for root, old, new in pairs:
        done = cli(tmp_path, "-m", "fabench.cli", "compare", "--root", str(root), old, new, "--fail-on",
                   "regression", "--out-md", os.devnull)
        if done.returncode != 0:
            failed.append((old, new, done.returncode, done.stderr.strip().splitlines()[-1]))
    assert failed == []


@pytest.mark.parametrize("slower_first", [False, True])
def test_the_gate_fails_on_a_slowdown_whichever_entry_was_numbered_first(tmp_path, slower_first):
    entry = H200 / "cuda-13.0" / "0002-7a004542"
    slower = tmp_path / "slower"
    done = cli(tmp_path, str(REPO / "tools" / "scale_run.py"), str(entry), str(slower), "--factor", "1.05",
               "--run", "slower")
    assert done.returncode == 0, done.stderr
    same = tmp_path / "same"
    done = cli(tmp_path, str(REPO / "tools" / "scale_run.py"), str(entry), str(same), "--factor", "1", "--run", "same")
    assert done.returncode == 0, done.stderr
    root = tmp_path / "archive"
    ids = {}
    for name in (("slower", "same") if slower_first else ("same", "slower")):
        stored = cli(tmp_path, "-m", "fabench.cli", "archive", "store", str(tmp_path / name), "--root", str(root))
        assert stored.returncode == 0, stored.stderr
        ids[name] = next(e.id for e in list_entries(root) if e.id not in ids.values())
    gate = cli(tmp_path, "-m", "fabench.cli", "compare", "--root", str(root), ids["same"], ids["slower"], "--fail-on",
               "regression", "--out-json", str(tmp_path / "c.json"), "--out-md", os.devnull)
    assert gate.returncode == 3, gate.stderr
    comparison = json.loads((tmp_path / "c.json").read_text())
    assert comparison["baseline"] == ids["same"]
    codes = [f["code"] for f in comparison["flags"]]
    assert codes.count("regression") >= 35 and "improvement" not in codes  # capped cells: +5% is within their margin
