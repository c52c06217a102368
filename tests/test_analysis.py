"""The analysis stage on known samples: stability, the entry's figures, the independent checks
(do_bench, the profiler), the merge of several processes' raw trials, the run's pooled-noise
intervals, the comparison policy's verdicts and identities, steps in a series and the peers'
rules. No torch needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabench.analysis import analyse_run, peers, policy
from fabench.analysis import entry as analysis
from fabench.analysis.detector import binomial_bound
from fabench.analysis.noise import POOL_CELLS
from fabench.analysis.policy import Code, Rule
from fabench.analysis.verdict_text import observation_text
from fabench.measure import observations
from fabench.results import merge
from fabench.results.contract import backend_entry
from support.shared_runs import h100_archive

RULE = Rule.of({})  # the policy's defaults


def trial(process, index, wall, device):
    return {"process": process, "index": index, "iters": 100, "wall_mean_ms": wall, "device_ms": device,
            "warmup_iters": 10, "gpu_state": None}


def test_verdict_judges_the_device_figure_and_names_every_problem():
    steady = [trial(0, i, wall, 0.100 + 0.001 * i) for i, wall in enumerate([0.2, 0.4, 0.3])]  # noisy wall
    got = analysis.trial_stats(steady, 0.03, [])
    assert got["stable"] and got["unstable_reason"] is None  # the host's noise does not decide it
    drifting = [trial(0, i, 0.2, device) for i, device in enumerate([0.100, 0.102, 0.110])]
    got = analysis.trial_stats(drifting, 0.03, [observations.warmup_unsettled(0, 1, 1000)])
    assert not got["stable"] and got["unstable_codes"] == ["spread", "warm-up"]
    assert got["unstable_reason"].startswith("trials spread 10.0% within one process")


def test_cpu_trials_are_judged_on_the_wall_figure():
    got = analysis.trial_stats([trial(0, i, wall, None) for i, wall in enumerate([10.0, 10.1, 14.0])], 0.05, [])
    assert got["device_ms"] is None and not got["stable"] and got["unstable_codes"] == ["spread"]
    assert got["wall_mean_ms"]["within_spread"] == pytest.approx(0.40)


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


def test_do_bench_not_run_where_the_host_took_the_kernels_time_says_so():
    """The measuring process skips do_bench where a call took the host at least its kernels' time
    to queue (Cell._cross_check_trial): the trial keeps host_call_ms and no do_bench_ms, and the
    check says why it cannot judge, as it says for a do_bench that ran host-bound."""
    got = analysis.do_bench_check([], 0.0389, 0.03, None, [0.073])
    assert got["agrees"] is None and got["do_bench_ms"] is None
    assert got["reason"].startswith("do_bench host-bound, not run: a call takes 0.0730 ms to queue")
    assert analysis.do_bench_check([], 0.0389, 0.03, "Triton is not installed", [0.073])["reason"] == \
        "Triton is not installed"
    assert analysis.do_bench_check([], 0.0389, 0.03, None, []) is None  # nothing taken, nothing said


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


# ---------------------------------------------------------------- the run's intervals, the verdict

H200 = Path(__file__).resolve().parents[1] / "examples" / "h200" / "archive" / "cuda-13.0"


def h200_cells(entry: str) -> dict:
    run = analyse_run(json.loads(next(H200.glob(f"{entry}-*")).joinpath("results.json").read_text()))
    return {(r["variant"], r["shape_id"], n): b for r in run["results"] for n, b in r["backends"].items()
            if b["status"] == "ok"}


def test_on_the_committed_h200_pair_the_prediction_interval_holds_and_the_detector_sees_two_percent():
    a, b = h200_cells("0001"), h200_cells("0002")
    outside = [sum(not (x[k]["stats"]["device_ms"]["pi95"][0] <= y[k]["stats"]["device_ms"]["median"]
                        <= x[k]["stats"]["device_ms"]["pi95"][1]) for k in x) for x, y in ((a, b), (b, a))]
    # 95% PI, each run against the other over 50 cells: P(Bin(100, 5%) > 9) = 2.8%
    assert sum(outside) <= binomial_bound(100) == 9
    reruns = [policy.judge(a[k], b[k], RULE)["verdict"] for k in a]  # the default policy
    assert reruns.count("changed") == 0
    stable_reruns = [policy.judge(a[k], b[k], RULE) for k in a if a[k]["stats"]["stable"] and b[k]["stats"]["stable"]]
    assert all(v["verdict"] == "same" for v in stable_reruns)  # a re-run on one card answers: same
    # Steady cells (stable, not held at a power cap): a capped cell's margin is its own, wider one.
    stable = [k for k in a if all(c[k]["stats"]["stable"] and not c[k]["stats"]["capped"] for c in (a, b))]
    slower = [scaled(b[k], 1.02) for k in stable]
    flagged = sum(policy.judge(a[k], s, RULE)["code"] == Code.REGRESSION for k, s in zip(stable, slower))
    assert flagged >= 0.9 * len(stable)
    assert "pooled over the 16 cells" in a[stable[0]]["stats"]["ci_method"] and POOL_CELLS == 16


def scaled(entry: dict, factor: float) -> dict:
    """A slower kernel: its time and its clock cycles scaled alike (the clock unchanged)."""
    out = json.loads(json.dumps(entry))
    out["stats"]["device_ms"]["median"] *= factor
    if out["stats"].get("device_cycles"):
        out["stats"]["device_cycles"]["median"] *= factor
    return out


def test_other_hardware_is_never_a_regression():
    noise = {"sigma": 0.002, "df": 16, "replicates": 2}
    h200 = {"platform": "cuda", "device": "NVIDIA H200", "arch": "sm_90", "cards": ["GPU-a"]}
    h100 = {**h200, "device": "NVIDIA H100 80GB HBM3", "cards": ["GPU-b"]}
    old = {"status": "ok", "stats": {"stable": True, "device_ms": {"median": 1.0, "noise": noise}}}
    new = {"status": "ok", "stats": {"stable": True, "device_ms": {"median": 1.16, "noise": noise}}}
    assert policy.judge(old, new, RULE, hardware=(h200, h200))["code"] == Code.REGRESSION
    got = policy.judge(old, new, RULE, hardware=(h200, h100))
    assert got["verdict"] == "cannot tell" and got["code"] == Code.OTHER_HARDWARE
    assert got["values"]["hardware"] == [policy.hardware_text(h200), policy.hardware_text(h100)]
    # A backend that needs a GPU does not run on a CPU: no regression either way across hardware.
    cpu = {"platform": "cpu", "device": "AMD EPYC", "arch": "x86_64", "cards": []}
    gone = policy.judge(old, {"status": "unavailable", "reason": "needs CUDA"}, RULE, hardware=(h200, cpu))
    assert gone["verdict"] == "cannot tell" and gone["code"] == Code.OTHER_HARDWARE
    back = policy.judge({"status": "unavailable", "reason": "needs CUDA"}, old, RULE, hardware=(cpu, h200))
    assert back["code"] == Code.OTHER_HARDWARE
    # Another card of the same model is the same hardware (the cards are named, not compared).
    other_card = {**h200, "cards": ["GPU-c"]}
    assert policy.judge(old, new, RULE, hardware=(h200, other_card))["code"] == Code.REGRESSION


def test_a_step_in_a_series_is_named_where_it_happens():
    noise = {"sigma": 0.002, "df": 16, "replicates": 2}
    series = [(f"run{i}", {"median": m, "noise": noise}) for i, m in enumerate([1.0, 1.001, 0.999, 1.03, 1.031])]
    step = policy.find_step(series, RULE)
    assert step["before"] == "run2" and step["after"] == "run3" and 1.025 < step["ratio"] < 1.035
    assert policy.find_step([(i, {**f, "median": 1.0}) for i, f in series], RULE) is None
    assert policy.find_step(series[:2], RULE) is None  # a pair is the pairwise verdict's job


def test_asvs_interval_of_the_median_by_order_statistics_else_a_laplace_posterior():
    twenty = [float(v) for v in range(20)]
    # P(Bin(20, 1/2) <= 3) = 0.0013 each side: [x_(4), x_(17)] covers 99.7%; [x_(5), x_(16)] only 98.8%.
    assert peers.median_interval(twenty) == (3.0, 16.0)
    five = [1.0, 1.2, 1.4, 1.6, 1.8]  # too few for a 99% pair (2 / 2^5 = 6%): the posterior's interval
    low, high = peers.median_interval(five)
    assert low < 1.0 and high > 1.8 and abs((1.4 - low) - (high - 1.4)) < 1e-9  # wider than the range, symmetric
    posterior = peers.LaplacePosterior(five)
    assert abs(posterior.quantile(0.5) - 1.4) < 1e-9  # the posterior's median is the samples' median
    assert posterior.quantile(0.25) < 1.4 < posterior.quantile(0.75)


def test_the_peers_rules_on_known_samples():
    old = [1.00, 1.01, 1.00, 1.01, 1.00, 1.01]
    assert not peers.asv_changed(old, [v * 1.05 for v in old])  # below asv's factor 1.1
    # Six samples against six: asv's gate (1/C(12, 6) = 1/924 < 0.002) sends them to the rank test,
    # whose smallest two-sided p is 2/924 > 0.002: asv, as asv has it, flags nothing here.
    assert not peers.asv_changed(old, [v * 1.5 for v in old])
    assert peers.asv_changed(old * 2, [v * 1.5 for v in old * 2])  # twelve a side: the rank test reaches it
    # Five against five (1/C(10, 5) = 1/252 > 0.002): asv falls back to its 99% intervals of the
    # median, which do not overlap for a 1.5x change and overlap for samples that interleave.
    assert peers.asv_changed(old[:5], [v * 1.5 for v in old[:5]])
    wide = [1.0, 1.2, 1.4, 1.6, 1.8]
    assert not peers.asv_changed(wide, [v * 1.15 for v in wide])
    assert peers.nvbench_verdict(old, [v * 1.02 for v in old]) == "SLOW"
    assert peers.nvbench_verdict(old, [v * 0.98 for v in old]) == "FAST"
    assert peers.nvbench_verdict(old, old) == "SAME"


def test_the_profiler_judges_a_cell_that_do_bench_cannot():
    trials = [dict(trial(0, i, 0.06, 0.0247), do_bench_ms=d, host_call_ms=0.05, profiler_ms=0.0246)
              for i, d in enumerate([0.0251, 0.0304, 0.0244])]
    check = analysis.cross_checks(trials, 0.0247, 0.03, {"notes": [], "do_bench_reason": None})
    assert check["agrees"] is None and "unstable" in check["reason"]
    assert check["profiler"] == {"ms": 0.0246, "agrees": True, "reason": None}
    off = analysis.profiler_check([0.030], 0.0247, 0.03, trials)
    assert off["agrees"] is False and "profiled kernels" in off["reason"]


def test_a_generated_source_digest_that_differs_between_processes_is_no_kernel_difference():
    """Inductor's generated-source digest differs between a process with cold compile caches and
    one with warm caches for the same kernel (the shared H100 runs): only what the profiled
    processes launched (names, source digest, launch settings) can differ."""
    def unprofiled(process, devices, generated):
        result = process_result(process, devices)
        result["backends"]["x"]["kernels"] = {"names": None, "launch": None, "source_sha256": None,
                                              "generated_sha256": generated}
        return result

    first = process_result(0, [0.100, 0.101])
    first["backends"]["x"]["kernels"]["generated_sha256"] = "g" * 64
    cold_and_warm = merge.merge([first, unprofiled(1, [0.1005, 0.100], "h" * 64)], [])["backends"]["x"]
    assert cold_and_warm["kernels"]["names"] == ["k"] and cold_and_warm["observations"]["notes"] == []
    assert cold_and_warm["stats"]["stable"]
    second = process_result(1, [0.1005, 0.100], "s" * 64)  # profiled too, another source: another kernel
    other = merge.merge([first, second], [])["backends"]["x"]
    assert other["observations"]["notes"][0]["kind"] == "kernels_differ"  # coded; the words are verdict_text's
    assert observation_text(other["observations"]["notes"][0]).startswith("the processes ran different kernels: process 0: k")
    assert not other["stats"]["stable"]


def test_re_analysing_the_shared_h100_runs_marks_no_flex_cell_unstable_for_a_cache_state_digest():
    results = json.loads((h100_archive() / "cuda-13.0" / "0004-9181bb76" / "results.json").read_text())
    noted = [b for r in results["results"] for n, b in r["backends"].items() if n == "flex"
             and any("different kernels" in note for note in b["observations"]["notes"])]
    assert len(noted) == 10  # as archived: the merge of the day noted every FlexAttention cell
    flex = [r["backends"]["flex"] for r in analyse_run(results)["results"]]
    assert all(b["stats"]["stable"] for b in flex), [b["stats"]["unstable_reason"] for b in flex]


def test_job_files_hold_no_intervals_results_json_derives_them_once():
    merged = merge.merge([process_result(0, [0.100, 0.101]), process_result(1, [0.1005, 0.100])], [])
    figure = merged["backends"]["x"]["stats"]["device_ms"]
    assert figure["ci95"] is None and figure["pi95"] is None and "noise" not in figure
    assert merged["backends"]["x"]["stats"]["ci_method"] is None
    collected = analyse_run({"results": [json.loads(json.dumps(merged))]})["results"][0]
    assert collected["backends"]["x"]["stats"]["device_ms"]["ci95"] is not None


def test_two_cells_ran_the_same_code_when_every_fact_both_record_agrees():
    from fabench.analysis import claims

    native = {"status": "ok", "implementation": {"kernel": "aten"}, "kernel_config": None, "kernels": None}
    assert claims.same_code(native, dict(native))
    tuned = {**native, "implementation": {"kernel": "aiter"}, "kernel_config": {"BLOCK_M": 64}}
    assert not claims.same_code(tuned, {**tuned, "kernel_config": {"BLOCK_M": 128}})
    older = {"status": "ok", "kernels": {"launch": {"kernel": "k"}}}  # before implementation was recorded
    assert claims.same_code(older, {**native, "kernels": {"launch": {"kernel": "k"}}})
    assert not claims.same_code(native, {"status": "unavailable"})


def test_a_change_in_time_that_is_none_in_cycles_is_the_clocks():
    noise = {"sigma": 0.002, "df": 16, "replicates": 2}

    def cell(ms, mhz):
        return {"status": "ok", "stats": {"stable": True, "device_ms": {"median": ms, "noise": noise},
                                          "device_cycles": {"median": ms * mhz, "clock_mhz": mhz, "n": 6}}}

    # A power cap held the new run 2.2% lower: 2.2% slower, the same work in cycles.
    capped = policy.judge(cell(0.500, 1762.5), cell(0.511, 1724.0), RULE)
    assert capped["verdict"] == "cannot tell" and capped["code"] == Code.CLOCK
    assert capped["values"]["clock_mhz"] == [1762.5, 1724.0] and abs(capped["values"]["cycles_ratio"] - 1) < 0.01
    # Slower at the same clock: a regression.
    assert policy.judge(cell(0.500, 1965.0), cell(0.511, 1965.0), RULE)["code"] == Code.REGRESSION
    # No clock read in one run: judged on time alone.
    unread = cell(0.511, 1724.0)
    unread["stats"]["device_cycles"] = None
    assert policy.judge(cell(0.500, 1762.5), unread, RULE)["code"] == Code.REGRESSION


def test_an_interval_whose_ends_fall_beyond_a_measurable_time_reads_the_bound():
    """A wide interval of a short cell (few ok processes) reached 9.5e-8 ms at its lower end, which
    the results' bounds refuse, and collect failed; on a 2-core CI host two Slurm jobs' CPU
    processes 10x apart gave a 0.04 ms cell a prediction interval up to 1.5e7 ms, and the run's CSV
    refused it (the report failed). The ends are clipped to 0 and to MAX_MS. Blind side: a clipped
    end is as printed, not marked; the report's intervals that wide say the cell is noise."""
    import math

    from fabench.analysis.noise import interval
    from fabench.measure.record import MAX_MS
    from fabench.results.bounds import bounds_problem

    low, high = interval(0.02, 12.0)
    assert low == 0.0 and 0.02 < high < MAX_MS
    assert interval(0.02, 0.01)[0] > 0.0
    assert bounds_problem({"device_ms": {"ci95": [low, high]}}) is None
    assert bounds_problem({"device_ms": {"ci95": [0.02 * math.exp(-12.0), high]}}) is not None
    for half_log in (21.0, 800.0):  # 0.04 x e^21 = 5.3e7 ms; e^800 overflows a float
        wide = interval(0.04, half_log)
        assert wide == [0.0, MAX_MS] and bounds_problem({"device_ms": {"pi95": wide}}) is None
    assert bounds_problem({"device_ms": {"pi95": [0.0, 0.04 * math.exp(21.0)]}}) is not None
    assert interval(0.04, 2.0) == [0.04 * math.exp(-2.0), 0.04 * math.exp(2.0)]
