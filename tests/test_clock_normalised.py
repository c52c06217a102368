"""A power-capped cell judged at the clock it ran at: the SM clock read from each chunk's GPU sleep
in the profiler's trace (measure.device.kernels.stream_figures), each kernel sample turned into
cycles (analysis.figures.clocked_samples), and two runs' capped cells compared in cycles
(analysis.figures.compared_metric).

Blind side: the simulation models a capped kernel as compute-bound, its cycles per call fixed and
its time the cycles over the clock of its chunk. A kernel whose time follows the memory clock too
(which a cap does not move) would keep part of the cap's noise in its cycles; whether the real
kernels do is for the GPU runs to show (docs/archive.md), not for this test.
"""

from __future__ import annotations

import copy
import json
import random
import tarfile
from pathlib import Path

import pytest

from fabench.analysis import analyse_run
from fabench.analysis.detector import injected
from fabench.analysis.entry import trial_figures
from fabench.analysis.figures import clocked_samples, compared_metric
from fabench.analysis.policy import Code, Rule, judge
from fabench.measure.device.kernels import stream_figures

REPO = Path(__file__).resolve().parents[1]
# A real H200 run whose cells include three held at the 700 W cap (its README).
RUN = REPO / "examples" / "h200-x2-refit-test-2026-11-28" / "archive.tgz"
RUN_MEMBER = "archive/cuda-13.0/0002-7ac104e8/results.json"


def sleep_then_calls(cycles_us: float, calls: int, start: float = 0.0) -> list[dict]:
    events, now = [{"ts": start, "dur": cycles_us, "name": "sleep"}], start + cycles_us
    for _ in range(calls):
        events.append({"ts": now, "dur": 10.0, "name": "attn"})
        now += 12.0
    return events


def test_each_chunks_clock_is_the_cycles_over_the_duration_of_the_sleep_after_it():
    # Three sleeps: before chunk 0 (after the GPU idled: not read), after chunk 0 (1.8 M cycles in
    # 1000 us: 1800 MHz) and the closing sleep after chunk 1 (0.38 M cycles in 200 us: 1900 MHz).
    trace = (sleep_then_calls(500.0, 3) + sleep_then_calls(1000.0, 2, start=5000.0)
             + [{"ts": 9000.0, "dur": 200.0, "name": "sleep"}])
    cycles = [1_000_000, 1_800_000, 380_000]
    figures, why_not = stream_figures(trace, [3, 2], 1, cleared=False, sleep_cycles=cycles, read_clocks=True)
    assert why_not is None and figures["sleep_clock_mhz"] == [1800.0, 1900.0]
    assert len(figures["kernel_ms"]) == 5
    # A platform whose sleep does not count SM cycles: the same trace read, no clock.
    figures, _ = stream_figures(trace, [3, 2], 1, cleared=False, sleep_cycles=cycles)
    assert "sleep_clock_mhz" not in figures and len(figures["kernel_ms"]) == 5
    # Without the closing sleep the trace is one kernel short of what the sleeps say.
    figures, why_not = stream_figures(trace[:-1], [3, 2], 1, cleared=False, sleep_cycles=cycles, read_clocks=True)
    assert figures is None and "then a closing sleep" in why_not


def test_a_trials_samples_take_their_own_chunks_clock():
    trial = {"kernel_samples_ms": [0.5, 0.5, 0.4], "sleep_clock_mhz": [1800.0, 2000.0], "chunk_calls": [2, 1]}
    assert clocked_samples(trial) == [900.0, 900.0, 800.0]
    # Clocks that do not cover the samples one for one give no cycles (never a guess).
    assert clocked_samples({**trial, "chunk_calls": [1, 1]}) is None
    assert clocked_samples({"kernel_samples_ms": [0.5]}) is None
    trials = [dict(trial)]
    trial_figures(trials)
    assert trials[0]["device_kcycles"] == pytest.approx((900 + 900 + 800) / 3)


