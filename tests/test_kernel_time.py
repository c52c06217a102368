"""The device figure as the kernels' own time, its second method, the stopping rule and a CPU
trial's calibration: the parts that need no GPU. Traces are as torch.profiler's chrome trace holds
them (ts and dur in microseconds, kernels in start order)."""

from __future__ import annotations

import copy
import math

import time

import pytest
import torch

from fabench.analysis.entry import analyse_entry, period_check, trial_figures
from fabench.measure.spec import job_spec
from fabench.measure import stopping
from fabench.measure.backends.registry import BACKENDS, Backend, Prepared
from fabench.measure.inputs import reference_output
from fabench.measure.job import run_job
from fabench.measure.device.kernels import kernel_shares, stream_figures
from workflow_util import tiny_config


def kernel(ts, dur, name="k"):
    return {"ts": ts, "dur": dur, "name": name}


def chunk(calls, cleared=True, gap=2.0, start=0.0):
    """A sleep, then per call an L2 clear (40 us) and two kernels (a 3 us elementwise one and a
    10 us one), `gap` us between any two kernels."""
    events, now = [kernel(start, 500, "sleep")], start + 500.0
    for _ in range(calls):
        if cleared:
            events.append(kernel(now, 40, "clear"))
            now += 40 + gap
        events.append(kernel(now, 3, "elementwise"))
        now += 3 + gap
        events.append(kernel(now, 10, "attn"))
        now += 10 + gap
    return events


def test_a_calls_kernel_time_is_its_kernels_durations_without_gaps_or_the_clear():
    figures, why_not = stream_figures(chunk(4), [4], 2, cleared=True)
    assert why_not is None
    assert figures["kernel_ms"] == [0.013] * 4
    # The period: clear 40 + gap 2 + 3 + 2 + 10 + 2 = 59 us between consecutive calls' starts.
    assert [round(p, 9) for p in figures["period_ms"]] == [0.059] * 3
    assert figures["by_kernel"] == {"elementwise": 12, "attn": 40}


def test_periods_are_taken_within_a_chunk_never_across_the_sleep_between_two():
    trace = chunk(3, cleared=False) + chunk(2, cleared=False, start=10_000)
    figures, why_not = stream_figures(trace, [3, 2], 2, cleared=False)
    assert why_not is None and len(figures["kernel_ms"]) == 5
    assert [round(p, 9) for p in figures["period_ms"]] == [0.017] * 3  # 2 + 1, none across chunks


def test_a_trace_of_another_length_is_not_read():
    figures, why_not = stream_figures(chunk(4)[:-1], [4], 2, cleared=True)
    assert figures is None and "holds 12 kernels, not the 13 expected" in why_not


def test_each_kernels_share_of_a_call():
    shares = kernel_shares({"elementwise": 12, "attn": 40}, 4)
    assert shares == [{"name": "attn", "us_per_call": 10.0, "share": 0.7692},
                      {"name": "elementwise", "us_per_call": 3.0, "share": 0.2308}]


def trial(process, index, kernel_ms, events_period, cupti_period, pairs=0.03):
    return {"process": process, "index": index, "iters": 1, "wall_mean_ms": 0.2, "device_ms": None,
            "warmup_iters": 1, "gpu_state": None, "device_samples_ms": [pairs] * 5,
            "kernel_samples_ms": kernel_ms, "period_events_ms": events_period, "period_cupti_ms": cupti_period}


def test_the_device_figure_is_the_kernels_own_time_where_it_was_measured():
    trials = [trial(0, 0, [0.018, 0.019, 0.018], [0.025] * 3, [0.025] * 3)]
    trial_figures(trials)
    assert trials[0]["device_ms"] == pytest.approx((0.018 + 0.019 + 0.018) / 3)  # not the event pairs' 0.03


def test_a_trial_without_kernel_samples_has_no_figure_rather_than_another_quantity():
    trials = [trial(0, 0, [0.018] * 3, [0.025] * 3, [0.025] * 3), trial(0, 1, None, [0.025] * 3, [0.025] * 3)]
    trial_figures(trials)
    assert [t["device_ms"] for t in trials] == [0.018, None]


