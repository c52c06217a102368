"""The analysis stage on known samples: stability, the entry's figures, the independent checks
(do_bench, the profiler), the merge of several processes' raw trials, the run's pooled-noise
intervals, the three-way verdict, steps in a series and the peers' rules. No torch needed."""

from __future__ import annotations

import math

import pytest

from fabench.analysis import analyse_run, peers, verdict
from fabench.analysis import entry as analysis
from fabench.analysis.noise import POOL_CELLS
from fabench.measure import merge
from fabench.results.contract import backend_entry


def trial(process, index, wall, device):
    return {"process": process, "index": index, "iters": 100, "wall_mean_ms": wall, "device_ms": device,
            "warmup_iters": 10, "gpu_state": None}


def test_verdict_judges_the_device_figure_and_names_every_problem():
    steady = [trial(0, i, wall, 0.100 + 0.001 * i) for i, wall in enumerate([0.2, 0.4, 0.3])]  # noisy wall
    got = analysis.trial_stats(steady, 0.03, [])
    assert got["stable"] and got["unstable_reason"] is None  # the host's noise does not decide it
    drifting = [trial(0, i, 0.2, device) for i, device in enumerate([0.100, 0.102, 0.110])]
    got = analysis.trial_stats(drifting, 0.03, ["process 0 trial 1: warm-up did not settle within 1000 ms"])
    assert not got["stable"]
    assert got["unstable_reason"].startswith("trials spread 10.0% (max/min - 1 over 3 trials) exceeds 3.0%")
    assert "warm-up did not settle" in got["unstable_reason"]


def test_cpu_trials_are_judged_on_the_wall_figure():
    got = analysis.trial_stats([trial(0, i, wall, None) for i, wall in enumerate([10.0, 10.1, 14.0])], 0.05, [])
    assert got["device_ms"] is None and not got["stable"] and "40.0%" in got["unstable_reason"]


def test_entry_summary_is_the_median_over_trials_and_the_host_overhead():
    entry = backend_entry("X", trials=[trial(0, 0, 0.30, 0.10), trial(0, 1, 0.32, 0.11), trial(0, 2, 0.31, 0.12)])
    analysis.analyse_entry(entry, {"platform": "cpu", "flops": 1e9, "method": {"stable_spread": 0.5}})
    assert entry["wall_mean_ms"] == pytest.approx(0.31)
    assert entry["device_ms"]["median"] == pytest.approx(0.11) and entry["device_ms"]["n"] == 3
    assert entry["host_overhead_ms"] == pytest.approx(0.20)
    assert entry["tflops"]["device_median"] == pytest.approx(1e9 / 0.11e-3 / 1e12)


@pytest.mark.parametrize("values, device, agrees, words", [
    ([0.100], 0.101, True, None),
    ([0.100], 0.110, False, "differs from do_bench's 0.1000 ms by 10.0%"),
    ([0.100, 0.101], 0.1005, True, None),
    ([0.100, 0.150], 0.100, None, "do_bench itself unstable"),
    ([], None, None, "Triton is not installed"),
])
def test_cross_check_with_do_bench(values, device, agrees, words):
    got = analysis.do_bench_check(values, device, 0.03, "Triton is not installed" if not values else None)
    assert got["agrees"] is agrees
    assert (got["reason"] is None) if words is None else (words in got["reason"])


def test_do_bench_cannot_judge_a_call_that_takes_longer_to_queue_than_to_run():
    # Compiled FlexAttention at (4,1024,8,64) on an H200: kernel 0.039 ms, 0.072 ms on the host,
    # do_bench 0.052 ms (and 0.140 ms in a process whose calls took 0.149 ms on the host).
    got = analysis.do_bench_check([0.0508, 0.0523], 0.0389, 0.03, None, [0.073, 0.072])
    assert got["agrees"] is None and got["reason"].startswith("do_bench host-bound")
    assert analysis.do_bench_check([0.0250], 0.0251, 0.03, None, [0.020])["agrees"] is True


