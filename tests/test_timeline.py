"""The run's time line: a real measuring process records its phases, the runner when it started
and ended it, and the analysis sums them by kind of work and finds processes that shared a GPU."""

from __future__ import annotations

import json

import pytest
import torch

from fabench.analysis.timeline import GROUP_OF, gpu_overlaps, run_time_line
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
