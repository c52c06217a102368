"""Compiling ahead (fabench.measure.launch.precompile, fabench.measure.precompile_child): real
compiling processes on this CPU, where FlexAttention is the backend that compiles (Inductor's C++),
into the compile cache that a job's measuring process then reads; the plan's choice of when; the
time line's account of it. What it saves on a GPU (FlexAttention's Triton kernels, aiter's,
FlashAttention-4's) is measured in a GPU lease (examples/, the report's time line)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabench.report.precompile_summary import compile_ahead_summary
from fabench.report.wall_clock import compiled_while_measuring, run_time_line
from fabench.measure.launch.precompile import STAMPS, parallel_processes
from fabench.measure.spec import job_spec
from fabench.shapes import parse_shape_id
from test_plan import with_defaults
from fabench.plan import Plan
from fabench.side_files import COMPILE_AHEAD, read_side_file
from workflow_util import REPO, default_config, planned_jobs, snakemake, tiny_config

SHAPE = "b1-s64-h2-d32"


def flex_config() -> dict:
    """The CPU test experiment with FlexAttention measured (the default CPU run leaves it out)."""
    config = tiny_config()
    config["cpu"] = {**config["cpu"], "leave_out": []}
    return config


def environment(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABENCH_GPUS", "FABENCH_WORKFLOW"))}
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1", "FABENCH_LEASE_DIR": str(tmp_path / "leases"),
            "FABENCH_WORKER_DIR": str(tmp_path / "workers")}


def compile_ahead(tmp_path: Path, specs: list, *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    """The compile ahead as the Snakefile starts it, working in `tmp_path` (its compile cache there)."""
    out = tmp_path / "compile-ahead.json"
    cmd = [sys.executable, "-m", "fabench.measure.launch.precompile",
           *[arg for spec in specs for arg in ("--spec", spec.to_json())], "--out", str(out), *extra]
    proc = subprocess.run(cmd, cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=900)
    return proc, json.loads(out.read_text()) if out.is_file() else None


def spec_of(config: dict, variant: str):
    return job_spec(config, variant, parse_shape_id(SHAPE), platform="cpu")


def test_the_jobs_kernels_are_compiled_ahead_into_the_cache_their_job_then_reads(tmp_path):
    """Blind side: on a CPU only FlexAttention compiles, and no worker starts ahead (a CPU's cores
    are the timed device); the GPU's backends and workers run in a GPU lease."""
    config = flex_config()
    proc, record = compile_ahead(tmp_path, [spec_of(config, "default"), spec_of(config, "tuned")],
                                 "--mode", "worker", "--worker-idle-s", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(p["variant"], p["shape_id"]) for p in record["processes"]] == [("default", SHAPE), ("tuned", SHAPE)]
    ahead = [p["backends"]["flex"] for p in record["processes"]]
    assert [o["status"] for o in ahead] == ["compiled", "compiled"], record
    # What cannot run here is said, and what does not compile is not touched.
    assert record["processes"][0]["backends"]["fa4"]["status"] == "unavailable"
    assert "native" not in record["processes"][0]["backends"]
    assert record["workers_started"] == 0 and not list((tmp_path / "workers").glob("w-*"))
    assert record["leased_at"] <= record["processes"][0]["spawned_at"] <= record["processes"][-1]["exited_at"] \
        <= record["ended_at"]
    assert any((tmp_path / "build" / "compile-cache" / "inductor").rglob("*.so")), "no compiled kernel was cached"
    assert len(list((tmp_path / STAMPS).glob("*.json"))) == 2 and record["cached"] == []

    # Another run of the same jobs, into the same cache: each job's stamp says it was compiled ahead
    # (a run's name is no part of its kernels, nor how its jobs are timed and judged: the preview's
    # other timing, counts and tolerance), and nothing is compiled.
    began = time.monotonic()
    renamed = {**config, "run": "another", "iters": 7, "warmup": 3, "tolerance": {"max_abs_err": 0.05, "min_cosine": 0.99},
               "timing": {**config["timing"], "trials": 3, "repeats": 1, "max_noise": 0.03},
               "cpu": {**config["cpu"], "trials": 3, "min_trial_ms": 50}}
    again, second = compile_ahead(tmp_path, [spec_of(renamed, "default"), spec_of(renamed, "tuned")])
    assert again.returncode == 0 and second["processes"] == [], again.stdout + again.stderr
    assert second["cached"] == [{"variant": "default", "shape_id": SHAPE}, {"variant": "tuned", "shape_id": SHAPE}]
    assert time.monotonic() - began < 15
    # A job whose kernels differ (another shape; another dtype, or FlexAttention left out on the CPU)
    # has no stamp: compiled (here not started, past the bound).
    other = job_spec(config, "default", parse_shape_id("b1-s64-h2-d64"), platform="cpu")
    _, third = compile_ahead(tmp_path, [other, spec_of(config, "tuned")], "--timeout-s", "0.2")
    assert [p["shape_id"] for p in third["processes"]] == ["b1-s64-h2-d64"] and len(third["cached"]) == 1
    for changed in ({**config, "dtype": "bfloat16"}, {**config, "cpu": {**config["cpu"], "leave_out": ["flex"]}}):
        _, fourth = compile_ahead(tmp_path, [spec_of(changed, "default")], "--timeout-s", "0.2")
        assert fourth["cached"] == [] and [p["shape_id"] for p in fourth["processes"]] == [SHAPE], fourth

    # The default variant's job, in a process of its own, finds its FlexAttention kernel cached.
    kernel_config = tmp_path / "aiter.json"
    kernel_config.write_text(json.dumps({"fwd": {"default": {"BLOCK_M": 64, "BLOCK_N": 32}}}))
    out = tmp_path / "process-0.json"
    job = subprocess.run([sys.executable, "-m", "fabench.measure", "--spec", spec_of(config, "default").to_json(),
                          "--aiter-config", str(kernel_config), "--out", str(out), "--process", "0"],
                         cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=900)
    assert job.returncode == 0, job.stdout + job.stderr
    measured = json.loads(out.read_text())["backends"]["flex"]
    assert measured["status"] == "ok", measured.get("reason")
    assert measured["compile_s"] < ahead[0]["seconds"] / 2, (measured["compile_s"], ahead[0]["seconds"])


