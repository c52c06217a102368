"""A cell's stability and intervals from its figure's own evidence: a GPU that caught up with the
host doubts the period check's stream, not the kernels' own time; the noise between processes
widens the intervals and never makes a cell unstable; no interval is narrower than the cell's own
replicates allow; detector-check reports no prediction-interval figures for runs that have none.
No torch needed (tests/test_trials.py runs the CPU case through the real measuring code)."""

from __future__ import annotations

import copy
import json
import random
import tarfile
from pathlib import Path

import pytest

from fabench.analysis import analyse_run, entry as analysis, policy, stats
from fabench.analysis.detector import detector_check
from fabench.analysis.noise import LEVEL
from fabench.measure import observations
from fabench.results import detector_markdown
from fabench.results.contract import backend_entry

ROOT = Path(__file__).resolve().parents[1]
UNFED_NOTE = ("process 0 trial 1: 2 profiled stream(s) kept after 3 longer sleeps, the GPU still reaching a call "
              "before the host had queued it (their periods include the wait)")
LOOP_NOTE = ("process 1 trial 0: the GPU reached 1 chunk(s) before the host had queued them (not proven fed after "
             "3 longer sleeps)")
REMEASURED_NOTE = ("process 0 trial 0: 5 profiled stream(s) measured again, the GPU having reached a call before "
                   "the host had queued it")


def gpu_trial(process: int, index: int, kernel_ms: float, **extra) -> dict:
    """A trial as the measuring code records it on a GPU: the kernels' own time per call, and the
    profiled stream's period by events and by CUPTI."""
    return {"process": process, "index": index, "iters": 100, "wall_mean_ms": 0.2, "device_ms": None,
            "warmup_iters": 10, "gpu_state": None, "device_samples_ms": [kernel_ms * 1.05] * 10,
            "kernel_samples_ms": [kernel_ms] * 10, "period_profiled_events_ms": [0.110] * 9,
            "period_cupti_ms": [0.110] * 9, **extra}


def gpu_cell(notes: list[str], trials: list[dict] | None = None) -> dict:
    trials = trials or [gpu_trial(p, i, 0.100 + 0.0005 * i) for p in (0, 1) for i in range(3)]
    entry = backend_entry("X", trials=trials)
    entry["observations"] = {"notes": notes, "do_bench_reason": None}
    return analysis.analyse_entry(entry, {"platform": "cuda", "flops": 1e9,
                                          "method": {"stable_spread": 0.03, "cross_check": {"tolerance": 0.03}}})


@pytest.mark.parametrize("notes, period_judged, do_bench_judged", [
    ([UNFED_NOTE], False, True), ([REMEASURED_NOTE], False, True), ([LOOP_NOTE], True, False),
    ([UNFED_NOTE, LOOP_NOTE], False, False)])
def test_a_gpu_that_caught_up_with_the_host_leaves_the_kernels_own_time_stable(notes, period_judged, do_bench_judged):
    """Each note doubts the check that reads its stream: the profiled stream's, the period check;
    the device loop's event pairs, do_bench's comparison with them."""
    trials = [gpu_trial(p, i, 0.100 + 0.0005 * i) for p in (0, 1) for i in range(3)]
    trials[2].update(do_bench_ms=0.105, host_call_ms=0.02)
    got = gpu_cell(notes, trials)
    assert got["stats"]["stable"] and got["stats"]["unstable_codes"] == [] and got["stats"]["unstable_reason"] is None
    for check, judged in ((got["cross_check"]["second_method"], period_judged), (got["cross_check"], do_bench_judged)):
        assert (check["agrees"] is True) if judged else (
            check["agrees"] is None and check["reason"].startswith(analysis.COULD_NOT_JUDGE))


def test_the_same_notes_on_event_pairs_that_were_the_figure_make_it_unstable():
    """Before the kernels' own time was the figure, the device loop's event pairs were: a GPU that
    waited for the host inside them lengthened the figure itself."""
    pairs = [{"process": p, "index": i, "iters": 100, "wall_mean_ms": 0.2, "device_ms": None, "warmup_iters": 10,
              "gpu_state": None, "device_samples_ms": [0.100] * 10} for p in (0, 1) for i in range(3)]
    got = gpu_cell([LOOP_NOTE], pairs)
    assert not got["stats"]["stable"] and got["stats"]["unstable_codes"] == ["unfed pairs"]
    # The profiled stream's note still doubts only its own stream.
    assert gpu_cell([UNFED_NOTE], copy.deepcopy(pairs))["stats"]["stable"]


