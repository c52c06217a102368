"""The noise model's components (fabench.analysis.components), estimated from simulated runs whose
run and card effects are known, and the comparison's verdicts with them: the estimators recover
what was put in, and a whole-run shift that the runs' own processes cannot see is not called a
regression once the rule carries the between-run noise.

Blind side: the simulation is Gaussian in log time, as the model is; the real runs' tails (a few
cells shifting 1.5% in one run) are what docs/archive.md's held-out tables measure."""

from __future__ import annotations

import json
import math
import random

import pytest

from fabench.analysis import analyse_run, policy
from fabench.analysis.components import between_runs, process_cards, run_components, within_process
from fabench.analysis.policy import Code, Rule

CELLS = 40


def simulated_run(rng: random.Random, run: int, cards: list[str], run_sd: float, card_effects: dict,
                  process_sd: float = 0.002, trial_sd: float = 0.001) -> list[dict]:
    """One run of CELLS cells, two processes a cell (one on each of `cards`, or both on the one);
    each cell shifted by its own run effect and by each process's card's effect for that cell."""
    results = []
    for cell in range(CELLS):
        base = 0.05 * 1.1 ** cell
        shift = rng.gauss(0, run_sd)
        trials, exits = [], []
        for process in range(2):
            card = cards[process % len(cards)]
            level = base * math.exp(shift + card_effects[card][cell] + rng.gauss(0, process_sd))
            exits.append({"index": process, "gpu_uuid": card, "exit_code": 0, "wrote_result": True})
            for index in range(5):
                value = level * math.exp(rng.gauss(0, trial_sd))
                trials.append({"process": process, "index": index, "iters": 100, "wall_mean_ms": value * 1.1,
                               "device_ms": value, "warmup_iters": 10, "gpu_state": None})
        results.append({
            "schema_version": 3, "variant": "default", "shape_id": f"b1-s{cell}-h1-d64", "platform": "cuda",
            "flops": 1e9, "reference": {"status": "ok"},
            "method": {"stable_spread": 0.03, "cross_check": {"tolerance": 0.03}, "process_exits": exits},
            "backends": {"x": {"status": "ok", "trials": trials, "observations": {"notes": []}}},
            "provenance": {"gpu": {"uuid": cards[0], "name": "Simulated GPU"}, "device": "Simulated GPU",
                           "arch": "sim_1", "started": f"2026-11-27T00:00:{run:02d}"}})
    return analyse_run({"results": json.loads(json.dumps(results))})["results"]


def effects(rng: random.Random, cards: list[str], sd: float) -> dict:
    return {card: [rng.gauss(0, sd) for _ in range(CELLS)] for card in cards}


def test_the_components_recover_the_run_and_card_effects_put_in():
    rng = random.Random(7)
    card_effects = effects(rng, ["GPU-a", "GPU-b"], 0.006)
    runs = [(f"sim/{i:04d}-0000000{i}", simulated_run(rng, i, [card], 0.004, card_effects))
            for i, card in enumerate(["GPU-a"] * 4 + ["GPU-b"] * 4)]
    found = between_runs(runs)
    assert found["pairs"] == {"same card": 12, "other card": 16}
    assert found["between_run"] == pytest.approx(0.004, rel=0.3)
    assert found["between_card"] == pytest.approx(0.006, rel=0.3)
    # Without effects, nothing is found beyond the process noise.
    quiet = [(f"sim/{i:04d}-0000000{i}", simulated_run(rng, i, ["GPU-a"], 0.0, effects(rng, ["GPU-a"], 0.0)))
             for i in range(4)]
    assert between_runs(quiet)["between_run"] < 0.001


def test_a_run_sees_its_own_processes_and_cards():
    rng = random.Random(3)
    both = simulated_run(rng, 1, ["GPU-a", "GPU-b"], 0.0, effects(rng, ["GPU-a", "GPU-b"], 0.01),
                         process_sd=0.0005, trial_sd=0.002)
    assert process_cards(both[0]) == {0: "GPU-a", 1: "GPU-b"}
    assert policy.hardware_identity(both)["cards"] == ["GPU-a", "GPU-b"]  # each process's card counts
    own = run_components(both)
    assert own["within_process"] == pytest.approx(0.002, rel=0.3)
    # Two cards 1% apart (sd) in every cell: their processes differ by about 0.8% (median |N(0, 1.4%)|).
    assert own["card_pairs"] == CELLS and own["between_card_in_run"] > 0.005
    variance, df = within_process(both[0]["backends"]["x"]["trials"], "device_ms")
    assert df == 8 and math.sqrt(variance) < 0.005


def test_a_whole_run_shift_is_no_regression_once_the_rule_carries_the_between_run_noise():
    """Each run's processes agree to 0.02%, but whole runs shift 1% per cell: by its process noise
    alone the rule calls many cells of two repeats changed; with the between-run noise it does not."""
    rng = random.Random(11)
    flat = effects(rng, ["GPU-a"], 0.0)
    old, new = (simulated_run(rng, i, ["GPU-a"], 0.01, flat, process_sd=0.0002, trial_sd=0.0002) for i in (1, 2))
    hardware = (policy.hardware_identity(old),) * 2
    def changed(rule):
        return sum(policy.judge(a["backends"]["x"], b["backends"]["x"], rule, hardware=hardware)["code"]
                   in (Code.REGRESSION, Code.IMPROVEMENT) for a, b in zip(old, new))
    blind = Rule.of({"comparison": {"between_run": 0.0, "between_card": 0.0, "margin": 0.005}})
    aware = Rule.of({"comparison": {"between_run": 0.01, "between_card": 0.0, "margin": 0.005}})
    assert changed(blind) >= 10 and changed(aware) <= 1


def test_the_report_states_the_components_of_its_run_and_the_calibrations():
    from pathlib import Path

    from fabench.analysis import calibration
    from fabench.report.model import Run
    from fabench.report.sections import precision

    entry = Path(__file__).resolve().parents[1] / "examples" / "h200" / "archive" / "cuda-13.0" / "0003-25eb76a9"
    collected = analyse_run(json.loads((entry / "results.json").read_text()))
    found = precision.context(Run(collected, json.loads((entry / "config.json").read_text())), None)["components"]
    own, fit = run_components(collected["results"]), calibration.fallback()
    assert found == {"within": f"{own['within_process']:.2%}", "between": f"{own['between_process']:.2%}",
                     "cards": None, "run": f"{fit['between_run']:.2%}", "card": f"{fit['between_card']:.2%}",
                     "fit": fit["name"], "calibrated": True}