def test_the_periods_agree_within_the_noise_of_both_methods():
    # Events: trial medians 0.0250, 0.0255 (half-range 1%); CUPTI: 0.0252, 0.0252 (0); resolution
    # 0.5 us / 25.25 us = 2%: tolerance about 3%, the two 0.2-0.8% apart.
    trials = [trial(0, 0, [0.018] * 3, [0.0250] * 3, [0.0252] * 3), trial(1, 0, [0.018] * 3, [0.0255] * 3, [0.0252] * 3)]
    check = period_check(trials)
    assert check["agrees"] and check["reason"] is None
    assert check["tolerance"] == pytest.approx(0.01 + 0.0005 / 0.02525, rel=1e-3)


def test_periods_further_apart_than_both_methods_noise_disagree_and_say_by_how_much():
    trials = [trial(0, 0, [0.5] * 3, [1.00] * 3, [1.05] * 3), trial(1, 0, [0.5] * 3, [1.002] * 3, [1.05] * 3)]
    check = period_check(trials)
    assert check["agrees"] is False and "4.7% apart" in check["reason"], check


def test_the_second_method_reads_one_stream_by_two_clocks_and_names_the_profilers_overhead():
    """CUPTI's tracing adds time between kernels (on an H100, cuDNN at (4,512,8,256): the device
    loop's period 0.1115 ms, the profiled stream's 0.1133 ms by CUPTI). Compared with the device
    loop, the two clocks would disagree for the profiler's sake; on the profiled stream itself, by
    its own events, they measure one quantity, and the overhead is reported beside it."""
    trials = [dict(trial(p, 0, [0.024] * 3, [0.1115] * 3, [0.1133] * 3), period_profiled_events_ms=[0.1132] * 3)
              for p in (0, 1)]
    check = period_check(trials)
    assert check["agrees"] and check["stream"] == "the profiled stream", check
    assert check["events_ms"] == 0.1132 and check["profiler_overhead"] == pytest.approx(0.1132 / 0.1115 - 1)
    for t in trials:
        del t["period_profiled_events_ms"]  # a result from before: the device loop's events, which differ
    old = period_check(trials)
    assert old["agrees"] is False and old["profiler_overhead"] is None


def test_an_entry_is_judged_by_the_second_method_and_do_bench_by_the_event_pairs():
    trials = [trial(p, i, [0.018] * 3, [0.025] * 3, [0.025] * 3) for p in (0, 1) for i in (0, 1)]
    trials[-1].update(do_bench_ms=0.0301, host_call_ms=0.01)
    entry = {"status": "ok", "trials": trials}
    analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})
    assert entry["device_ms"]["median"] == 0.018 and entry["stats"]["period_ms"]["median"] == 0.025
    assert entry["cross_check"]["agrees"] is True  # 0.0301 against the event pairs' 0.03, not 0.018
    assert entry["cross_check"]["second_method"]["agrees"] is True
    assert entry["tflops"]["device_median"] == pytest.approx(1e9 / 0.018e-3 / 1e12)


def test_the_stopping_rule_stops_when_quiet_after_the_minimum_samples_and_time():
    rule = stopping.StopRule(max_noise=0.01, min_samples=10, min_trial_ms=5.0, max_trial_ms=60_000)
    batches = []

    def take():
        batches.append(4)
        return [1.0] * 4

    samples, stop = stopping.collect(rule, take)
    assert stop["stopped"] == "converged" and len(samples) == 12 and len(batches) == 3  # 10 samples, 5 ms
    assert stop["noise"] == 0.0