def test_unfed_streams_leave_the_period_check_unable_to_judge_and_restreams_are_a_fact():
    fed = [gpu_trial(p, i, 0.100, profiled_restreams=3) for p in (0, 1) for i in range(3)]
    got = gpu_cell([], fed)
    assert got["stats"]["stable"] and got["cross_check"]["second_method"]["agrees"] is True
    unfed = copy.deepcopy(fed)
    unfed[4]["unfed_streams"] = 1
    got = gpu_cell([], unfed)
    second = got["cross_check"]["second_method"]
    assert got["stats"]["stable"] and second["agrees"] is None and second["reason"].startswith("could not judge: 1 ")
    assert second["events_ms"] == pytest.approx(0.110)  # the figures are kept beside the verdict


def test_a_run_with_one_device_loop_has_no_profiler_overhead():
    got = gpu_cell([])
    second = got["cross_check"]["second_method"]
    assert second["profiler_overhead"] is None and second["stream"] == "the profiled stream"
    assert got["stats"]["period_ms"]["median"] == pytest.approx(0.110)


@pytest.mark.parametrize("note, code", [
    ("process 0 trial 2: warm-up did not settle within 1000 ms", "warm-up"),
    ("the processes ran different kernels: process 0: k (source sha256 aa); process 1: j (source sha256 bb)",
     "kernels"),
    ("process 1 trial 0: no kernel time: the trace holds 7 kernels, not the 9 expected", "kernels"),
])
def test_a_note_that_changes_the_figure_makes_it_unstable(note, code):
    got = gpu_cell([note])
    assert not got["stats"]["stable"] and got["stats"]["unstable_codes"] == [code]


@pytest.mark.parametrize("item, legacy_note", [
    (observations.warmup_unsettled(0, 2, 1000), "process 0 trial 2: warm-up did not settle within 1000 ms"),
    (observations.no_kernel_time(1, 0, "the trace holds 7 kernels, not the 9 expected"),
     "process 1 trial 0: no kernel time: the trace holds 7 kernels, not the 9 expected"),
    (observations.kernels_differ([{"process": 0, "names": ["k"], "source_sha256": "aa", "launch": None},
                                  {"process": 1, "names": ["j"], "source_sha256": "bb", "launch": None}]),
     "the processes ran different kernels: process 0: k (source sha256 aa, launch None); "
     "process 1: j (source sha256 bb, launch None)"),
])
def test_a_coded_observation_and_the_older_words_for_it_are_one_verdict(item, legacy_note):
    """The measuring process records a kind with values; an older result recorded English for the
    same observation. Both give one stability verdict, codes and words alike: the words come from
    verdict_text, and no reworded sentence can re-code a cell (it is never parsed)."""
    coded, older = gpu_cell([item])["stats"], gpu_cell([legacy_note])["stats"]
    assert not coded["stable"] and coded["unstable_codes"] == older["unstable_codes"] != ["note"]
    assert coded["unstable_reason"] == older["unstable_reason"]
    reworded = gpu_cell([{**item, "text": "worded otherwise"}])["stats"]  # the words decide nothing
    assert reworded["unstable_codes"] == coded["unstable_codes"] and "worded otherwise" in reworded["unstable_reason"]
    validate_notes([item])


def validate_notes(notes: list) -> None:
    import json

    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[1] / "workflow" / "schemas" /
                         "result.schema.json").read_text())
    observed = schema["$defs"]["backend"]["properties"]["observations"]
    jsonschema.validate({"notes": notes, "do_bench_reason": None}, observed)


def test_every_english_note_of_the_committed_runs_reads_back_as_it_was_written():
    """legacy.coded keeps an older note's words: the analysis of every committed run states the same
    reasons it did (and the kinds its words name). Blind side: only the notes these runs hold."""
    import json

    from fabench.analysis import legacy
    from fabench.analysis.verdict_text import observation_text

    root = Path(__file__).resolve().parents[1] / "examples"
    notes = [n for f in root.rglob("results.json") for r in json.loads(f.read_text())["results"]
             for e in r["backends"].values() for n in (e.get("observations") or {}).get("notes", [])]
    assert notes  # the H100 runs hold "different kernels" notes
    for note in notes:
        item = legacy.coded(note)
        assert observation_text(item) == note
        assert item["kind"] == ("kernels_differ" if note.startswith(legacy.KERNELS_NOTE) else item["kind"])