def simulated_run(results: list[dict], seed: int, clock_shift: float = 1.0) -> list[dict]:
    """The run's results with every kernel-time trial given chunk clocks: a capped cell's calls a
    fixed cycle count (the median of all its samples at 1850 MHz, 0.1% jitter a call) run at a clock drawn per
    chunk from 1750-1950 MHz times clock_shift, so its time moves with the clock as a cap moves it;
    every other cell at a steady 1980 MHz, its samples as measured."""
    rng = random.Random(seed)
    out = copy.deepcopy(results)
    for result in out:
        for entry in result["backends"].values():
            capped = bool((entry.get("stats") or {}).get("capped"))
            timed = sorted(ms for trial in entry.get("trials") or [] for ms in trial.get("kernel_samples_ms") or [])
            kilocycles = timed[len(timed) // 2] * 1850.0 if timed else None  # one count a call, the cell's
            for trial in entry.get("trials") or []:
                samples = trial.get("kernel_samples_ms")
                if not samples:
                    continue
                half = len(samples) // 2
                calls = [half, len(samples) - half] if half else [len(samples)]
                if capped:
                    clocks = [rng.uniform(1750.0, 1950.0) * clock_shift for _ in calls]
                    trial["kernel_samples_ms"] = [kilocycles * rng.gauss(1.0, 0.001) / clock
                                                  for clock, count in zip(clocks, calls) for _ in range(count)]
                else:
                    clocks = [1980.0 for _ in calls]
                trial.update(sleep_clock_mhz=clocks, chunk_calls=calls, device_ms=None)
    return analyse_run({"results": out})["results"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> list[dict]:
    with tarfile.open(RUN) as tar:
        member = tar.extractfile(RUN_MEMBER)
        return json.loads(member.read())["results"]


def capped_keys(results: list[dict]) -> list[tuple]:
    return [(r["shape_id"], name) for r in results for name, e in r["backends"].items()
            if e["status"] == "ok" and (e.get("stats") or {}).get("capped")]


def entry_of(results: list[dict], key: tuple) -> dict:
    return next(r for r in results if r["shape_id"] == key[0])["backends"][key[1]]


def test_capped_cells_are_judged_in_cycles_and_a_clock_shift_is_no_change(real_run):
    keys = capped_keys(real_run)
    assert len(keys) == 3  # SDPA, cuDNN and FlashAttention's SDPA at (4,4096,8,256) (the run's README)
    old, new = simulated_run(real_run, seed=1), simulated_run(real_run, seed=2, clock_shift=0.95)
    rule = Rule.of({})
    for key in keys:
        a, b = entry_of(old, key), entry_of(new, key)
        assert compared_metric(a, b) == "device_kcycles"
        # The time moved with the clock (5% lower: about 5% slower); the cycles did not.
        assert b["stats"]["device_ms"]["median"] / a["stats"]["device_ms"]["median"] > 1.02
        verdict = judge(a, b, rule)
        assert verdict["metric"] == "device_kcycles" and verdict["code"] == Code.SAME, verdict
        assert not verdict["values"]["pair"]["capped"]  # judged at the steady cells' margin


def test_a_two_percent_slowdown_of_a_capped_cell_is_flagged_in_cycles(real_run):
    old = simulated_run(real_run, seed=3)
    slower = injected(simulated_run(real_run, seed=4), 1.02)
    rule = Rule.of({})
    for key in capped_keys(real_run):
        verdict = judge(entry_of(old, key), entry_of(slower, key), rule)
        assert verdict["code"] == Code.REGRESSION, verdict


def test_steady_cells_keep_their_time_as_the_judged_figure(real_run):
    old, new = simulated_run(real_run, seed=5), simulated_run(real_run, seed=6)
    capped = set(capped_keys(real_run))
    steady = [(r["shape_id"], n) for r in real_run for n, e in r["backends"].items()
              if e["status"] == "ok" and (r["shape_id"], n) not in capped]
    assert steady
    for key in steady:
        assert compared_metric(entry_of(old, key), entry_of(new, key)) == "device_ms"
    # A run without chunk clocks (every run before them) judges its capped cells by time, as before.
    for key in capped:
        assert compared_metric(entry_of(real_run, key), entry_of(new, key)) == "device_ms"


def test_cycles_that_the_clock_did_not_explain_leave_the_cell_judged_by_its_time(real_run):
    """A clock read that did not follow the kernel (each trial's cycles as spread as its time: the
    real run's samples, given clocks drawn at random) gives no cycles figure: the cell keeps its
    time and the capped cells' noise, never the steady cells' margin for a figure that moved."""
    rng = random.Random(7)
    run = copy.deepcopy(real_run)
    for key in capped_keys(real_run):
        for trial in entry_of(run, key)["trials"]:
            calls = len(trial["kernel_samples_ms"])
            trial.update(sleep_clock_mhz=[rng.uniform(1650.0, 1980.0)], chunk_calls=[calls], device_ms=None)
    analysed = analyse_run({"results": run})["results"]
    for key in capped_keys(real_run):
        entry = entry_of(analysed, key)
        assert "device_kcycles" not in entry["stats"] and entry["stats"]["capped"]
        assert compared_metric(entry, entry) == "device_ms"