def process_result(process, devices, kernels_sha="a" * 64):
    entry = backend_entry("X", trials=[trial(process, i, 0.3, d) for i, d in enumerate(devices)],
                          kernels={"names": ["k"], "launch": {"num_stages": 1}, "source_sha256": kernels_sha})
    entry["trials"][0].update(do_bench_ms=devices[0], host_call_ms=0.01)
    return {"platform": "cuda", "flops": 1e9, "reference": {"status": "ok", "failure_kind": None, "reason": None},
            "method": {"stable_spread": 0.03, "cross_check": {"tolerance": 0.03}, "device_fallbacks": {}},
            "backends": {"x": entry}, "provenance": {"process": process, "finished": f"t{process}"}}


def test_merging_processes_pools_their_trials_and_sees_a_process_that_differs():
    same = merge.merge([process_result(0, [0.100, 0.101]), process_result(1, [0.1005, 0.100])], [])
    entry = same["backends"]["x"]
    assert [(t["process"], t["index"]) for t in entry["trials"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert entry["stats"]["stable"] and entry["stats"]["device_ms"]["n"] == 4
    assert entry["observations"] == {"notes": [], "do_bench_reason": None} and same["provenance"]["finished"] == "t1"
    assert entry["cross_check"]["agrees"] is True
    bimodal = merge.merge([process_result(0, [0.046, 0.046]), process_result(1, [0.122, 0.121], "b" * 64)], [])
    entry = bimodal["backends"]["x"]
    assert not entry["stats"]["stable"]
    assert "the processes ran different kernels" in entry["stats"]["unstable_reason"]
    assert entry["cross_check"]["agrees"] is None  # do_bench saw the two processes differ too


def test_a_power_capped_cell_whose_clock_moved_is_not_judged_against_do_bench():
    def trial(clock, slowdown="software power cap"):
        return {"device_ms": 0.494, "clock_slowdown": slowdown,
                "gpu_state": {"start": None, "end": {"sm_clock_mhz": clock}}}

    moved = [trial(1680), trial(1785), trial(1710)]
    got = analysis.do_bench_check([0.5122, 0.5110], 0.494, 0.03, None, [0.05], moved)
    assert got["agrees"] is None and "power-capped" in got["reason"] and "1680-1785 MHz" in got["reason"]
    # Held down but steady: judged as usual (here: 3.6% apart, so it differs).
    steady = [trial(1710), trial(1710), trial(1725)]
    assert analysis.do_bench_check([0.5122, 0.5110], 0.494, 0.03, None, [0.05], steady)["agrees"] is False
    # Clocks that moved without any slowdown reported (idle clocks coming up) are not a cap.
    free = [trial(1680, None), trial(1980, None)]
    assert analysis.do_bench_check([0.4950], 0.494, 0.03, None, [0.05], free)["agrees"] is True


def test_a_power_capped_cell_whose_device_loop_ran_at_another_clock_than_do_bench_is_not_judged():
    """Steady after do_bench, but the device loops ran faster: the two methods met the cap at
    different clocks, so their difference is the clock's, not the method's."""
    def trial(device_loop, end):
        return {"device_ms": 0.4932, "clock_slowdown": "software power cap",
                "gpu_state": {"start": None, "device_loop_sm_clock_mhz": device_loop, "end": {"sm_clock_mhz": end}}}

    apart = [trial(1830, 1710), trial(1845, 1710), trial(1830, 1695)]
    got = analysis.do_bench_check([0.5115, 0.5110], 0.4932, 0.03, None, [0.05], apart)
    assert got["agrees"] is None and "1695-1845 MHz" in got["reason"] and "device loops" in got["reason"]
    together = [trial(1710, 1710), trial(1695, 1710), trial(1710, 1695)]
    assert analysis.do_bench_check([0.5115, 0.5110], 0.4932, 0.03, None, [0.05], together)["agrees"] is False
    # Medians within the tolerance agree, whatever the clocks did.
    assert analysis.do_bench_check([0.5015, 0.5010], 0.4932, 0.03, None, [0.05], apart) == {
        "do_bench_ms": pytest.approx(0.50125), "agrees": True, "reason": None}