class FakeClock:
    """Host time that moves only when a batch is taken: the rule is tested without real sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def batches_of(values, clock=None, host_ms_per_sample=0.0):
    """A take() handing out `values` (cycled) in batches of 16, advancing `clock` per sample."""
    state = {"at": 0}

    def take():
        out = [values[(state["at"] + i) % len(values)] for i in range(16)]
        state["at"] += 16
        if clock is not None:
            clock.now += host_ms_per_sample * len(out) / 1000.0
        return out

    return take


def test_the_stopping_rule_times_out_only_where_the_noise_neither_falls_nor_settles():
    """Noise that keeps changing (a slow drift: every sample longer than the last) never settles;
    the host clock, moved 1 ms per sample, reaches max_trial_ms after 30 samples: two batches."""
    rule = stopping.StopRule(max_noise=0.001, min_samples=2, min_trial_ms=0.0, max_trial_ms=30.0)
    clock = FakeClock()
    drift = [1.0 + 0.05 * i for i in range(1000)]
    samples, stop = stopping.collect(rule, batches_of(drift, clock, host_ms_per_sample=1.0), clock=clock)
    assert stop["stopped"] == stopping.TIMEOUT and len(samples) == 32 and stop["elapsed_ms"] == 32.0


def test_a_naturally_noisy_kernel_stops_when_its_noise_has_converged_not_at_the_timeout():
    """Samples alternating 1.0 and 1.05 ms: a steady 2.5% noise, above max_noise (2%), that no
    number of samples lowers. nvbench's second clause stops it once the noise history (more than
    64 values) has settled, at a multiple of 16 samples, long before the timeout."""
    rule = stopping.StopRule(max_noise=0.02, min_samples=10, min_trial_ms=1.0, max_trial_ms=250.0)
    clock = FakeClock()
    samples, stop = stopping.collect(rule, batches_of([1.0, 1.05], clock, host_ms_per_sample=0.1), clock=clock)
    assert stop["stopped"] == stopping.NOISE_CONVERGED
    assert 64 < len(samples) <= 128 and stop["elapsed_ms"] < rule.max_trial_ms
    assert stop["noise"] == pytest.approx(0.0245, abs=0.001)


def test_the_noise_history_is_judged_only_every_check_every_samples_and_after_history_min():
    rule = stopping.StopRule(max_noise=0.0, min_samples=2, min_trial_ms=0.0, max_trial_ms=1e9)
    tracker = stopping.Tracker(rule)
    reasons = [tracker.add(v) for v in [1.0, 2.0] * 100]
    first = reasons.index(stopping.NOISE_CONVERGED) + 1  # samples taken when it first held
    assert first % rule.check_every == 0 and first > rule.history_min + 1
    assert all(r is None for r in reasons[:first - 1])


def test_the_stopping_rule_waits_for_the_minimum_samples_and_time_even_when_quiet():
    rule = stopping.StopRule(max_noise=0.5, min_samples=40, min_trial_ms=100.0, max_trial_ms=1e9)
    samples, stop = stopping.collect(rule, batches_of([2.0]))  # 16 per batch, 2 ms each: 100 ms at 50
    assert stop["stopped"] == stopping.CONVERGED and len(samples) == 64 and sum(samples) >= 100.0


def test_the_relative_noise_is_the_standard_deviation_over_the_mean():
    def noise(samples: list[float]) -> float:
        tracker = stopping.Tracker(stopping.StopRule(0.0, 0, 0.0, 0.0))
        for sample in samples:
            tracker.add(sample)
        return tracker.noise

    assert noise([1.0]) == float("inf")
    assert noise([1.0, 3.0]) == pytest.approx(2 ** 0.5 / 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only: GPU jobs time differently")
def test_a_cpu_trial_of_a_short_call_is_calibrated_to_the_minimum_trial_time(monkeypatch):
    """A 2 ms call with min_trial_ms 20: each trial's loop runs ~10 calls, not the 1 of `iters`
    (trials of one sub-millisecond call spread up to 9960% for a new user)."""
    def prepare(problem):
        answer = reference_output(problem.q, problem.k, problem.v, problem.causal)

        def fn():
            time.sleep(0.002)
            return answer

        return Prepared(fn=fn)

    monkeypatch.setitem(BACKENDS, "short", Backend("short", "Short", lambda platform: None, prepare))
    config = tiny_config(backends=["short"])
    config["cpu"].update(warmup=1, iters=1, trials=2, min_trial_ms=20)
    raw = run_job(job_spec(config, "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}), None, "test")
    iters = [t["iters"] for t in raw["backends"]["short"]["trials"]]
    # The first trial is sized by the checked first call (slower: a first call's costs), the next by
    # the first trial's mean.
    assert iters[0] > 1 and 5 <= iters[1] <= 11, iters


def test_a_kernel_stream_short_of_the_minimum_time_is_topped_up_not_repeated():
    rule = stopping.StopRule(max_noise=0.01, min_samples=10, min_trial_ms=20.0, max_trial_ms=250)
    assert stopping.batch_size(rule, 1000, [], 0.001) == 1000
    assert stopping.batch_size(rule, 1000, [0.019] * 1000, 0.001) == 54  # 1 ms short at 19 us a call: 53 more, plus one
    assert stopping.batch_size(rule, 1000, [0.025] * 1000, 0.001) == 1000  # only the noise left to settle


def test_a_profiled_batch_fits_what_is_left_of_the_minimum_time_in_host_time():
    """At 0.33 ms of host time a sample (H200, a 0.02 ms kernel under the profiler) the minimum, a
    fifth of 250 ms, takes 152 samples: the first batch, asked for 1000 (20 ms of kernel time), is cut
    to what reaches it at the 0.35 ms assumed before any was measured; a later one to what is left of
    the minimum at the measured cost; once the minimum is met, to a whole fifth for the noise."""
    rule = stopping.StopRule(max_noise=0.01, min_samples=10, min_trial_ms=20.0, max_trial_ms=250)
    assert stopping.batch_size(rule, 1000, [], None) == math.ceil(50 / stopping.PROFILED_SAMPLE_HOST_MS)
    assert stopping.batch_size(rule, 1000, [0.02] * 130, 0.33, host_ms=130 * 0.33) == 22  # 7.1 ms left
    assert stopping.batch_size(rule, 1000, [0.02] * 142, 0.33, host_ms=142 * 0.33) == 10  # never below min_samples
    assert stopping.batch_size(rule, 1000, [0.02] * 160, 0.33, host_ms=60.0) == 152  # met: a fifth for the noise
    assert stopping.batch_size(rule, 10, [], None) == 10  # a long kernel's few calls: nothing to cut
    assert stopping.batch_size(rule, 10, [], 100.0) == 10  # never below min_samples


def _trial_at_host_cost(rule, cost_ms: float, carried: float | None) -> dict:
    """One trial through stopping.collect on a clock that advances cost_ms per sample, with the
    batches sized as Cell._profiled_stream sizes them; quiet samples (the noise is never what stops it)."""
    clock = {"ms": 0.0}
    taken: list[float] = []

    def take() -> list[float]:
        per_sample = clock["ms"] / len(taken) if taken else carried
        n = stopping.batch_size(rule, 1000, taken, per_sample, clock["ms"])
        clock["ms"] += n * cost_ms
        batch = [0.05 * (1 + 0.001 * (i % 3)) for i in range(n)]
        taken.extend(batch)
        return batch

    return stopping.collect(rule, take, clock=lambda: clock["ms"] / 1000.0)[1]


def test_a_trial_sized_by_the_previous_trials_host_cost_stops_at_the_minimum_time_not_past_it():
    """A 0.05 ms kernel whose profiled samples cost the host 1 ms each (an H200's Python-launched
    kernels cost 0.5-1.4 ms): the first trial, sized by the 0.35 ms assumed, takes 143 samples and
    143 ms where the minimum is 50 ms; the next, given the cost the first measured, stops at 50.
    Blind side: a constant cost per sample; where it moves between trials, a batch that ends short
    of the minimum is topped up by one of at least min_samples (the test above)."""
    rule = stopping.StopRule(max_noise=0.02, min_samples=10, min_trial_ms=20.0, max_trial_ms=250)
    first = _trial_at_host_cost(rule, 1.0, None)
    later = _trial_at_host_cost(rule, 1.0, first["elapsed_ms"] / first["samples"])
    assert (first["samples"], first["stopped"]) == (143, stopping.CONVERGED)
    assert first["elapsed_ms"] == pytest.approx(143.0)
    assert (later["samples"], later["stopped"]) == (50, stopping.CONVERGED)
    assert later["elapsed_ms"] == pytest.approx(50.0)


def test_later_trials_warm_up_until_settled_without_the_first_trials_minimum():
    import dataclasses

    from fabench.measure.device.warmup import trial_warmup_settings

    timing = dataclasses.replace(job_spec(tiny_config(), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32})
                                 .settings.timing, min_warmup_ms=100, max_warmup_ms=1000)
    assert trial_warmup_settings(timing, first=True).min_warmup_ms == 100
    assert trial_warmup_settings(timing, first=False) == dataclasses.replace(timing, min_warmup_ms=0)
    assert trial_warmup_settings(timing, first=False, capped=True).min_warmup_ms == 100  # held at its power cap before


def test_the_report_row_names_the_second_methods_verdict_and_each_kernels_share():
    from fabench.report.sections.timing import kernels_text, period_text, second_method_text

    trials = [trial(p, 0, [0.018] * 3, [0.025] * 3, [0.0251] * 3) for p in (0, 1)]
    for t in trials:
        t["kernel_shares"] = kernel_shares({"elementwise": 12, "attn|x": 40}, 4)
    entry = {"status": "ok", "trials": trials}
    analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})
    assert period_text(entry) == "0.025"
    assert second_method_text(entry) == "agrees: 0.4% apart, tolerance 2.0%"
    assert kernels_text(entry) == "attn\\|x 77%; elementwise 23%"  # names escaped for the table


def test_a_calls_memsets_and_copies_are_its_device_work_and_host_events_are_not():
    from fabench.measure.device.kernels import device_work

    events = [{"cat": "kernel", "ts": 5, "dur": 10, "name": "attn"},
              {"cat": "gpu_memset", "ts": 1, "dur": 2, "name": "Memset (Device)"},
              {"cat": "cuda_runtime", "ts": 0, "dur": 3, "name": "cudaLaunchKernel"},
              {"cat": "ac2g", "ts": 0, "name": "flow"}]
    assert [e["name"] for e in device_work(events)] == ["Memset (Device)", "attn"]


def test_the_detectors_injected_change_moves_the_kernels_own_time():
    """detector-check scales every trial's samples: the device figure's own (kernel_samples_ms) too,
    or an injected change would never reach a figure taken from them."""
    from fabench.analysis.detector import injected

    trials = [trial(p, i, [0.018] * 3, [0.025] * 3, [0.025] * 3) for p in (0, 1) for i in (0, 1)]
    result = {"variant": "tuned", "shape_id": "s", "platform": "cuda", "flops": 1e9, "method": {},
              "backends": {"sdpa_cudnn": {"status": "ok", "trials": trials}}}
    scaled = injected([result], 1.02)[0]["backends"]["sdpa_cudnn"]
    assert scaled["device_ms"]["median"] == pytest.approx(0.018 * 1.02)


def test_a_gpu_trial_and_its_analysis_fit_the_result_schema():
    import jsonschema

    from fabench.results.collect import result_schema

    schema = result_schema()
    trials = [trial(p, 0, [0.018] * 3, [0.025] * 3, [0.0251] * 3) for p in (0, 1)]
    for t in trials:
        t.update(kernel_shares=kernel_shares({"attn": 40}, 4), gpu_state=None,
                 stop={"stopped": "converged", "samples": 3, "noise": 0.0, "elapsed_ms": 1.0})
    entry = {"status": "ok", "trials": trials}
    analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})
    defs = {"$defs": schema["$defs"]}
    for t in entry["trials"]:
        jsonschema.validate(t, {**defs, "$ref": "#/$defs/trial"})
    jsonschema.validate(entry["stats"], {**defs, "$ref": "#/$defs/stats"})
    jsonschema.validate(entry["cross_check"], {**defs, "$ref": "#/$defs/cross_check"})


def test_the_report_counts_the_cells_each_check_judged_and_those_that_agree():
    from fabench.report.sections.timing import check_counts

    class Run:  # the report model's one method this count reads
        def __init__(self, entries):
            self.entries = entries

        def ran_backends(self):
            return ((None, "x", e) for e in self.entries)

    def cell(events, cupti):
        entry = {"status": "ok", "trials": [trial(p, 0, [0.018] * 3, [events] * 3, [cupti] * 3) for p in (0, 1)],
                 "observations": {"notes": [], "do_bench_reason": None}}
        return analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})

    unjudged = cell(0.025, 0.025)
    for t in unjudged["trials"]:
        del t["period_cupti_ms"]
    unjudged = analyse_entry(unjudged, {"platform": "cuda", "flops": 1e9, "method": {}})
    cells = [cell(0.025, 0.0251), cell(1.0, 1.05), unjudged]
    counts = check_counts(Run(cells), "second_method")
    assert (counts["cells"], counts["judged"], counts["agreeing"]) == (3, 2, 1)
    for entry, graph in zip(cells, ([0.0181] * 5, [0.0300] * 5, None)):  # agrees, differs, not taken
        if graph:
            entry["trials"][-1]["kernel_time_graph"] = {"per_call_ms": graph, "calls": 40, "replays": 5,
                                                        "gap_ms": 0.0002, "kernels_per_call": 1}
        analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})
    counts = check_counts(Run(cells), "kernel_time")
    assert (counts["cells"], counts["judged"], counts["agreeing"]) == (3, 2, 1) and "graph" in counts["method"]
    assert counts["bound"] == 0.05  # the report states the power bound beside the counts


# ---------------------------------------------------------------- the kernels' own time by graphs

def graph_trial(process, kernel_ms, per_call_ms, gap_ms=0.0012, kernels_per_call=2, calls=40):
    return {"process": process, "index": 2, "kernel_samples_ms": [kernel_ms] * 20,
            "kernel_time_graph": {"per_call_ms": per_call_ms, "calls": calls, "replays": len(per_call_ms),
                                  "gap_ms": gap_ms, "kernels_per_call": kernels_per_call}}


def test_graphs_that_read_the_kernels_plus_their_launch_gaps_agree_with_cupti():
    from fabench.analysis.kernel_check import kernel_time_check

    # 20 us of kernels; the graph adds two launch gaps of ~1 us: +10%, inside 2 x 1.2 us = 12%.
    trials = [graph_trial(p, 0.020, [0.0219, 0.0221, 0.0220, 0.0220, 0.0222]) for p in (0, 1)]
    check = kernel_time_check(trials, bound=math.inf)  # the agreement rule alone (20 us: its power is below)
    assert check["agrees"] is True and check["reason"] is None
    assert check["difference"] == pytest.approx(0.10, abs=0.002)
    assert check["tolerance_parts"]["gaps"] == pytest.approx(0.12)
    assert check["tolerance"]["low"] < 0 < check["tolerance"]["high"]


def test_graphs_of_one_process_are_judged_against_that_process_s_trials():
    """Where one process took no graphs (its capture failed), the CUPTI side is the other process's
    trials, so a process effect (process 1 here 3% slower than process 0) moves both figures and
    neither widens the tolerance nor reads as a disagreement. A graph that matches the other
    process's figure instead disagrees. Blind side: a process effect on the graphs alone (not on
    CUPTI) passes as agreement in that process."""
    from fabench.analysis.kernel_check import kernel_time_check

    def cell(graph_ms):
        trials = [dict(graph_trial(p, ms, graph_ms, kernels_per_call=1), index=i)
                  for p, ms in ((0, 0.200), (1, 0.206)) for i in range(3)]
        for t in trials:
            if (t["process"], t["index"]) == (0, 2):
                t["kernel_time_graph"] = {"error": "graph capture failed: RuntimeError: operation not permitted"}
            elif t["index"] != 2:
                del t["kernel_time_graph"]
        return kernel_time_check(trials)

    same_process = cell([0.2066] * 5)
    assert same_process["agrees"] is True and same_process["kernel_ms"] == pytest.approx(0.206)
    assert same_process["tolerance_parts"]["cupti"] == 0  # the one process's trials agree exactly
    other_process = cell([0.2000] * 5)  # process 0's figure, read in process 1: -2.9%
    assert other_process["agrees"] is False and other_process["difference"] == pytest.approx(-0.0291, abs=1e-3)


@pytest.mark.parametrize("per_call", [[0.0300] * 5, [0.0150] * 5, [0.0186] * 5])
def test_graphs_beyond_the_gaps_or_below_the_noise_disagree(per_call):
    from fabench.analysis.kernel_check import kernel_time_check

    check = kernel_time_check([graph_trial(p, 0.020, per_call) for p in (0, 1)], bound=math.inf)
    assert check["agrees"] is False and check["reason"]


def test_a_check_wider_than_its_bound_could_not_judge_and_says_its_power():
    """20 us of kernels with two launch gaps of 1.2 us: the check's tolerance reaches 12%, so a 10%
    error in the figure would pass as agreement. Above the 5% bound it says it could not judge,
    with its half-width; at 0.2 ms the same gaps leave it 1.2% wide and it judges."""
    from fabench.analysis.kernel_check import JUDGE_BOUND, kernel_time_check

    short = kernel_time_check([graph_trial(p, 0.020, [0.0300] * 5) for p in (0, 1)])  # +50%, yet unjudged
    assert short["agrees"] is None and short["half_width"] > JUDGE_BOUND == 0.05
    assert short["reason"].startswith("could not judge") and "+50.0%" in short["reason"]
    long = kernel_time_check([graph_trial(p, 0.200, [0.2110] * 5) for p in (0, 1)])  # +5.5%
    assert long["half_width"] < JUDGE_BOUND and long["agrees"] is False


def test_a_cell_the_check_disagrees_on_carries_it_into_its_claims():
    from fabench.analysis import claims
    from fabench.analysis.policy import Rule

    def cell(graph_ms):
        trials = [dict(graph_trial(p, 0.200, graph_ms), index=i, device_ms=None, wall_mean_ms=0.4, iters=10)
                  for p in (0, 1) for i in range(3)]
        for t in trials:  # the graph check runs in a process's last trial only
            if t["index"] != 2:
                del t["kernel_time_graph"]
        return analyse_entry({"status": "ok", "trials": trials}, {"platform": "cuda", "flops": 1e9, "method": {}})

    good, bad = cell([0.2015] * 5), cell([0.2110] * 5)
    assert bad["cross_check"]["kernel_time"]["agrees"] is False
    claim = claims.compare(good, bad, Rule(), names=("x", "y"), same_job=True)
    assert claim["checked"] == "differs" and "check of the kernels' own time differs for y (+5.5%" in claim["why"]
    assert claims.compare(good, copy.deepcopy(good), Rule(), same_job=True)["checked"] == "agrees"


def test_a_call_that_cannot_be_captured_leaves_the_check_unjudged_and_old_results_without_one():
    from fabench.analysis.kernel_check import kernel_time_check

    failed = [{"process": 0, "kernel_samples_ms": [0.02] * 5, "kernel_time_graph": {"error": "graph capture failed: X"}}]
    check = kernel_time_check(failed)
    assert check["agrees"] is None and check["reason"].startswith("could not judge")
    assert kernel_time_check([{"process": 0, "kernel_samples_ms": [0.02] * 5}]) is None


def test_one_launch_gap_below_cupti_still_agrees():
    from fabench.analysis.kernel_check import kernel_time_check

    check = kernel_time_check([graph_trial(p, 0.020, [0.0190] * 5) for p in (0, 1)], bound=math.inf)  # 1 us below
    assert check["agrees"] is True and check["tolerance_parts"]["gap_below"] == pytest.approx(0.06)


def test_a_captured_call_that_ran_other_kernels_is_not_judged():
    from fabench.analysis.kernel_check import kernel_time_check

    trials = [graph_trial(p, 0.020, [0.0300] * 5) for p in (0, 1)]
    for t in trials:
        t["kernel_shares"] = [{"name": "gemm_a", "us_per_call": 15, "share": 0.75},
                              {"name": "softmax", "us_per_call": 5, "share": 0.25}]
        t["kernel_time_graph"]["device_work"] = ["gemm_b", "softmax"]
    check = kernel_time_check(trials, bound=math.inf)
    assert check["agrees"] is None and "gemm_b" in check["reason"] and "gemm_a" in check["reason"]
    for t in trials:
        t["kernel_time_graph"]["device_work"] = ["softmax", "gemm_a"]
    assert kernel_time_check(trials, bound=math.inf)["agrees"] is False  # the same kernels, 50% slower: a disagreement


def test_the_kernel_time_check_judges_a_cell_through_its_analysis():
    trials = [dict(graph_trial(p, 0.200, [0.2015] * 5), wall_mean_ms=0.4, iters=100, device_ms=None,
                   warmup_iters=10, gpu_state=None) for p in (0, 1)]
    entry = {"status": "ok", "trials": trials}
    analyse_entry(entry, {"platform": "cuda", "flops": 1e9, "method": {}})
    assert entry["cross_check"]["kernel_time"]["agrees"] is True
    assert entry["cross_check"]["kernel_time"]["half_width"] < 0.05  # 0.2 ms, two gaps of 1.2 us: it can judge


def test_a_chunk_queued_behind_a_busy_gpu_is_proven_fed_from_the_chunk_before_it():
    """Two chunks in flight: chunk 2's marker ran only after chunk 1 ended on the GPU (12.8 ms of
    calls after chunk 1's own lower bound), though the host queued chunk 2 from 1 ms on, 10 ms for
    its calls. Counted from the host's `began` alone, chunk 2 looks unfed; from chunk 1's end, fed."""
    from fabench.measure.device.timing import _fed, reached_after_began

    first, first_end = reached_after_began(0.000, None, [0.05 + 0.2 * j for j in range(64)], 12.85)
    assert first_end == pytest.approx(0.01285)
    queued = [0.15 * (j + 1) for j in range(64)]  # ms after chunk 2's began: the host, 0.15 ms a call
    from_marker = [0.05 + 0.2 * j for j in range(64)]  # the GPU, 0.2 ms a call after a 0.05 ms sleep
    naive, _ = reached_after_began(0.001, None, from_marker, 12.85)
    anchored, end = reached_after_began(0.001, first_end, from_marker, 12.85)
    assert not _fed(queued, naive) and _fed(queued, anchored)
    assert end == pytest.approx(first_end + 0.01285)


def test_do_bench_takes_the_calls_its_judgement_needs_and_never_more_than_its_default():
    """269 calls at the default 3% tolerance: a short call's repetitions shrink from do_bench's
    100 ms to what they take; a long call keeps the default (do_bench then takes fewer calls, as it
    does by itself); no estimate, the default. A wider tolerance needs fewer calls."""
    from fabench.measure.device.timing import DO_BENCH_MAX_REP_MS, do_bench_calls, do_bench_rep_ms

    assert do_bench_calls(0.03) == 269 and do_bench_calls(0.06) < do_bench_calls(0.03) / 3
    assert do_bench_rep_ms(0.02, 0.03) == pytest.approx(269 * 0.12)
    assert do_bench_rep_ms(17.0, 0.03) == DO_BENCH_MAX_REP_MS and do_bench_rep_ms(None, 0.03) == DO_BENCH_MAX_REP_MS
    assert do_bench_rep_ms(0.001, 0.5) == 5.0  # the floor: do_bench's own estimate needs a few calls


class SteppedTimer:
    """A stand-in for DeviceTimer's samples (a CPU has none): `per_call_ms` a call, each window's
    samples taking that long of host time, so warm_up's clock runs as a GPU's would."""

    def __init__(self, per_call_ms: float, host_ms_per_iter: float = 0.0):
        self.per_call_ms, self.host_ms_per_iter = per_call_ms, host_ms_per_iter

    def samples(self, count: int) -> list[float]:
        time.sleep(max(self.per_call_ms, self.host_ms_per_iter) * count / 1000.0)
        return [self.per_call_ms] * count


def test_a_first_trials_warm_up_lasts_until_the_clock_holds_in_full_windows():
    """A power cap setting in: the SM clock falls 40 MHz (2%) per read for 5 windows, then holds.
    The warm-up goes on while it falls and stops at the first two full windows that agree; a GPU
    whose clock holds from the start stops after two full windows, never on the short 4-call one.
    Blind side: the stand-in's times never move; only the clock check is exercised here."""
    import dataclasses

    from fabench.measure.device.warmup import warm_up

    timing = dataclasses.replace(job_spec(tiny_config(), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32})
                                 .settings.timing, warmup_window_ms=2, min_warmup_ms=0, max_warmup_ms=5000)
    clocks = iter([1965 - 40 * min(i, 5) for i in range(100)])
    falling = warm_up(lambda: None, "cuda", SteppedTimer(0.5), timing, 0, lambda: next(clocks), full_windows=True)
    assert falling["settled"] and falling["sm_clock_mhz"] == 1765
    steady = warm_up(lambda: None, "cuda", SteppedTimer(0.5), timing, 0, lambda: 1965.0, full_windows=True)
    # 4 calls, then two windows of 8 ms (16 calls each at 0.5 ms): the 4-call window is not compared.
    assert steady["settled"] and steady["iters"] == 4 + 16 + 16
    later = warm_up(lambda: None, "cuda", SteppedTimer(0.5), timing, 0, lambda: 1965.0)
    assert later["iters"] == 4 + 4  # a later trial: the first window may agree with the next


def test_a_call_the_host_queues_slower_than_the_gpu_runs_it_warms_up_in_windows_of_host_time():
    """0.05 ms of kernels, 0.5 ms for the host to queue a call: the full 8 ms windows take 16 calls
    each, as a 0.5 ms kernel's do, not 160 (which lasted 80 ms of host time each); a kernel longer
    than its queueing is sized by its own time. Blind side: the stand-in's times never move; what a
    shorter warm-up does to the figures is measured on a GPU (the run's warm-up iterations)."""
    import dataclasses

    from fabench.measure.device.warmup import warm_up, window_calls

    timing = dataclasses.replace(job_spec(tiny_config(), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32})
                                 .settings.timing, warmup_window_ms=2, min_warmup_ms=0, max_warmup_ms=5000)
    host_bound = warm_up(lambda: None, "cuda", SteppedTimer(0.05, host_ms_per_iter=0.5), timing, 0,
                         lambda: 1965.0, full_windows=True)
    assert host_bound["settled"] and host_bound["iters"] == 4 + 16 + 16
    assert window_calls(8.0, 0.05, 0.5) == 16 and window_calls(8.0, 2.0, 0.5) == 4
    assert window_calls(8.0, 0.05, 0.0) == 160  # no host figure: by device time, as before