def test_a_clock_held_down_that_moved_the_trials_makes_the_cell_capped_not_unstable():
    """The trials spread because the GPU held its clocks down and the SM clock moved between them:
    the cell is `capped` (stable, judged at the noise of capped cells: policy.judge); with another
    doubt beside it (kernels that differ), unstable, the clock named beside the spread."""
    def capped(process, index, ms, clock):
        return gpu_trial(process, index, ms, clock_slowdown="software power cap",
                         gpu_state={"start": None, "device_loop_sm_clock_mhz": clock, "end": None})

    moved = [capped(0, 0, 0.507, 1755), capped(0, 1, 0.504, 1755), capped(0, 2, 0.551, 1650),
             capped(1, 0, 0.498, 1785), capped(1, 1, 0.494, 1770), capped(1, 2, 0.495, 1770)]
    got = gpu_cell([], moved)
    assert got["stats"]["stable"] and got["stats"]["unstable_codes"] == []
    assert "clocks held down (software power cap)" in got["stats"]["capped"]
    steady = [gpu_trial(p, i, 0.5 * (1 + 0.001 * i)) for p in (0, 1) for i in range(3)]
    assert gpu_cell([], steady)["stats"]["capped"] is None


def test_processes_apart_are_noise_not_instability():
    """Each process's trials agree; the processes lie 8% apart. That is what repeats estimate: the
    cell is stable, its interval holds both processes, and the comparison says how much it hides."""
    trials = [gpu_trial(p, i, (0.100 if p == 0 else 0.108) * (1 + 0.001 * i)) for p in (0, 1) for i in range(3)]
    cell = gpu_cell([], trials)
    assert cell["stats"]["stable"]
    run = analyse_run({"results": [{"platform": "cuda", "method": {}, "backends": {"x": cell}}]})
    figure = run["results"][0]["backends"]["x"]["stats"]["device_ms"]
    low, high = figure["ci95"]
    assert low <= min(figure["process_medians"]) and high >= max(figure["process_medians"])
    assert figure["pi95"][0] <= low and figure["pi95"][1] >= high
    verdict = policy.judge(run["results"][0]["backends"]["x"], run["results"][0]["backends"]["x"], policy.Rule())
    assert verdict["verdict"] == "cannot tell" and verdict["code"] == policy.Code.NOISY


def cpu_result(values: dict[int, list[float]], stable_spread: float = 0.03) -> dict:
    trials = [{"process": p, "index": i, "iters": 1, "wall_mean_ms": v, "device_ms": None, "warmup_iters": 1,
               "gpu_state": None} for p, vs in values.items() for i, v in enumerate(vs)]
    entry = backend_entry("Native", trials=trials)
    entry["observations"] = {"notes": [], "do_bench_reason": None}
    return {"platform": "cpu", "flops": 1e9, "method": {"stable_spread": stable_spread}, "backends": {"native": entry}}


def test_the_reviews_cpu_cell_gets_an_interval_as_wide_as_its_trials():
    """The newcomer review's (4,512,8,256) native cell: two trials of one process, 226.8 and 142.4
    ms, were shown as 180.150 to 189.118 (the pool's noise from its stable neighbours)."""
    steady = [cpu_result({0: [100.0 * (1 + 0.002 * k), 100.3]}) for k in range(6)]
    run = analyse_run({"results": [cpu_result({0: [226.8, 142.4]}), *steady]})["results"]
    figure = run[0]["backends"]["native"]["stats"]["wall_mean_ms"]
    assert figure["ci95"][0] <= 142.4 and figure["ci95"][1] >= 226.8
    assert not run[0]["backends"]["native"]["stats"]["stable"]
    assert figure["pi95"] is None  # one process: nothing says where another run reads


def test_a_cpu_cell_whose_processes_differ_but_whose_trials_agree_is_stable():
    run = analyse_run({"results": [cpu_result({0: [10.0, 10.1, 10.05], 1: [13.0, 13.1, 13.05],
                                               2: [11.0, 11.05, 11.1]})]})["results"]
    native = run[0]["backends"]["native"]
    assert native["stats"]["stable"] and native["stats"]["unstable_codes"] == []
    figure = native["stats"]["wall_mean_ms"]
    assert figure["within_spread"] == pytest.approx(0.01) and figure["spread"] == pytest.approx(0.31)
    assert figure["noise"]["between"] == "processes"
    assert figure["ci95"][0] <= 10.05 and figure["ci95"][1] >= 13.05
    # One trial of nine that a busy host preempted does not make its process unstable.
    preempted = cpu_result({0: [10.0] * 4 + [31.0] + [10.05] * 4, 1: [10.1] * 9})
    assert analyse_run({"results": [preempted]})["results"][0]["backends"]["native"]["stats"]["stable"]


