"""The run's time line: a real measuring process records its phases, the runner when it started
and ended it, and the analysis sums them by kind of work and finds processes that shared a GPU."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fabench.analysis import analyse_run
from fabench.report.wall_clock import GROUP_OF, gpu_overlaps, run_time_line
from fabench.report.render import render
from support.runs import CUDA_13_0, SHAPES, config_for, make_result
from test_runner import run_job
from workflow_util import tiny_config


@pytest.mark.skipif(torch.cuda.is_available(), reason="times the CPU path")
def test_a_real_process_records_its_phases_and_the_runner_its_start_and_end(tmp_path):
    result, _ = run_job(tmp_path, tiny_config())
    [timeline] = result["timelines"]
    [ended] = result["method"]["process_exits"]
    assert timeline["process"] == 0 and timeline["spawned_at"] == pytest.approx(ended["spawned_at"])
    phases = timeline["phases"]
    names = {p["phase"] for p in phases}
    assert {"imports", "device set-up", "inputs and fp32 reference", "prepare", "first call and check",
            "warm-up", "wall loop", "release", "provenance"} <= names
    assert names <= set(GROUP_OF), names - set(GROUP_OF)  # every phase has its kind of work
    assert all(ended["spawned_at"] <= p["start"] <= p["end"] <= ended["exited_at"] for p in phases)
    trials = {(p["backend"], p["trial"]) for p in phases if p["phase"] == "wall loop"}
    assert trials == {(b, t) for b in ("native", "sdpa") for t in (0, 1)}
    line = run_time_line([result])
    assert line["processes"] == 1 and line["overlaps"] == []
    process_s = ended["exited_at"] - ended["spawned_at"]
    # The phases, with start-up and exit derived from the runner's record, cover the process's life.
    assert line["in_processes_s"] == pytest.approx(process_s, rel=1e-6)
    assert sum(g["seconds"] for g in line["groups"]) == pytest.approx(sum(line["phases"].values()))
    assert 0.5 * process_s < sum(line["phases"].values()) <= process_s * 1.0001
    json.dumps(line)


def process(job, index, gpu, start, end, host="h"):
    return {"job": job, "process": index, "gpu": gpu, "host": host, "start": start, "end": end, "phases": []}


def test_processes_that_measured_on_one_gpu_at_the_same_time_are_named():
    apart = [process("a", 0, "GPU-1", 0, 10), process("b", 0, "GPU-2", 2, 8), process("c", 0, "GPU-1", 10, 12)]
    assert gpu_overlaps(apart) == []
    # A long process overlaps one that does not follow it directly in start order.
    overlapping = [process("a", 0, "GPU-1", 0, 10), process("b", 0, "GPU-1", 1, 2), process("c", 0, "GPU-1", 5, 12)]
    found = gpu_overlaps(overlapping)
    assert len(found) == 2 and "a process 0 and b process 0 on GPU-1: 1.00 s together" in found[0]
    assert "a process 0 and c process 0 on GPU-1: 5.00 s together" in found[1]
    # The same GPU id on two hosts is two GPUs.
    assert gpu_overlaps([process("a", 0, "GPU-1", 0, 10, "x"), process("b", 0, "GPU-1", 0, 10, "y")]) == []


def test_a_worker_started_ahead_is_on_its_gpu_from_its_first_job_not_from_its_imports():
    """Round 1's worker imported while round 0's job measured on the GPU (started ahead): no
    overlap; a job whose measurement began before the other's ended still is one. Blind side: a
    worker's start-up is taken to touch no device (it imports; the job creates the GPU's context)."""
    def worker_job(variant, index, phases):
        timeline = {"process": index, "spawned_at": phases[0][1], "worker": {"name": f"w{index}", "pid": 1 + index},
                    "phases": [{"phase": name, "start": a, "end": b} for name, a, b in phases]}
        ended = {"index": index, "spawned_at": phases[0][1], "exited_at": phases[-1][2], "gpu_uuid": "GPU-1",
                 "host": "h"}
        return {"variant": variant, "shape_id": "b1-s64-h2-d32", "platform": "cuda", "timelines": [timeline],
                "method": {"process_exits": [ended]}, "backends": {}}

    first = worker_job("default", 0, [("imports", 0.0, 5.0), ("warm-up", 5.0, 20.0)])
    ahead = worker_job("tuned", 1, [("imports", 6.0, 12.0), ("worker hand-over", 20.5, 21.0), ("warm-up", 21.0, 30.0)])
    line = run_time_line([first, ahead])
    assert line["overlaps"] == []
    # Its idle wait from its start-up's end (12) to its job (20.5) is no work of the run's.
    assert line["workers_waiting_s"] == pytest.approx(8.5)
    assert line["in_processes_s"] == pytest.approx(20.0 + 24.0 - 8.5)
    assert sum(g["share"] for g in line["groups"]) == pytest.approx(1.0)
    early = worker_job("tuned", 1, [("imports", 6.0, 12.0), ("worker hand-over", 18.0, 19.0), ("warm-up", 19.0, 30.0)])
    [found] = run_time_line([first, early])["overlaps"]
    assert found.endswith("on GPU-1: 2.00 s together")


def test_the_time_between_jobs_on_a_device_is_split_where_the_next_launcher_recorded_its_start():
    """Blind side: the launcher's start is read from /proc to 10 ms; tested on a real launcher in
    tests/test_worker.py (test_one_worker_measures_job_after_job_and_pays_its_start_up_once)."""
    def job(variant, gpu, start, end, launcher=None):
        timeline = {"process": 0, "phases": [{"phase": "warm-up", "start": start, "end": end}]}
        ended = {"index": 0, "exited_at": end, "gpu_uuid": gpu, "host": "h", **({"launcher": launcher} if launcher else {})}
        return {"variant": variant, "shape_id": "b1-s64-h2-d32", "platform": "cuda", "timelines": [timeline],
                "method": {"process_exits": [ended]}, "backends": {}}

    first = job("default", "GPU-1", 0.0, 20.0)
    second = job("tuned", "GPU-1", 20.6, 30.0, {"started_at": 20.3, "leased_at": 20.5})
    other_card = [job("default", "GPU-2", 1.0, 9.0), job("tuned", "GPU-2", 10.0, 12.0)]  # no launcher record
    side_by_side = job("other", "GPU-1", 25.0, 26.0, {"started_at": 24.0, "leased_at": 24.5})  # within second
    between = run_time_line([first, second, *other_card, side_by_side])["between_jobs"]
    assert between["gaps"] == 2 and between["seconds"] == pytest.approx(0.6 + 1.0)
    assert between["split"] == 1
    assert (between["before_launcher_s"], between["launcher_s"], between["to_measuring_s"]) == pytest.approx((0.3, 0.2, 0.1))
    assert run_time_line([first])["between_jobs"] is None
    assert between["ready"] == 0


def test_a_launcher_ready_before_the_previous_process_ended_splits_its_gap_at_the_lease():
    """A launcher started ahead (fabench.slots) waited for the lease while the job before it measured:
    its gap runs from that job's end to the lease, then to the measurement; the old split is kept
    for a launcher started after the end, and each is counted."""
    first = timed("default", "GPU-1", 0.0, 20.0)
    ready = timed("tuned", "GPU-1", 20.3, 30.0, {"started_at": 12.0, "leased_at": 20.01})
    after = timed("other", "GPU-1", 31.0, 40.0, {"started_at": 30.2, "leased_at": 30.8})
    lost = timed("more", "GPU-1", 41.0, 42.0, {"started_at": 35.0, "leased_at": 39.0})  # leased before the end
    between = run_time_line([first, ready, after, lost])["between_jobs"]
    assert between["gaps"] == 3 and between["seconds"] == pytest.approx(0.3 + 1.0 + 1.0)
    assert (between["split"], between["ready"]) == (1, 1)
    assert (between["ready_to_lease_s"], between["ready_to_measuring_s"]) == pytest.approx((0.01, 0.29))
    assert (between["before_launcher_s"], between["launcher_s"], between["to_measuring_s"]) == pytest.approx((0.2, 0.6, 0.2))


def timed(variant, gpu, start, end, launcher=None):
    timeline = {"process": 0, "phases": [{"phase": "warm-up", "start": start, "end": end}]}
    ended = {"index": 0, "exited_at": end, "gpu_uuid": gpu, "host": "h", **({"launcher": launcher} if launcher else {})}
    return {"variant": variant, "shape_id": "b1-s64-h2-d32", "platform": "cuda", "timelines": [timeline],
            "method": {"process_exits": [ended]}, "backends": {}}


# ---------------------------------------------------------------- kinds of work, jobs, stops, the setting

def job(variant: str, platform: str, phases: dict[str, float], processes: int = 1, stops: tuple = ()) -> dict:
    """A job's result with `processes` processes, each running `phases` (name -> seconds) back to
    back, and one backend whose GPU trials stopped for `stops`."""
    timelines, exits, clock = [], [], 0.0
    for index in range(processes):
        start = clock
        recorded = []
        for name, seconds in phases.items():
            recorded.append({"phase": name, "start": clock, "end": clock + seconds})
            clock += seconds
        timelines.append({"process": index, "spawned_at": start, "phases": recorded})
        exits.append({"index": index, "spawned_at": start, "exited_at": clock, "gpu_uuid": None, "host": "h"})
    trials = [{"process": 0, "index": i, "stop": {"stopped": s}} for i, s in enumerate(stops)]
    return {"variant": variant, "shape_id": "b4-s512-h8-d256", "platform": platform, "timelines": timelines,
            "method": {"process_exits": exits}, "backends": {"triton": {"status": "ok", "trials": trials}}}


def seconds_of(line: dict) -> dict[str, float]:
    return {g["group"]: round(g["seconds"], 6) for g in line["groups"]}


def test_the_fp32_reference_is_its_own_kind_of_work_and_jobs_are_told_from_processes():
    phases = {"imports": 1.0, "inputs and fp32 reference": 40.0, "first call and check": 3.0, "wall loop": 10.0}
    line = run_time_line([job("default", "cuda", phases, processes=2), job("tuned", "cuda", phases, processes=2)])
    assert (line["jobs"], line["processes"]) == (2, 4)
    assert seconds_of(line)["start-up"] == 4.0 and seconds_of(line)["inputs and fp32 reference"] == 160.0
    assert seconds_of(line)["compiling and the correctness check"] == 12.0
    assert line["largest"]["group"] == "inputs and fp32 reference" and line["largest"]["setting"] == "shapes"


def test_on_a_cpu_the_checked_first_call_is_the_warm_up():
    phases = {"first call and check": 3.0, "warm-up": 0.0, "wall loop": 10.0}
    line = run_time_line([job("default", "cpu", phases)])
    assert seconds_of(line)["measuring: warm-up"] == 3.0 and "compiling and the correctness check" not in seconds_of(line)
    assert line["measuring_s"] == 13.0
    assert line["largest"]["setting"] == "cpu.min_trial_ms" and line["trial_stops"] is None
    gpu = run_time_line([job("default", "cuda", phases)])
    assert seconds_of(gpu)["compiling and the correctness check"] == 3.0


def test_gpu_trials_are_counted_by_why_they_stopped_and_timeouts_point_at_max_trial_ms():
    phases = {"kernel loop": 20.0}
    timed_out = run_time_line([job("default", "cuda", phases, stops=("converged", "timeout", "timeout",
                                                                      "noise_converged"))])
    assert timed_out["trial_stops"] == {"converged": 1, "noise_converged": 1, "timeout": 2}
    assert timed_out["largest"]["setting"] == "timing.max_trial_ms"
    quiet = run_time_line([job("default", "cuda", phases, stops=("converged", "noise_converged"))])
    assert quiet["trial_stops"]["timeout"] == 0 and quiet["largest"]["setting"] == "timing.trials"


def timed_gpu_run(processes: int = 2) -> tuple[dict, dict]:
    """A GPU run as the workflow collects it (support.runs: two variants, five shapes, on an H200)
    whose every job recorded `processes` time lines, each compiling and checking the longest; its
    config. Its trials carry no stop reasons, as those measured before the stopping rule."""
    phases = {"imports": 1.0, "device set-up": 0.5, "inputs and fp32 reference": 2.0, "prepare": 3.0,
              "first call and check": 4.0, "warm-up": 1.0, "kernel loop": 2.5, "release": 0.2}
    results = []
    for variant in ("default", "tuned"):
        for shape in SHAPES:
            result = make_result("h200", variant, shape, CUDA_13_0)
            timed = job(variant, "cuda", phases, processes=processes)
            result["timelines"] = timed["timelines"]
            result["method"]["process_exits"] = timed["method"]["process_exits"]
            results.append(result)
    return analyse_run({"run": "h200", "results": results}), config_for("h200", SHAPES, ["default", "tuned"])


def test_the_report_names_jobs_processes_the_stops_and_the_setting():
    collected, config = timed_gpu_run()
    text = render(collected, config, None).split("### Where the run's time went", 1)[1].split("\n---", 1)[0]
    assert text.lstrip().startswith("10 jobs, 20 measuring processes.")
    assert "| inputs and fp32 reference |" in text
    assert "The largest item, compiling and the correctness check" in text and "cut by `backends`" in text
    # Its trials predate the stopping rule: no stop counts claimed.
    assert "GPU trials, by why they stopped" not in text
    stops = ("timeout", "converged", "noise_converged")
    for result in collected["results"]:
        for backend in result["backends"].values():
            for i, trial in enumerate(backend.get("trials") or []):
                trial["stop"] = {"stopped": stops[i % 3]}
    text = render(collected, config, None)
    assert re.search(r"GPU trials, by why they stopped: (\d+) converged .*, \1 with their noise settled above it, "
                     r"\1 at `timing.max_trial_ms`", text)


@pytest.mark.parametrize("ready_every", [0, 1, 2])
def test_the_report_splits_the_gaps_of_launchers_started_after_the_end_and_of_those_ready_before_it(ready_every):
    """The jobs one after another on one GPU, 0.5 s apart; each next job's launcher started 0.1 s
    after the end, or (every `ready_every`th) 5 s before it, ready, leasing 0.02 s after the end."""
    collected, config = timed_gpu_run(processes=1)
    clock = 0.0
    for n, result in enumerate(collected["results"]):
        phases = result["timelines"][0]["phases"]
        shift = clock - phases[0]["start"]
        for phase in phases:
            phase["start"], phase["end"] = phase["start"] + shift, phase["end"] + shift
        [ended] = result["method"]["process_exits"]
        launcher = ({"started_at": clock - 5.5, "leased_at": clock - 0.48} if ready_every and n % ready_every == 0
                    else {"started_at": clock - 0.4, "leased_at": clock - 0.2})
        ended.update({"spawned_at": clock, "exited_at": phases[-1]["end"], "gpu_uuid": "GPU-1",
                      **({"launcher": launcher} if n else {})})
        result["timelines"][0]["spawned_at"] = clock
        clock = phases[-1]["end"] + 0.5
    text = render(collected, config, None)
    [said] = re.findall(r"Between one job's process and the next on the same GPU: [^(]*\(.*?\)\.", text)
    ready = 0 if not ready_every else len(range(ready_every, 10, ready_every))
    assert said.startswith("Between one job's process and the next on the same GPU: 9 gaps, 4.5 s in all (")
    old = ("until the next job's launcher started, Snakemake's scheduling and the previous launcher's exit; "
           "1.8 s in the launchers until each held its device, their interpreters, imports and leases; "
           "1.8 s from the lease to the measurement's start")
    if not ready:
        assert said.endswith(f"(0.9 s {old}).")  # as before this split was made
    else:
        ahead = (f"{ready} launcher{'s' if ready != 1 else ''} ready, started before the previous process ended: "
                 f"{0.02 * ready:.1f} s from the previous process's end to the lease, the previous launcher's exit and "
                 f"the lease's wake-up, and {0.48 * ready:.1f} s from the lease to the measurement's start).")
        assert said.endswith(ahead), said
        mixed = f"{9 - ready} launchers started after the previous process ended: "
        assert (mixed in said) == (ready < 9) and ("until the next job's launcher started" in said) == (ready < 9), said


def test_the_report_says_workers_started_beside_the_compile_ahead_only_where_they_did():
    """In worker mode on a GPU the compile ahead starts the measuring workers (its record counts
    them); in isolate mode, or on a CPU, it starts none, and the report said it had all the same."""
    collected, config = timed_gpu_run()  # its processes start at 0 s
    for workers, said in ((2, True), (0, False)):
        collected["compile_ahead"] = {
            "format": "fabench-compile-ahead-run/1", "started_at": -40.0, "leased_at": -39.5, "ended_at": -5.0,
            "host": "h", "gpu": "0", "gpu_uuid": "GPU-a", "parallel": 8, "workers_started": workers,
            "processes": [{"variant": "default", "shape_id": "b4-s512-h8-d256", "spawned_at": -39.4,
                               "exited_at": -6.0, "exit_code": 0, "backends": {"flex": {"status": "compiled"}}}],
                "cached": []}
        text = render(collected, config, None, started_at=-41.0)
        assert "compiled ahead for 34.5 s (1 process, 8 at a time on one GPU" in text
        assert ("; the measuring workers started beside it), and the first job" in text) is said, workers


def test_cpu_timed_loops_of_one_call_each_point_at_fewer_trials_not_min_trial_ms():
    """Issue 40: every trial was one call over 100 ms, and the report said `cpu.min_trial_ms` cuts the
    timed loops; lowering it would change nothing. Where any trial was lengthened to last it, it does."""
    phases = {"first call and check": 1.0, "wall loop": 10.0}

    def cpu_job(ran: list[int]) -> dict:
        result = job("default", "cpu", phases)
        result["method"]["iters"] = 1
        result["backends"]["triton"]["trials"] = [{"process": 0, "index": i, "iters": n} for i, n in enumerate(ran)]
        return result

    assert run_time_line([cpu_job([1, 1, 1])])["largest"]["setting"] == "cpu.trials"
    assert run_time_line([cpu_job([1, 2, 1])])["largest"]["setting"] == "cpu.min_trial_ms"
