"""The noise model's components (fabench.analysis.components), estimated from simulated runs whose
run, card and host effects are known, and the comparison's verdicts with them: the fit recovers per
kind of pair what was put in, with degrees of freedom that shrink with the runs behind it, narrows
the runs' own noise where it over-explains the changes, and a shift that the runs' own processes
cannot see is not called a regression once the rule carries the pair type's noise.

Blind side: the simulation is Gaussian in log time, as the model is; the real runs' tails (a few
cells shifting 1.5% in one run) are what `fabench detector-check` measures on runs no fit saw."""

from __future__ import annotations

import json
import math
import random

import pytest

from fabench.analysis import analyse_run, policy
from fabench.analysis import calibration, components
from fabench.analysis.components import fit, process_cards, run_components, within_process
from fabench.analysis.identity import PairType
from fabench.analysis.policy import Code, Rule

CELLS = 40


def simulated_run(rng: random.Random, run: int, cards: list[str], run_sd: float, card_effects: dict,
                  process_sd: float = 0.002, trial_sd: float = 0.001, host_cards: list[str] | None = None,
                  whole_run_sd: float = 0.0, order_effects: list[float] | None = None) -> list[dict]:
    """One run of CELLS cells, two processes a cell (one on each of `cards`, or both on the one);
    each cell shifted by its own run effect and by each process's card's effect for that cell."""
    results = []
    whole = rng.gauss(0, whole_run_sd)  # one shift for every cell of the run
    for cell in range(CELLS):
        base = 0.05 * 1.1 ** cell
        shift = whole + rng.gauss(0, run_sd)
        trials, exits = [], []
        for process in range(2):
            card = cards[process % len(cards)]
            order = (order_effects[cell] if process == 0 else -order_effects[cell]) if order_effects else 0.0
            level = base * math.exp(shift + card_effects[card][cell] + order + rng.gauss(0, process_sd))
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
                           "arch": "sim_1", "started": f"2026-11-27T00:00:{run:02d}", "host_cards": host_cards}})
    return analyse_run({"results": json.loads(json.dumps(results))})["results"]


def effects(rng: random.Random, cards: list[str], sd: float) -> dict:
    return {card: [rng.gauss(0, sd) for _ in range(CELLS)] for card in cards}


def test_the_fit_recovers_the_noise_each_kind_of_pair_adds():
    """Runs on three cards of one host and on a card of another: per cell, a run effect of 0.4% and
    a card effect of 0.6% (each card its own per kernel). Same-card pairs add 2 x 0.4^2, other-card
    and other-host pairs 2 x (0.4^2 + 0.6^2): the fit finds each within 30%. With two cards on the
    host, its other-card pairs are one draw of the cards' effects: that type is not fitted."""
    rng = random.Random(7)
    card_effects = effects(rng, ["GPU-a", "GPU-b", "GPU-c", "GPU-d"], 0.006)
    host = {card: ["GPU-a", "GPU-b", "GPU-c"] for card in ("GPU-a", "GPU-b", "GPU-c")} | {"GPU-d": ["GPU-d"]}
    runs = [(f"sim/{i:04d}-0000000{i % 10}", simulated_run(rng, i, [card], 0.004, card_effects, host_cards=host[card]))
            for i, card in enumerate(["GPU-a"] * 3 + ["GPU-b"] * 3 + ["GPU-c"] * 3 + ["GPU-d"] * 3)]
    found = fit(runs)
    assert found[str(PairType.SAME_CARD)]["steady"]["pairs"] == 12
    assert found[str(PairType.OTHER_CARD)]["steady"]["pairs"] == 27
    assert found[str(PairType.OTHER_HOST)]["steady"]["pairs"] == 27
    assert found[str(PairType.SAME_CARD)]["steady"]["noise"] == pytest.approx(math.sqrt(2) * 0.004, rel=0.3)
    across = math.sqrt(2 * (0.004 ** 2 + 0.006 ** 2))
    assert found[str(PairType.OTHER_CARD)]["steady"]["noise"] == pytest.approx(across, rel=0.3)
    assert found[str(PairType.OTHER_HOST)]["steady"]["noise"] == pytest.approx(across, rel=0.3)
    # The wider noise asks a wider margin: the smallest change such a pair can see.
    assert found[str(PairType.OTHER_HOST)]["steady"]["margin"] > found[str(PairType.SAME_CARD)]["steady"]["margin"]
    two_cards = [run for run in runs if "GPU-c" not in json.dumps(run[1][0]["provenance"]["gpu"])]
    assert str(PairType.OTHER_CARD) not in fit(two_cards) and components.MIN_CARD_SETS == 3