def synthetic_run(rng: random.Random) -> list[dict]:
    """Cells of random durations, processes and trials, with process effects and trial noise of
    random sizes (some far beyond the others), on a GPU or a CPU."""
    results = []
    for _ in range(rng.randint(1, 24)):
        processes, per = rng.randint(1, 4), rng.randint(2, 10)
        base, effect, jitter = 10 ** rng.uniform(-2, 2), rng.choice([0.001, 0.01, 0.2]), rng.choice([0.001, 0.05, 0.5])
        values = {p: [base * (1 + rng.uniform(0, effect)) * (1 + rng.uniform(0, jitter)) for _ in range(per)]
                  for p in range(processes)}
        results.append(cpu_result(values))
    return results


@pytest.mark.parametrize("seed", range(40))
def test_no_interval_is_narrower_than_the_cells_own_replicates_allow(seed):
    run = analyse_run({"results": synthetic_run(random.Random(seed))})["results"]
    for result in run:
        figure = result["backends"]["native"]["stats"]["wall_mean_ms"]
        trials = result["backends"]["native"]["trials"]
        by_process = len({t["process"] for t in trials}) > 1
        replicates = figure["process_medians"] if by_process else [t["wall_mean_ms"] for t in trials]
        low, high = stats.order_interval(replicates, LEVEL)
        assert figure["ci95"][0] <= low * (1 + 1e-12) and figure["ci95"][1] >= high * (1 - 1e-12)
        if figure["pi95"]:
            assert figure["pi95"][0] <= figure["ci95"][0] and figure["pi95"][1] >= figure["ci95"][1]
        if len(replicates) >= 3:  # its own variance counts from two degrees of freedom
            assert figure["noise"]["sigma"] ** 2 >= stats.log_variance(replicates) - 1e-15


def one_process_runs() -> list[tuple[str, list[dict]]]:
    """Two CPU runs with one process per job (hardware and experiment alike)."""
    hardware = {"host": "h", "platform": "cpu", "device": "AMD EPYC", "arch": "x86_64"}
    runs = []
    for run_id, factor in (("cpu/0001-aaaaaaaa", 1.0), ("cpu/0002-bbbbbbbb", 1.01)):
        results = []
        for k in range(4):
            result = cpu_result({0: [factor * (10.0 + k) * (1 + 0.002 * i) for i in range(3)]})
            result.update(variant="default", shape_id=f"s{k}", shape={"seq": 64 * (k + 1)}, provenance=hardware)
            result["backends"]["native"]["label"] = "Native"
            results.append(result)
        runs.append((run_id, results))
    return runs


def test_detector_check_reports_no_prediction_interval_figures_for_runs_with_none():
    check = detector_check(one_process_runs(), policy.Rule())
    pair = check["pairs"][0]
    assert pair["cells"] == 4 and pair["pi_checks"] == 0 and pair["pi_misses"] == 0
    same = check["summary"]["same card"]
    assert same["pi_misses"]["n"] == 0 and same["pi_misses"]["value"] is None
    coverage = [row for row in check["acceptance"] if row["name"] == "coverage"]
    assert coverage and all(row["holds"] is None for row in coverage)  # nothing to measure: not a pass
    text = detector_markdown.render(check)
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {pair['old']} | {pair['new']} |")]
    assert row.split(" | ")[7] == "n/a"  # the pair's column "Beyond the prediction": nothing to count


def test_re_analysing_the_h100_archive_doubts_no_figure_for_unfed_profiled_streams(tmp_path):
    """The H100 run of commit 6933101 noted every profiled stream taken again: 26 of its 60 ok
    cells were unstable for it alone (examples/h100/README.md). Those notes doubt the period."""
    with tarfile.open(ROOT / "examples" / "h100" / "archive-0001.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/results.json"))
        results = json.load(tar.extractfile(member))
    cells = [b for r in analyse_run(results)["results"] for b in r["backends"].values() if b["status"] == "ok"]
    assert len(cells) == 60
    assert sum(not b["stats"]["stable"] for b in cells) <= 3  # at most 5% of the ok cells
    unjudged = [b["cross_check"]["second_method"] for b in cells if b["cross_check"]["second_method"]["agrees"] is None]
    assert len(unjudged) == 26 and all(s["reason"].startswith(analysis.COULD_NOT_JUDGE) for s in unjudged)