def test_the_compile_ahead_past_its_time_bound_kills_and_records_its_processes_and_still_ends_well(tmp_path):
    """The bound is the whole compile ahead's, not each process's: what runs then is killed, what
    waits is not started (on a host of few cores the processes run one at a time). Blind side: a
    process that hangs is the case timed here; one that crashes is recorded by the same path (no
    record from it: its exit)."""
    config = flex_config()
    began = time.monotonic()
    proc, record = compile_ahead(tmp_path, [spec_of(config, "default"), spec_of(config, "tuned")],
                                 "--timeout-s", "0.2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - began < 60
    killed = "timed out after 0.2 s (measure.job_timeout_s): its compiling process was killed"
    not_started = "not started: the compile ahead's bound of 0.2 s (measure.job_timeout_s) had passed"
    reasons = [p["reason"] for p in record["processes"]]
    assert reasons[0] == killed and reasons[1] in (killed, not_started), reasons
    assert record["ended_at"] - record["leased_at"] < 0.2 + 10  # one bound, not one per process
    assert "2 of them failed" in proc.stdout
    assert not list((tmp_path / STAMPS).glob("*.json"))  # nothing compiled: no stamp, compiled again next time


@pytest.mark.parametrize("jobs, cores, expected", [(10, 16, 10), (10, 32, 10), (10, 2, 1), (10, 1, 1), (3, 6, 3),
                                                   (20, 16, 14)])
def test_the_compiling_processes_run_one_per_job_on_the_cores_left(jobs, cores, expected):
    assert parallel_processes(jobs, cores) == expected


@pytest.mark.parametrize("wanted, platform, docker, cluster, expected", [
    ("gpu", "cuda", False, False, True), ("gpu", "rocm", False, False, True), ("gpu", "cpu", False, False, False),
    ("always", "cpu", False, False, True), ("never", "cuda", False, False, False),
    ("gpu", "cuda", True, False, False), ("gpu", "cuda", False, True, False), ("always", "cpu", False, True, False)])
def test_the_workflow_compiles_ahead_on_a_gpu_on_the_local_executor_in_the_local_runtime(
        wanted, platform, docker, cluster, expected):
    """Blind side: whether the caches the jobs read are the ones filled (the container's, a cluster
    node's) is why docker and cluster executors are left out, not tested."""
    config = with_defaults({**default_config(), "measure": {"compile_ahead": wanted}})
    assert (Plan(config, REPO, docker=docker, platform=platform).not_compiling_ahead(cluster) is None) is expected


def test_the_workflow_compiles_ahead_before_its_first_job_and_its_report_says_so(tmp_path):
    """Blind side: the CPU's one compiling process at a time (two cores); several side by side run
    on a GPU host's cores in a GPU lease."""
    config = {**flex_config(), "measure": {"compile_ahead": "always"}}
    config["shapes"] = [config["shapes"][0]]
    record_path = tmp_path / "results" / "tiny" / "compile-ahead.json"
    dry = snakemake(tmp_path, "--cores", "1", "report", "-n", config=config)
    assert dry.returncode == 0 and not record_path.exists()
    assert planned_jobs(dry)["compile_ahead"] == 1
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Its own job, before every measure job, and an input of the report's.
    jobs = re.findall(r"^local(?:rule|checkpoint) (\w+):", proc.stderr, re.MULTILINE)
    assert jobs.index("compile_ahead") < jobs.index("measure")
    report_job = proc.stderr[proc.stderr.index("localrule write_report:"):]
    assert "results/tiny/compile-ahead.json" in report_job.split("output:")[0]
    collected = json.loads((tmp_path / "results" / "tiny" / "results.json").read_text())
    ahead = collected["compile_ahead"]
    assert len(ahead["processes"]) == 2 and ahead["ended_at"] <= min(
        t["phases"][0]["start"] for r in collected["results"] for t in r["timelines"])
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()
    assert "before compiling ahead (checking the config, planning the jobs), compiled ahead for " in report
    assert "(2 processes, 1 at a time on the host with no job timed, made 2 compiled backends' first calls" in report
    # Nothing left to measure: nothing compiled ahead, the record of the measured run kept.
    again = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert again.returncode == 0 and "Nothing to be done" in again.stderr, again.stderr[-3000:]
    assert json.loads(record_path.read_text()) == ahead
    # Results deleted are measured again, the other job not: the record stays, and is not this workflow's.
    (tmp_path / "results" / "tiny" / "tuned" / f"{SHAPE}.json").unlink()
    (tmp_path / "results" / "tiny" / "tuned" / SHAPE / "process-0.json").unlink()
    default_process = tmp_path / "results" / "tiny" / "default" / SHAPE / "process-0.json"
    measured_at = default_process.stat().st_mtime_ns
    third = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert re.findall(r"^local(?:rule|checkpoint) (\w+):", third.stderr, re.MULTILINE).count("measure") == 1
    assert json.loads(record_path.read_text()) == ahead and default_process.stat().st_mtime_ns == measured_at
    assert "compiled ahead for " not in (tmp_path / "results" / "tiny" / "report.md").read_text()
    # A spec changed (its timing, which builds no kernel): compiled ahead again, every kernel found stamped.
    config["cpu"] = {**config["cpu"], "min_trial_ms": config["cpu"]["min_trial_ms"] + 1}
    fourth = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert fourth.returncode == 0, fourth.stdout[-3000:] + fourth.stderr[-3000:]
    assert re.findall(r"^local(?:rule|checkpoint) (\w+):", fourth.stderr, re.MULTILINE).count("measure") == 2
    latest = json.loads(record_path.read_text())
    assert latest["processes"] == [] and [c["variant"] for c in latest["cached"]] == ["default", "tuned"]
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()
    assert "compiled ahead for " in report
    # No worker started beside it (a CPU's workers start with their jobs): the report says none did.
    assert "(none: the kernels of its 2 jobs were compiled ahead before, into this compile cache), " in report
    # Only the compile ahead changed (told never): its record written anew says so, no process measured again.
    measured_at = default_process.stat().st_mtime_ns
    fifth = snakemake(tmp_path, "--cores", "1", "report", config={**config, "measure": {"compile_ahead": "never"}})
    assert fifth.returncode == 0, fifth.stdout[-3000:] + fifth.stderr[-3000:]
    assert "measure" not in re.findall(r"^local(?:rule|checkpoint) (\w+):", fifth.stderr, re.MULTILINE)
    assert json.loads(record_path.read_text())["skipped"] == "measure.compile_ahead: never"
    assert default_process.stat().st_mtime_ns == measured_at


@pytest.mark.parametrize("why, env", [("skip", {}), ("no lease", {"FABENCH_GPUS": "0,0"})])
def test_a_compile_ahead_that_compiles_nothing_records_why_leases_nothing_and_ends_well(tmp_path, why, env):
    """Rule compile_ahead's record is the report's input, so it is written whatever happens: told to
    skip (measure.compile_ahead, the runtime, the executor) it leases nothing; a GPU that cannot be
    leased is the reason recorded, exit 0 (the jobs then lease and compile for themselves)."""
    out = tmp_path / "compile-ahead.json"
    args = (["--skip", "measure.compile_ahead: never"] if why == "skip"
            else ["--spec", spec_of(tiny_config(), "default").to_json()])
    proc = subprocess.run([sys.executable, "-m", "fabench.measure.launch.precompile", *args, "--out", str(out)],
                          cwd=tmp_path, env={**environment(tmp_path), **env}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    record = read_side_file(out, COMPILE_AHEAD)
    expected = "measure.compile_ahead: never" if why == "skip" else "no device leased: FABENCH_GPUS='0,0'"
    assert record["skipped"].startswith(expected) and "processes" not in record
    assert not (tmp_path / "leases").exists() and not (tmp_path / "build").exists()
    assert f"compiling ahead: nothing ({expected}" in proc.stdout


def test_the_default_cpu_run_records_that_it_compiled_nothing_ahead_and_its_report_says_no_compile_ahead(tmp_path):
    config = tiny_config()
    config["shapes"] = [config["shapes"][0]]
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = read_side_file(tmp_path / "results" / "tiny" / "compile-ahead.json", COMPILE_AHEAD)
    assert record["skipped"] == "measure.compile_ahead: gpu on a CPU run"
    assert "compile_ahead" not in json.loads((tmp_path / "results" / "tiny" / "results.json").read_text())
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()
    assert "before the first measuring process started" in report and "compil" not in report.split(
        "Snakemake ran ")[1].split(". ")[0]


def record(started: float, processes: list[dict], gpu_uuid: str | None = "GPU-a") -> dict:
    return {"format": "fabench-compile-ahead-run/1", "started_at": started, "leased_at": started + 0.5,
            "ended_at": started + 30.5, "host": "h", "gpu": "0", "gpu_uuid": gpu_uuid, "parallel": 8,
            "workers_started": 2, "processes": processes}


def test_the_time_line_counts_the_compile_ahead_and_flags_a_job_measured_on_its_gpu_while_it_ran():
    """Constructed records: the compile ahead's summary, and the overlap that must not happen.
    Blind side: whether the Snakefile really starts it before any job is the workflow test above."""
    ahead = record(100.0, [{"backends": {"flex": {"status": "compiled"}, "fa4": {"status": "unavailable"},
                                         "triton": {"status": "failed"}}},
                           {"reason": "timed out", "backends": {}}])
    assert compile_ahead_summary(ahead) == {"seconds": 30.0, "processes": 2, "parallel": 8, "gpu": "GPU-a",
                                            "compiled": 1, "failed": 2, "cached": 0}
    early = {"job": "default b1", "process": 0, "gpu": "GPU-a", "host": "h", "start": 120.0, "end": 125.0}
    after = {**early, "start": 131.0, "end": 135.0}
    other_card = {**early, "gpu": "GPU-b"}
    assert compiled_while_measuring([early, after, other_card], ahead) == [
        "default b1 process 0 measured on GPU-a while kernels were compiled ahead there"]
    assert compiled_while_measuring([early], record(100.0, [], gpu_uuid=None)) == []


def test_an_earlier_workflows_compile_ahead_is_not_this_ones():
    result = {"variant": "default", "shape_id": SHAPE, "platform": "cuda", "backends": {},
              "method": {"process_exits": [{"index": 0, "gpu_uuid": "GPU-a", "host": "h"}]},
              "timelines": [{"process": 0, "phases": [{"phase": "warm-up", "start": 140.0, "end": 150.0}]}]}
    mine = run_time_line([result], workflow_started_at=99.0, report_at=160.0, compile_ahead=record(100.0, []))
    assert mine["compile_ahead"]["seconds"] == 30.0 and mine["before_first_process_s"] == 41.0
    assert mine["before_compile_ahead_s"] == 1.0 and mine["after_compile_ahead_s"] == 9.5
    assert mine["measure_span_s"] == 10.0
    earlier = run_time_line([result], workflow_started_at=101.0, report_at=160.0, compile_ahead=record(100.0, []))
    assert earlier["compile_ahead"] is None


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc; a zombie is not live)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_jobs_backends_compile_in_forks_that_end_with_the_compiling_process(tmp_path):
    """A job's compiled backends are built side by side, each in a process forked from the job's
    compiling process (precompile_child.compile_apart); the compile ahead kills that process when
    it runs past its bound, and a fork must not go on compiling on the GPU while jobs measure.
    Blind side: on a CPU one backend (FlexAttention) compiles, in its fork; two compiling side by
    side is the GPU's case, seen in a lease's compile-ahead record."""
    out = tmp_path / "record.json"
    child = subprocess.Popen([sys.executable, "-m", "fabench.measure.precompile_child",
                              "--spec", spec_of(flex_config(), "default").to_json(), "--out", str(out)],
                             cwd=tmp_path, env=environment(tmp_path), stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        forks = []
        while not forks and child.poll() is None and time.monotonic() < deadline:
            forks = children_of(child.pid)
            time.sleep(0.02)
        assert forks, "no forked compiling process seen"
        # The forks of backends that cannot run here end at once; FlexAttention's compiles for seconds.
        time.sleep(1.0)
        forks = children_of(child.pid)
        assert forks and child.poll() is None, "no fork compiling a second after they were forked"
        child.kill()
        child.wait()
        deadline = time.monotonic() + 10
        while any(map(alive, forks)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in forks if alive(pid)], "a fork outlived the compiling process it was forked from"
        assert not out.exists()
    finally:
        child.kill()