def test_few_runs_give_few_degrees_of_freedom_and_too_few_give_no_fit():
    """A shift of a whole run (every cell alike) rests on the runs, not the cells: 40 cells of 3
    runs give it few degrees of freedom, of 12 runs more; a type seen in 2 runs (one pair, which a
    bootstrap over runs cannot resample) is not fitted at all."""
    rng = random.Random(5)
    flat = effects(rng, ["GPU-a"], 0.0)
    def runs(n):
        return [(f"sim/{i:04d}-0000000{i % 10}", simulated_run(rng, i, ["GPU-a"], 0.0, flat, whole_run_sd=0.006))
                for i in range(n)]
    few, many = fit(runs(3)), fit(runs(12))
    assert few[str(PairType.SAME_CARD)]["steady"]["df"] < many[str(PairType.SAME_CARD)]["steady"]["df"]
    assert few[str(PairType.SAME_CARD)]["steady"]["df"] < 10
    assert fit(runs(2)) == {}


def test_where_the_process_noise_over_explains_the_changes_the_fit_keeps_a_share_of_it():
    """A job's first process reads each cell slower by as much as its second reads it faster (an
    order effect, the same in every run): the processes spread, their median does not move, so the
    runs' process noise over-explains their changes. The unseen noise is 0 and `scale` below 1, so
    the prediction is not wider than the changes (a too-wide prediction costs answers)."""
    rng = random.Random(9)
    flat = effects(rng, ["GPU-a"], 0.0)
    order = [rng.gauss(0, 0.004) for _ in range(CELLS)]
    runs = [(f"sim/{i:04d}-0000000{i}", simulated_run(rng, i, ["GPU-a"], 0.0, flat, process_sd=0.0005,
                                                      order_effects=order)) for i in range(5)]
    found = fit(runs)[str(PairType.SAME_CARD)]["steady"]
    assert found["noise"] == 0.0 and found["df"] is None
    assert components.MIN_SCALE <= found["scale"] < 1.0


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


def test_a_whole_run_shift_is_no_regression_once_the_rule_carries_the_pair_types_noise(tmp_path, monkeypatch):
    """Each run's processes agree to 0.02%, but whole runs shift 1% per cell: by its process noise
    alone the rule calls many cells of two repeats changed; with the same card's unseen noise of a
    calibration that knows it, it does not."""
    import yaml

    rng = random.Random(11)
    flat = effects(rng, ["GPU-a"], 0.0)
    old, new = (simulated_run(rng, i, ["GPU-a"], 0.01, flat, process_sd=0.0002, trial_sd=0.0002) for i in (1, 2))
    hardware = (policy.hardware_identity(old),) * 2
    data = yaml.safe_load(calibration.CALIBRATIONS.read_text())
    fallback = data["fits"][data["fallback"]]
    fallback["pair_types"]["same card"]["steady"].update(noise=0.014, df=50, scale=1.0)
    path = tmp_path / "calibrations.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(calibration, "CALIBRATIONS", path)
    calibration.calibrations.cache_clear()
    try:
        def changed(rule):
            return sum(policy.judge(a["backends"]["x"], b["backends"]["x"], rule, hardware=hardware)["code"]
                       in (Code.REGRESSION, Code.IMPROVEMENT) for a, b in zip(old, new))
        blind = Rule.of({"comparison": {"unseen_noise": False, "margin": 0.005}})
        aware = Rule.of({"comparison": {"margin": 0.005}})
        assert changed(blind) >= 10 and changed(aware) <= 1
    finally:
        calibration.calibrations.cache_clear()


def test_the_report_states_the_components_of_its_run_and_the_margins_of_each_kind_of_pair():
    from pathlib import Path

    from fabench.report.model import Run
    from fabench.report.sections import precision

    entry = Path(__file__).resolve().parents[1] / "examples" / "h200" / "archive" / "cuda-13.0" / "0003-25eb76a9"
    collected = analyse_run(json.loads((entry / "results.json").read_text()))
    found = precision.context(Run(collected, json.loads((entry / "config.json").read_text())), None)["components"]
    own, fitted = run_components(collected["results"]), calibration.fallback()
    margins = ", ".join(f"{kind} {calibration.pair_values(fitted, str(kind))['steady']['margin']:.2%}"
                        for kind in PairType)
    assert found == {"within": f"{own['within_process']:.2%}", "between": f"{own['between_process']:.2%}",
                     "cards": None, "margins": margins, "fit": fitted["name"], "calibrated": True}


@pytest.mark.parametrize("cards,card_sd,injected", [(("GPU-a", "GPU-a"), 0.0, 1.02), (("GPU-a", "GPU-b"), 0.002, 1.05)],
                         ids=["same card, +2%", "other card, +5%"])
def test_the_default_rule_holds_its_level_and_flags_a_slowdown_on_simulated_repeats(cards, card_sd, injected):
    """Simulated repeats at the sizes the fit's runs show (two runs of one card differ by 0.31% rms
    in a steady cell, of two cards of a host by 0.41%; trials within a process spread 0.21%: here
    between processes 0.25% a process, between trials 0.2%, a run's own effect on a cell 0.1%, each
    card's own effect on a cell 0.2%), judged by the default rule (the fallback fit: the simulated
    GPU has none of its own): unchanged pairs give changes in at most the rule's alpha of cells (its
    stated level), and a slowdown of every trial (+2% on one card, +5% across cards) is flagged as a
    regression in at least 90% of cells.
    Blind side: Gaussian effects; the real runs' tails are measured by `fabench detector-check`."""
    rng = random.Random(20261128)
    card_effects = effects(rng, ["GPU-a", "GPU-b"], card_sd)
    host = ["GPU-a", "GPU-b"]
    runs = [simulated_run(rng, i, [cards[i % 2]], 0.001, card_effects, process_sd=0.0025, trial_sd=0.002,
                          host_cards=host) for i in range(24)]
    rule = Rule.of(None)
    unchanged = flagged = cells = 0
    for old, new in zip(runs[::2], runs[1::2]):
        hardware = (policy.hardware_identity(old), policy.hardware_identity(new))
        assert policy.pair_type(*hardware) == (PairType.SAME_CARD if cards[0] == cards[1] else PairType.OTHER_CARD)
        slower = json.loads(json.dumps(new))
        for result in slower:
            for trial in result["backends"]["x"]["trials"]:
                trial["device_ms"] *= injected
        slower = analyse_run({"results": slower})["results"]
        for a, b, c in zip(old, new, slower):
            verdict = policy.judge(a["backends"]["x"], b["backends"]["x"], rule, hardware=hardware)
            unchanged += verdict["code"] in (Code.REGRESSION, Code.IMPROVEMENT)
            flagged += policy.judge(a["backends"]["x"], c["backends"]["x"], rule, hardware=hardware)["code"] == Code.REGRESSION
            cells += 1
    assert cells == 12 * CELLS
    assert unchanged / cells <= rule.alpha
    assert flagged / cells >= 0.90
